//go:build !cgo || !linux

package sysinfo

// nvmlBuilt: this build reports no GPUs (gpu_none.go).
const nvmlBuilt = false
