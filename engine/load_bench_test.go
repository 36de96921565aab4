package engine

import (
	"context"
	"path/filepath"
	"testing"
)

// BenchmarkLoadONNX times Load of a reference ONNX file end to end (format
// detection, the ONNX Runtime session, the metadata check) and its Close: the
// work a model repository's on-demand load and eviction repeat per model.
func BenchmarkLoadONNX(b *testing.B) {
	for _, name := range []string{"digits_mlp", "resnet18"} {
		b.Run(name, func(b *testing.B) {
			path := filepath.Join(modelsDir(b), name+".onnx")
			for i := 0; i < b.N; i++ {
				m, err := Load(context.Background(), path, Options{Threads: 2})
				if err != nil {
					b.Fatal(err)
				}
				m.Close()
			}
		})
	}
}
