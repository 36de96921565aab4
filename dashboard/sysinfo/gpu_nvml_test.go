//go:build cgo && linux

package sysinfo

// nvmlBuilt: this build reads GPUs through NVML (gpu_nvml.go).
const nvmlBuilt = true
