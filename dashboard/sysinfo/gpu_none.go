//go:build !cgo || !linux

package sysinfo

import "log/slog"

// openGPUs: NVML needs cgo on Linux; without it GPUs are not reported.
func openGPUs(*slog.Logger) gpuReader { return nil }
