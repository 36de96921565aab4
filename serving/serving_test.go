package serving

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fw-serve/fw/batcher"
	"github.com/fw-serve/fw/engine"
	"github.com/fw-serve/fw/sequence"
)

func TestStatsRecordAndBatches(t *testing.T) {
	var s Stats
	t0 := time.Unix(1_800_000_000, 0)
	var wg sync.WaitGroup
	for i := range 100 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ok := i%10 != 0
			s.Record(Request{Began: t0, Submitted: t0.Add(time.Millisecond), Encoded: t0.Add(5 * time.Millisecond), OK: ok,
				Timing: batcher.Timing{Queue: time.Millisecond, Infer: 2 * time.Millisecond, BatchRows: 4}})
			s.BatchRun(1+i%3, 1, 0, time.Millisecond, nil)
		}()
	}
	wg.Wait()
	s.BatchRun(8, 2, 0, time.Millisecond, errors.New("engine failed")) // failed calls are not executions
	snap := s.Snapshot()
	ms := uint64(time.Millisecond)
	if snap.Success != (Duration{90, 90 * 5 * ms}) || snap.Fail != (Duration{10, 10 * 5 * ms}) ||
		snap.Queue != (Duration{90, 90 * ms}) || snap.ComputeInput != (Duration{90, 90 * ms}) ||
		snap.ComputeInfer != (Duration{90, 180 * ms}) || snap.ComputeOutput != (Duration{90, 90 * ms}) {
		t.Fatalf("stage durations: %+v", snap)
	}
	if snap.ExecutionCount != 100 || snap.InferenceCount != 34*1+33*2+33*3 || snap.LastInference != uint64(t0.Add(5*time.Millisecond).UnixMilli()) {
		t.Fatalf("counts: %+v", snap)
	}
	if len(snap.Batches) != 3 || snap.Batches[0].BatchSize != 1 || snap.Batches[2].BatchSize != 3 ||
		snap.Batches[0].ComputeInfer.Count != 34 || snap.Batches[1].ComputeInfer.Count != 33 {
		t.Fatalf("batches, smallest first: %+v", snap.Batches)
	}
}

func TestClassify(t *testing.T) {
	for _, c := range []struct {
		err  error
		kind Kind
		hint string
	}{
		{&engine.InputError{Input: "x", Msg: "bad"}, KindInvalidInput, `input "x": bad`},
		{fmt.Errorf("%w: 5 requests waiting (MaxQueue)", batcher.ErrQueueFull), KindOverloaded, "5 requests waiting (MaxQueue)); retry"},
		{batcher.ErrQueueTimeout, KindOverloaded, "Request timeout expired"},
		{sequence.ErrBacklogTimeout, KindOverloaded, "timeout of the corresponding sequence has been expired"},
		{batcher.ErrClosed, KindNotReady, "being replaced"},
		{context.DeadlineExceeded, KindTimeout, "within 3s (--timeout)"},
		{context.Canceled, KindNotReady, "shutting down"},
		{errors.New("boom"), KindEngine, "engine failed on this request: wrapped: boom"},
		{&SequenceError{Model: "m", Params: []string{"sequence_id"}}, KindBadRequest, `"sequence_id" is for stateful sequences, and model "m" has no sequence batching`},
		{&sequence.Error{Msg: "inference request for sequence 3 to model 'm' must specify the START flag"}, KindBadRequest, "sequence 3 to model 'm' must specify the START flag"},
	} {
		f := Classify(fmt.Errorf("wrapped: %w", c.err), 3*time.Second)
		if f.Kind != c.kind || !strings.Contains(f.Message, c.hint) {
			t.Errorf("%v: got %+v, want kind %d with %q", c.err, f, c.kind, c.hint)
		}
	}
}

func TestKeys(t *testing.T) {
	var none Keys
	if none.Required() {
		t.Fatal("the zero Keys requires a key")
	}
	k := NewKeys([]string{"k1", "k2"})
	for header, want := range map[string]KeyCheck{
		"Bearer k1": KeyValid, "bearer k2": KeyValid, "BEARER  k1 ": KeyValid,
		"Bearer k3": KeyInvalid, "Bearer ": KeyMissing, "Basic k1": KeyMissing, "": KeyMissing, "k1": KeyMissing,
	} {
		if got := k.Check([]byte(header)); got != want {
			t.Errorf("Check(%q) = %d, want %d", header, got, want)
		}
	}
	if !k.Required() {
		t.Fatal("keys configured but not required")
	}
}

// int8 ONNX files run on ONNX Runtime, so Triton's clients see them as ONNX
// models; TorchScript, quantized or not, is libtorch's.
func TestPlatformAndBackend(t *testing.T) {
	f := func(format engine.Format, platform, backend string) {
		t.Helper()
		if got := Platform(format); got != platform {
			t.Errorf("Platform(%s) = %s, want %s", format, got, platform)
		}
		if got := Backend(format); got != backend {
			t.Errorf("Backend(%s) = %s, want %s", format, got, backend)
		}
	}
	f(engine.FormatONNX, "onnxruntime_onnx", "onnxruntime")
	f(engine.FormatONNXInt8, "onnxruntime_onnx", "onnxruntime")
	f(engine.FormatTorchScript, "pytorch_libtorch", "pytorch")
	f(engine.FormatQuantized, "pytorch_libtorch", "pytorch")
}

// Sequence parameters to a model without sequence batching are refused
// with one message naming all of those given, sorted, whatever order they
// come in; other parameters pass.
func TestEnterSequenceStateless(t *testing.T) {
	inst := &Instance{Model: &engine.Model{Path: "/models/nobatch.onnx"}}
	f := func(params []string, want string) {
		t.Helper()
		var p SequenceParams
		for _, name := range params {
			v := any(true)
			if name == "sequence_id" {
				v = int64(7)
			}
			if _, err := p.Set(name, v); err != nil {
				t.Fatal(err)
			}
		}
		tk, err := EnterSequence(inst, p, nil)
		if tk != nil {
			t.Fatal("a ticket from a model without sequence batching")
		}
		if want == "" {
			if err != nil {
				t.Errorf("EnterSequence(%q) = %v, want nil", params, err)
			}
			return
		}
		if !errors.Is(err, ErrNoSequenceBatching) || err.Error() != want {
			t.Errorf("EnterSequence(%q) = %v,\nwant %s", params, err, want)
		}
	}
	f(nil, "")
	f([]string{"priority", "timeout", "binary_data_output"}, "")
	all := `request parameters "sequence_end", "sequence_id", "sequence_start" are for stateful sequences, and model "nobatch" has no sequence batching (fw answers each request on its own); send the request without them`
	f([]string{"sequence_start", "sequence_id", "sequence_end"}, all)
	f([]string{"sequence_end", "priority", "sequence_start", "sequence_id"}, all)
	f([]string{"sequence_id"}, `request parameter "sequence_id" is for stateful sequences, and model "nobatch" has no sequence batching (fw answers each request on its own); send the request without it`)
	f([]string{"sequence_start", "sequence_end"}, `request parameters "sequence_end", "sequence_start" are for stateful sequences, and model "nobatch" has no sequence batching (fw answers each request on its own); send the request without them`)
}

// Both transports read sequence parameters through Set: the same values
// are taken and the same ones refused, with the same words.
func TestSequenceParamsSet(t *testing.T) {
	f := func(name string, v any, want SequenceParams, wantErr string) {
		t.Helper()
		var p SequenceParams
		ok, err := p.Set(name, v)
		if !ok && name != "priority" {
			t.Errorf("Set(%q) says it is not a sequence parameter", name)
		}
		if wantErr != "" {
			if err == nil || err.Error() != wantErr {
				t.Errorf("Set(%q, %v) = %v, want %s", name, v, err, wantErr)
			}
			return
		}
		p.Given = nil
		if err != nil || fmt.Sprint(p) != fmt.Sprint(want) {
			t.Errorf("Set(%q, %v) = %+v %v, want %+v", name, v, p, err, want)
		}
	}
	f("sequence_id", int64(5), SequenceParams{ID: sequence.ID{N: 5}}, "")
	f("sequence_id", uint64(1<<63+1), SequenceParams{ID: sequence.ID{N: 1<<63 + 1}}, "")
	f("sequence_id", "abc", SequenceParams{ID: sequence.ID{S: "abc"}}, "")
	f("sequence_start", true, SequenceParams{Start: true}, "")
	f("sequence_end", true, SequenceParams{End: true}, "")
	f("sequence_id", int64(-1), SequenceParams{}, `request parameter "sequence_id" must be an unsigned integer or a string, got -1`)
	f("sequence_id", true, SequenceParams{}, `request parameter "sequence_id" must be an unsigned integer or a string, got a boolean`)
	f("sequence_id", strings.Repeat("x", 129), SequenceParams{}, `request parameter "sequence_id": a string correlation ID cannot be longer than 128 characters`)
	f("sequence_start", int64(1), SequenceParams{}, `request parameter "sequence_start" must be true or false, got 1`)
	f("sequence_end", OtherValue("an object"), SequenceParams{}, `request parameter "sequence_end" must be true or false, got an object`)
	var p SequenceParams
	if ok, err := p.Set("priority", int64(1)); ok || err != nil || len(p.Given) != 0 {
		t.Errorf("priority: %v %v %+v", ok, err, p)
	}
}

func TestTooManyRows(t *testing.T) {
	if s := TooManyRows("x", []int64{5, 3}, 4); s != `input "x": shape [5,3] has 5 rows on its first axis, above the limit of 4 per request (--max-rows); split the request` {
		t.Errorf("5 rows over 4: %q", s)
	}
	for _, c := range []struct {
		shape []int64
		max   int
	}{{[]int64{4, 3}, 4}, {[]int64{}, 4}, {[]int64{9}, 0}} {
		if s := TooManyRows("x", c.shape, c.max); s != "" {
			t.Errorf("TooManyRows(%v, %d) = %q, want none", c.shape, c.max, s)
		}
	}
}

func TestInputFormat(t *testing.T) {
	img := func(im engine.ImagePreprocessing) *engine.Metadata {
		return &engine.Metadata{Preprocessing: &engine.Preprocessing{Image: &im}}
	}
	cases := []struct {
		meta *engine.Metadata
		i    int
		dims []int64
		want string
	}{
		{img(engine.ImagePreprocessing{Channels: 3, Layout: "NCHW"}), 0, []int64{3, 224, 224}, "FORMAT_NCHW"},
		{img(engine.ImagePreprocessing{Channels: 1}), 0, []int64{1, -1, -1}, "FORMAT_NCHW"},
		{img(engine.ImagePreprocessing{Channels: 1}), 0, []int64{-1, 8, 8}, "FORMAT_NCHW"},
		{img(engine.ImagePreprocessing{Channels: 3}), 1, []int64{3, 224, 224}, "FORMAT_NONE"},       // not the image input
		{img(engine.ImagePreprocessing{Channels: 1, Flatten: true}), 0, []int64{64}, "FORMAT_NONE"}, // flattened
		{img(engine.ImagePreprocessing{Channels: 3}), 0, []int64{1, 224, 224}, "FORMAT_NONE"},       // channels disagree
		{&engine.Metadata{}, 0, []int64{3, 224, 224}, "FORMAT_NONE"},
		{nil, 0, []int64{3, 224, 224}, "FORMAT_NONE"},
	}
	for _, c := range cases {
		if got := InputFormat(c.meta, c.i, c.dims); got != c.want {
			t.Errorf("InputFormat(%+v, %d, %v) = %s, want %s", c.meta, c.i, c.dims, got, c.want)
		}
	}
}
