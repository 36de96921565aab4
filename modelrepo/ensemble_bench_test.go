package modelrepo

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/fw-serve/fw/serving"
)

// BenchmarkEnsemble times one request of one row, in process (no
// transport): to Triton's simple directly, through an ensemble of one step
// around it, and through add_sub_twice (three steps, two of them side by
// side), so the cost an ensemble adds per request and per step reads off
// the difference. "parallel" runs 16 requests at a time on each.
func BenchmarkEnsemble(b *testing.B) {
	src := samples(b)
	root := b.TempDir()
	copyModel(b, filepath.Join(src, "simple"), root, "simple")
	writeEnsemble(b, root, "add_sub_twice", addSubTwice)
	writeEnsemble(b, root, "one_step", `platform: "ensemble"
max_batch_size: 8
input [ { name: "A" data_type: TYPE_INT32 dims: [ 16 ] }, { name: "B" data_type: TYPE_INT32 dims: [ 16 ] } ]
output [ { name: "S" data_type: TYPE_INT32 dims: [ 16 ] }, { name: "D" data_type: TYPE_INT32 dims: [ 16 ] } ]
ensemble_scheduling { step [ { model_name: "simple" input_map { key: "INPUT0" value: "A" } input_map { key: "INPUT1" value: "B" }
  output_map { key: "OUTPUT0" value: "S" } output_map { key: "OUTPUT1" value: "D" } } ] }
`)
	f := open(b, Config{Roots: []string{root}, Mode: ModeExplicit, LoadModels: []string{"add_sub_twice", "one_step"}})
	for _, name := range []string{"simple", "one_step", "add_sub_twice"} {
		inst, err := f.repo.Get(name, "")
		if err != nil {
			b.Fatal(err)
		}
		in := simpleInputs(1)
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, _, err := serving.Infer(context.Background(), f.repo, inst, in); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(name+"/parallel", func(b *testing.B) {
			b.SetParallelism(8) // 16 goroutines on 2 CPUs
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if _, _, err := serving.Infer(context.Background(), f.repo, inst, in); err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
	}
}
