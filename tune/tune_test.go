package tune

import (
	"errors"
	"fmt"
	"testing"
	"time"

	pb "github.com/fw-serve/fw/grpcapi/inferencepb"
	"google.golang.org/protobuf/encoding/prototext"
)

// The grid starts with fw serve's defaults, holds no setting twice, keeps
// instances within the CPUs and never waits for a batch of one row.
func TestGrid(t *testing.T) {
	def := Setting{MaxBatch: 64, MaxDelay: time.Millisecond, Instances: 1, Threads: 2, Default: true}
	g := Grid(2, def)
	if g[0] != def {
		t.Fatalf("first setting %+v, want the defaults", g[0])
	}
	seen := map[Setting]bool{}
	for _, s := range g {
		k := s
		k.Default = false
		if seen[k] {
			t.Fatalf("%s twice", s)
		}
		seen[k] = true
		if s.Instances > 2 || s.Threads < 1 || s.Instances*s.Threads > 2 || (s.MaxBatch == 1 && s.MaxDelay != 0) {
			t.Fatalf("setting %s does not fit 2 CPUs", s)
		}
	}
	if len(g) != 21 {
		t.Fatalf("%d settings on 2 CPUs, want 21", len(g))
	}
	def.Threads = 8
	if n := len(Grid(8, def)); n != 28 { // 4 layouts x 7
		t.Fatalf("%d settings on 8 CPUs", n)
	}
}

// Rank puts the settings meeting the target first, highest sustained
// throughput first, then the others by p99, failures last.
func TestRank(t *testing.T) {
	pt := func(rps float64, p99 time.Duration) Point {
		return Point{Concurrency: 1, Answered: 10, Throughput: rps, P99: p99}
	}
	rs := []Result{
		{Setting: Setting{MaxBatch: 1}, Points: []Point{pt(900, 20*time.Millisecond)}},
		{Setting: Setting{MaxBatch: 2}, Err: errors.New("broken")},
		{Setting: Setting{MaxBatch: 3}, Points: []Point{pt(500, 5*time.Millisecond), pt(800, 4*time.Millisecond)}},
		{Setting: Setting{MaxBatch: 4}, Points: []Point{pt(600, 9*time.Millisecond)}},
		{Setting: Setting{MaxBatch: 5}, Points: []Point{pt(1000, 12*time.Millisecond)}},
		{Setting: Setting{MaxBatch: 6}, Points: []Point{{Concurrency: 1, Answered: 10, Failed: 1, Throughput: 2000, P99: time.Millisecond}}},
	}
	Rank(rs, 10*time.Millisecond)
	var order []int
	for _, r := range rs {
		order = append(order, r.Setting.MaxBatch)
	}
	if got := fmt.Sprint(order); got != "[4 3 6 5 1 2]" {
		t.Fatalf("order %s", got)
	}
	if rs[0].Score() != 600 || rs[1].Score() != 500 {
		t.Fatalf("scores %v %v", rs[0].Score(), rs[1].Score())
	}
}

func TestPercentile(t *testing.T) {
	var xs []time.Duration
	for i := 1; i <= 100; i++ {
		xs = append(xs, time.Duration(i))
	}
	if percentile(xs, 0.5) != 51 || percentile(xs, 0.99) != 99 || percentile(xs, 1) != 100 || percentile(nil, 0.5) != 0 {
		t.Fatalf("percentiles %v %v %v", percentile(xs, 0.5), percentile(xs, 0.99), percentile(xs, 1))
	}
}

// Pbtxt turns the served configuration into the winner's config.pbtxt:
// its batch rows, queue delay, instances and threads; a stateful model's
// sequence batching is kept.
func TestPbtxt(t *testing.T) {
	served := []byte(`{"name":"digits_mlp","platform":"onnxruntime_onnx","max_batch_size":64,
		"input":[{"name":"input","data_type":"TYPE_FP32","dims":["64"]}],"output":[{"name":"logits","data_type":"TYPE_FP32","dims":["10"]}],
		"dynamic_batching":{"max_queue_delay_microseconds":"1000"},"instance_group":[{"count":1,"kind":"KIND_CPU"}],"some_future_field":1}`)
	text, err := Pbtxt(served, Setting{MaxBatch: 8, MaxDelay: 2500 * time.Microsecond, Instances: 2, Threads: 1})
	if err != nil {
		t.Fatal(err)
	}
	cfg := &pb.ModelConfig{}
	if err := prototext.Unmarshal(text, cfg); err != nil {
		t.Fatalf("%v\n%s", err, text)
	}
	if cfg.GetName() != "digits_mlp" || cfg.GetMaxBatchSize() != 8 || cfg.GetDynamicBatching().GetMaxQueueDelayMicroseconds() != 2500 ||
		len(cfg.GetInstanceGroup()) != 1 || cfg.GetInstanceGroup()[0].GetCount() != 2 ||
		cfg.GetParameters()["intra_op_thread_count"].GetStringValue() != "1" || len(cfg.GetInput()) != 1 ||
		cfg.GetParameters()["fw_hold_when_idle"].GetStringValue() != "false" { // measured with an idle engine never waiting
		t.Fatalf("config:\n%s", text)
	}
	seq := []byte(`{"name":"s","max_batch_size":8,"sequence_batching":{"max_sequence_idle_microseconds":"5000000"}}`)
	text, err = Pbtxt(seq, Setting{MaxBatch: 4, Instances: 1, Threads: 2})
	if err != nil {
		t.Fatal(err)
	}
	cfg = &pb.ModelConfig{}
	if err := prototext.Unmarshal(text, cfg); err != nil || cfg.GetSequenceBatching() == nil || cfg.GetMaxBatchSize() != 8 {
		t.Fatalf("stateful config changed: %v\n%s", err, text)
	}
	if _, err := Pbtxt([]byte(`{"max_batch_size": "x"}`), Setting{}); err == nil {
		t.Fatal("a broken served configuration was accepted")
	}
}
