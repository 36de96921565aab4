package modelhost

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/fw-serve/fw/batcher"
	"github.com/fw-serve/fw/engine"
	"github.com/fw-serve/fw/httpapi"
	"github.com/fw-serve/fw/imageprep"
	"github.com/fw-serve/fw/internal/procstat"
	"github.com/fw-serve/fw/internal/testmodels"
	"github.com/prometheus/client_golang/prometheus"
)

// BenchmarkStartShutdown times what a model repository's on-demand load and
// eviction cost per model with fw serve's defaults: the engine load, the
// test vector and image test case, the warm-up batches, the batcher; then the
// drain and free.
// "samples" shares a SampleCache across the loads, as a repository does.
func BenchmarkStartShutdown(b *testing.B) {
	path := filepath.Join(testmodels.Dir(b), "digits_mlp.onnx")
	metrics := httpapi.NewMetrics(prometheus.NewRegistry())
	for _, bc := range []struct {
		name    string
		samples *imageprep.SampleCache
	}{{"nocache", nil}, {"samples", imageprep.NewSampleCache(8 << 20)}} {
		b.Run(bc.name, func(b *testing.B) {
			cpu0 := processCPU(b)
			for i := 0; i < b.N; i++ {
				h := New(Config{Path: path, Engine: engine.Options{Threads: 2}, Batcher: batcher.DefaultConfig(), ImageSamples: bc.samples}, metrics, quietLog())
				if err := h.Start(context.Background()); err != nil {
					b.Fatal(err)
				}
				if err := h.Shutdown(context.Background(), deadline); err != nil {
					b.Fatal(err)
				}
			}
			// CPU, all threads (ONNX Runtime's included), is what a load
			// takes from the models that keep serving beside it.
			b.ReportMetric(float64((processCPU(b)-cpu0).Microseconds())/1000/float64(b.N), "cpu-ms/op")
		})
	}
}

// processCPU is this process's user+system CPU time so far, all threads.
func processCPU(b *testing.B) time.Duration {
	d, err := procstat.CPU(os.Getpid())
	if err != nil {
		b.Fatal(err)
	}
	return d
}
