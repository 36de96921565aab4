package modelrepo

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/fw-serve/fw/batcher"
	"github.com/fw-serve/fw/serving"
)

// dynamic_batching's priority levels and queue policies reach the
// model's batcher; Triton's refusals come with its sentences.
func TestQueuePoliciesReachTheBatcher(t *testing.T) {
	f := open(t, Config{Roots: []string{samples(t)}, Mode: ModeExplicit})
	ctx := context.Background()
	err := f.repo.Load(ctx, "simple", serving.LoadOptions{Config: []byte(`{"max_batch_size": 8, "dynamic_batching": {
		"priority_levels": 3, "default_priority_level": 2, "preserve_ordering": true,
		"default_queue_policy": {"max_queue_size": 4, "default_timeout_microseconds": 18446744073709551615},
		"priority_queue_policy": {"1": {"timeout_action": "DELAY", "default_timeout_microseconds": 1500, "allow_timeout_override": true, "max_queue_size": 2}}}}`)})
	if err != nil {
		t.Fatal(err)
	}
	inst, err := f.repo.Get("simple", "")
	if err != nil {
		t.Fatal(err)
	}
	q := inst.Batcher.Config().Queues
	want := batcher.Queues{Levels: 3, DefaultLevel: 2,
		Policy:  batcher.QueuePolicy{MaxQueue: 4, Timeout: time.Duration(1<<63 - 1)},
		ByLevel: map[uint64]batcher.QueuePolicy{1: {MaxQueue: 2, Timeout: 1500 * time.Microsecond, AllowOverride: true, Delay: true}}}
	if q.Levels != want.Levels || q.DefaultLevel != want.DefaultLevel || q.Policy != want.Policy || len(q.ByLevel) != 1 || q.ByLevel[1] != want.ByLevel[1] {
		t.Fatalf("queues %+v, want %+v", q, want)
	}
	if !inst.Batcher.Config().PreserveOrdering || !inst.Config.PreserveOrdering {
		t.Fatal("preserve_ordering did not reach the batcher and the reported configuration")
	}
	if got := inst.Batcher.Config().MaxQueue; got != 10 {
		t.Fatalf("max queue %d, want 10: levels 2 and 3 are bounded at 4 each and level 1 at 2", got)
	}
	if err := inferSimple(ctx, f.repo, "simple"); err != nil {
		t.Fatal(err)
	}

	for cfg, sentence := range map[string]string{
		`{"priority_levels": 3}`: "default priority level must be in range [1, 3] for simple",
		`{"priority_levels": 3, "default_priority_level": 2, "priority_queue_policy": {"0": {}}}`:                    "priority queue policy must have priority level in range [1, 3] for simple",
		`{"priority_queue_policy": {"1": {}}}`:                                                                       "priority_queue_policy needs priority_levels",
		`{"default_priority_level": 1}`:                                                                              "default_priority_level needs priority_levels",
		`{"default_queue_policy": {"timeout_action": 7}}`:                                                            "default_queue_policy timeout_action 7 is not an action",
		`{"priority_levels": 2, "default_priority_level": 1, "priority_queue_policy": {"2": {"timeout_action": 9}}}`: "priority_queue_policy 2 timeout_action 9",
	} {
		err := f.repo.Load(ctx, "simple", serving.LoadOptions{Config: []byte(`{"max_batch_size": 8, "dynamic_batching": ` + cfg + `}`)})
		if err == nil || !strings.Contains(err.Error(), "failed to load 'simple'") || !strings.Contains(err.Error(), sentence) {
			t.Errorf("%s: %v, want %q", cfg, err, sentence)
		}
	}
}

// queueSizes: the policies' bounds raise the queue's past fw's default
// only when every level is bounded.
func TestQueueSizes(t *testing.T) {
	for _, c := range []struct {
		q    batcher.Queues
		want int
	}{
		{batcher.Queues{}, 0},
		{batcher.Queues{Policy: batcher.QueuePolicy{MaxQueue: 5000}}, 5000},
		{batcher.Queues{Levels: 3, Policy: batcher.QueuePolicy{MaxQueue: 1000}, ByLevel: map[uint64]batcher.QueuePolicy{2: {MaxQueue: 10}}}, 2010},
		{batcher.Queues{Levels: 3, Policy: batcher.QueuePolicy{MaxQueue: 1000}, ByLevel: map[uint64]batcher.QueuePolicy{2: {}}}, 0},
		{batcher.Queues{Levels: 3, ByLevel: map[uint64]batcher.QueuePolicy{2: {MaxQueue: 1}}}, 0},
		{batcher.Queues{Levels: 1 << 62, Policy: batcher.QueuePolicy{MaxQueue: 8}}, maxPolicyQueue},
	} {
		if got := queueSizes(c.q); got != c.want {
			t.Errorf("queueSizes(%+v) = %d, want %d", c.q, got, c.want)
		}
	}
}

// A parameter fw does not act on for an ONNX model is logged at load,
// not ignored silently; intra_op_thread_count is acted on.
func TestUnusedParametersLogged(t *testing.T) {
	var buf syncBuffer
	f := openLogged(t, Config{Roots: []string{samples(t)}, Mode: ModeExplicit}, slog.New(slog.NewTextHandler(&buf, nil)))
	err := f.repo.Load(context.Background(), "simple", serving.LoadOptions{Config: []byte(`{"max_batch_size": 8, "parameters": {
		"intra_op_thread_count": {"string_value": "1"}, "execution_mode": {"string_value": "1"}, "inter_op_thread_count": {"string_value": "2"}}}`)})
	if err != nil {
		t.Fatal(err)
	}
	log := buf.String()
	if !strings.Contains(log, "level=WARN") || !strings.Contains(log, "parameters=\"[execution_mode inter_op_thread_count]\"") || !strings.Contains(log, "model=simple") {
		t.Fatalf("log %q", log)
	}
}
