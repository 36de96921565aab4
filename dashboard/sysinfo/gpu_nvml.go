//go:build cgo && linux

package sysinfo

import (
	"errors"
	"log/slog"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// nvmlGPUs reads GPUs through NVML, dlopen'ed by go-nvml at run time.
type nvmlGPUs struct{ lib nvml.Interface }

// openGPUs loads NVML; nil (no GPUs, no error) where it is not installed.
func openGPUs(log *slog.Logger) gpuReader {
	lib := nvml.New()
	if ret := lib.Init(); ret != nvml.SUCCESS {
		if log != nil {
			log.Debug("no NVML: GPUs are not reported", "reason", nvml.ErrorString(ret))
		}
		return nil
	}
	return &nvmlGPUs{lib: lib}
}

func (g *nvmlGPUs) Read() ([]GPU, error) {
	n, ret := g.lib.DeviceGetCount()
	if ret != nvml.SUCCESS {
		return nil, errors.New(g.lib.ErrorString(ret))
	}
	out := make([]GPU, 0, n)
	for i := 0; i < n; i++ {
		d, ret := g.lib.DeviceGetHandleByIndex(i)
		if ret != nvml.SUCCESS {
			continue
		}
		gpu := GPU{Index: i}
		gpu.Name, _ = d.GetName()
		if u, ret := d.GetUtilizationRates(); ret == nvml.SUCCESS {
			gpu.Utilization = float64(u.Gpu)
		}
		if m, ret := d.GetMemoryInfo(); ret == nvml.SUCCESS {
			gpu.MemoryUsed, gpu.MemoryTotal = m.Used, m.Total
		}
		if t, ret := d.GetTemperature(nvml.TEMPERATURE_GPU); ret == nvml.SUCCESS {
			gpu.TemperatureC = float64(t)
		}
		out = append(out, gpu)
	}
	return out, nil
}

func (g *nvmlGPUs) Close() { g.lib.Shutdown() }
