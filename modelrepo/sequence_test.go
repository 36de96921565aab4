package modelrepo

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fw-serve/fw/engine"
	"github.com/fw-serve/fw/httpapi"
	"github.com/fw-serve/fw/internal/testmodels"
	"github.com/fw-serve/fw/sequence"
	"github.com/fw-serve/fw/serving"
	"github.com/prometheus/client_golang/prometheus"
)

// Stateful models on the real engine: Triton's simple_sequence and
// simple_dyna_sequence and the implicit-state accumulator
// simple_sequence_state (python/fw/triton_samples.py), through the same
// calls both transports make (serving.EnterSequence, InferSequence).

// seqRepo is a repository of the sample model src copied as each name of
// configs, with its config.pbtxt edited by the replacements (old, new, ...).
func seqRepo(t *testing.T, src string, configs map[string][]string) string {
	t.Helper()
	root := t.TempDir()
	for name, edits := range configs {
		copyModel(t, filepath.Join(samples(t), src), root, name)
		p := filepath.Join(root, name, "config.pbtxt")
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		text := string(b)
		for i := 0; i+1 < len(edits); i += 2 {
			if !strings.Contains(text, edits[i]) {
				t.Fatalf("%s: %q is not in %s's configuration", name, edits[i], src)
			}
			text = strings.Replace(text, edits[i], edits[i+1], 1)
		}
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

func i32(v int32) engine.Tensor {
	d := make([]byte, 4)
	binary.LittleEndian.PutUint32(d, uint32(v))
	return engine.Tensor{DType: engine.Int32, Shape: []int64{1, 1}, Data: d}
}

// seqInfer sends x as one request of sequence id (a uint64 or a string)
// and returns OUTPUT.
func seqInfer(ctx context.Context, r *Repository, model string, id any, start, end bool, x int32) (int32, error) {
	inst, err := r.Get(model, "")
	if err != nil {
		return 0, err
	}
	var p serving.SequenceParams
	for name, v := range map[string]any{"sequence_id": id, "sequence_start": start, "sequence_end": end} {
		if _, err := p.Set(name, v); err != nil {
			return 0, err
		}
	}
	in := []engine.Tensor{i32(x)}
	tk, err := serving.EnterSequence(inst, p, in)
	if err != nil {
		return 0, err
	}
	defer tk.Release()
	out, _, err := serving.InferSequence(ctx, r, inst, in, tk)
	if err != nil {
		return 0, err
	}
	if len(out) != 1 || len(out[0].Data) != 4 {
		return 0, fmt.Errorf("outputs %v: want OUTPUT alone, one INT32 (the state stays in the server)", out)
	}
	return int32(binary.LittleEndian.Uint32(out[0].Data)), nil
}

// runSequence sends xs as one sequence and returns the outputs.
func runSequence(ctx context.Context, r *Repository, model string, id any, xs []int32) ([]int32, error) {
	var got []int32
	for i, x := range xs {
		y, err := seqInfer(ctx, r, model, id, i == 0, i == len(xs)-1, x)
		if err != nil {
			return got, fmt.Errorf("sequence %v request %d: %w", id, i, err)
		}
		got = append(got, y)
	}
	return got, nil
}

// The outputs Triton's sequence examples expect (simple_grpc_sequence_
// stream_infer_client.py, simple_http_sequence_sync_infer_client.py, with
// -d the dyna models): START adds one; the dyna models add the correlation
// ID on the END request; simple_string_dyna_sequence (a string ID, its
// CORRID TYPE_STRING) answers the running sum, START not added.
func TestSequenceExamplesExpectations(t *testing.T) {
	f := open(t, Config{Roots: []string{samples(t)}, Mode: ModeExplicit, LoadModels: []string{"simple_sequence", "simple_dyna_sequence", "simple_string_dyna_sequence"}})
	ctx := context.Background()
	values := []int32{11, 7, 5, 3, 2, 0, 1}
	neg := func(v []int32) []int32 {
		out := make([]int32, len(v))
		for i, x := range v {
			out[i] = -x
		}
		return out
	}
	for _, c := range []struct {
		model string
		id    any
		first int32
		xs    []int32
		dyna  bool
	}{
		{"simple_sequence", uint64(1000), 0, values, false},
		{"simple_sequence", uint64(1001), 100, neg(values), false},
		{"simple_sequence", "3f2504e0-4f89-11d3-9a0c-0305e82c3301", 20, neg(values), false},
		{"simple_dyna_sequence", uint64(1000), 0, values, true},
		{"simple_dyna_sequence", uint64(1001), 100, neg(values), true},
		{"simple_string_dyna_sequence", "1002", 20, neg(values), true},
	} {
		got, err := runSequence(ctx, f.repo, c.model, c.id, append([]int32{c.first}, c.xs...))
		if err != nil {
			t.Fatal(err)
		}
		want := append([]int32{c.first + 1}, c.xs...)
		if id, ok := c.id.(string); ok && c.dyna {
			want[0] = c.first
			for i := 1; i < len(want); i++ {
				want[i] += want[i-1]
			}
			n, _ := strconv.Atoi(id)
			want[len(want)-1] += int32(n)
		} else if c.dyna {
			want[len(want)-1] += int32(c.id.(uint64))
		}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("%s %v: %v, want %v", c.model, c.id, got, want)
		}
	}
}

// Many sequences at once on the implicit-state accumulator, under each
// strategy, more than it has slots: every one gets its own running sum,
// restarts at START and carries nothing into the next sequence of its ID.
func TestSequenceStrategiesInterleaved(t *testing.T) {
	root := seqRepo(t, "simple_sequence_state", map[string][]string{
		// Two slots (max_batch_size 2, one instance): the rest wait.
		"acc_direct": {"max_batch_size: 8", "max_batch_size: 2", "direct { }", "direct { max_queue_delay_microseconds: 500 }"},
		// Three candidate sequences, two engine instances.
		"acc_oldest": {"direct { }", "oldest { max_candidate_sequences: 3 preferred_batch_size: [ 4 ] max_queue_delay_microseconds: 1000 }",
			`output [`, "instance_group [ { count: 2 kind: KIND_CPU } ]\noutput ["},
	})
	f := open(t, Config{Roots: []string{root}})
	for model, slots := range map[string]int{"acc_direct": 2, "acc_oldest": 6} {
		inst, err := f.repo.Get(model, "")
		if err != nil {
			t.Fatal(err)
		}
		if got := inst.Sequences.Config().Slots; got != slots {
			t.Errorf("%s: %d slots, want %d", model, got, slots)
		}
		t.Run(model, func(t *testing.T) {
			ctx := context.Background()
			const seqs, steps = 10, 12
			var wg sync.WaitGroup
			errs := make(chan error, seqs)
			for s := range seqs {
				wg.Add(1)
				go func() {
					defer wg.Done()
					var id any = uint64(500 + s)
					if s%2 == 1 {
						id = fmt.Sprintf("%s-%d", model, s)
					}
					// Two sequences in turn under one ID: the second must
					// not see the first's sum.
					for round := range 2 {
						xs := make([]int32, steps)
						for i := range xs {
							xs[i] = int32(s*1000 + round*100 + i)
						}
						got, err := runSequence(ctx, f.repo, model, id, xs)
						if err != nil {
							errs <- err
							return
						}
						sum := int32(0)
						for i, x := range xs {
							sum += x
							if got[i] != sum {
								errs <- fmt.Errorf("sequence %v round %d: step %d answered %d, want the running sum %d (all: %v)", id, round, i, got[i], sum, got)
								return
							}
						}
					}
				}()
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Error(err)
			}
			snap := inst.Stats.Snapshot()
			t.Logf("%d rows in %d engine calls", snap.InferenceCount, snap.ExecutionCount)
			if n := inst.Sequences.Active(); n != 0 {
				t.Errorf("%d sequences held after every END", n)
			}
		})
	}
}

// A sequence ended, then started again under the same ID, begins from the
// initial state; START on a sequence still going restarts it; an unknown
// ID, a request without one, two rows, and sequence parameters to a
// stateless model are refused with Triton's sentences.
func TestSequenceRestartAndRefusals(t *testing.T) {
	f := open(t, Config{Roots: []string{samples(t)}, Mode: ModeExplicit,
		LoadModels: []string{"simple_sequence_state", "simple_dyna_sequence", "simple"}})
	r, ctx := f.repo, context.Background()
	m := "simple_sequence_state"
	step := func(id any, start, end bool, x, want int32) {
		t.Helper()
		got, err := seqInfer(ctx, r, m, id, start, end, x)
		if err != nil || got != want {
			t.Fatalf("sequence %v (start %v end %v) %d: %d %v, want %d", id, start, end, x, got, err, want)
		}
	}
	step(uint64(9), true, false, 5, 5)
	step(uint64(9), false, false, 6, 11)
	step(uint64(10), true, false, 100, 100) // another sequence: its own sum
	step(uint64(9), false, true, 1, 12)
	step(uint64(10), false, false, 1, 101)
	step(uint64(9), true, false, 7, 7) // the same ID again: a fresh sum
	step(uint64(9), true, false, 3, 3) // START while going: restarted
	step(uint64(9), false, false, 3, 6)

	refused := func(err error, want string) {
		t.Helper()
		if err == nil || !strings.Contains(err.Error(), want) || serving.Classify(err, time.Second).Kind != serving.KindBadRequest {
			t.Fatalf("got %v, want a bad request saying %q", err, want)
		}
	}
	_, err := seqInfer(ctx, r, m, uint64(77), false, false, 1)
	refused(err, "inference request for sequence 77 to model 'simple_sequence_state' must specify the START flag on the first request of the sequence")
	_, err = seqInfer(ctx, r, m, "", true, false, 1)
	refused(err, "inference request to model 'simple_sequence_state' must specify a non-zero or non-empty correlation ID")
	_, err = seqInfer(ctx, r, "simple_dyna_sequence", "abc", true, false, 1)
	refused(err, "sequence batching control 'CORRID' data-type is 'BYTES', but model 'simple_dyna_sequence' expects 'UINT64'")
	inst, _ := r.Get(m, "")
	_, _, err = serving.Infer(ctx, r, inst, []engine.Tensor{i32(1)}) // /predict cannot name a sequence
	refused(err, "must specify a non-zero or non-empty correlation ID; model \"simple_sequence_state\" is stateful")
	two := engine.Tensor{DType: engine.Int32, Shape: []int64{2, 1}, Data: make([]byte, 8)}
	_, err = serving.EnterSequence(inst, serving.SequenceParams{Given: []string{"sequence_id"}, ID: sequence.ID{N: 9}}, []engine.Tensor{two})
	refused(err, "inference request to model 'simple_sequence_state' must specify batch-size 1 due to requirements of sequence batcher")
	step(uint64(9), false, false, 4, 10) // the refused request did not enter sequence 9
	_, err = seqInfer(ctx, r, "simple", uint64(3), true, false, 1)
	if !errors.Is(err, serving.ErrNoSequenceBatching) {
		t.Fatalf("sequence parameters to a stateless model: %v", err)
	}
}

// A sequence idle past max_sequence_idle_microseconds is freed: its slot
// goes to a waiting sequence, and its next request is refused as if it had
// never started.
func TestSequenceIdleTimeout(t *testing.T) {
	root := seqRepo(t, "simple_sequence_state", map[string][]string{
		"acc": {"max_batch_size: 8", "max_batch_size: 1", "max_sequence_idle_microseconds: 5000000", "max_sequence_idle_microseconds: 50000"},
	})
	f := open(t, Config{Roots: []string{root}})
	ctx := context.Background()
	if _, err := seqInfer(ctx, f.repo, "acc", uint64(1), true, false, 5); err != nil {
		t.Fatal(err)
	}
	// Sequence 2 needs the only slot, which sequence 1 holds until it is
	// idle for 50 ms.
	start := time.Now()
	if got, err := seqInfer(ctx, f.repo, "acc", uint64(2), true, false, 7); err != nil || got != 7 {
		t.Fatalf("sequence 2: %d %v", got, err)
	}
	if waited := time.Since(start); waited < 40*time.Millisecond {
		t.Fatalf("sequence 2 ran after %s, before sequence 1 was idle for 50ms: the slot was not held", waited)
	}
	_, err := seqInfer(ctx, f.repo, "acc", uint64(1), false, false, 1)
	if err == nil || !strings.Contains(err.Error(), "inference request for sequence 1 to model 'acc' must specify the START flag on the first request of the sequence") {
		t.Fatalf("the idle sequence's next request: %v", err)
	}
}

// The initial state comes from initial_state: a data_file in the model's
// initial_state directory; START never true here, so the sum starts there.
func TestSequenceInitialStateFile(t *testing.T) {
	root := seqRepo(t, "simple_sequence_state", map[string][]string{
		"acc": {"bool_false_true: [ false, true ]", "bool_false_true: [ false, false ]", "zero_data: true", `data_file: "hundred"`},
	})
	if err := os.MkdirAll(filepath.Join(root, "acc", "initial_state"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "acc", "initial_state", "hundred"), []byte{100, 0, 0, 0}, 0o644); err != nil {
		t.Fatal(err)
	}
	f := open(t, Config{Roots: []string{root}})
	got, err := runSequence(context.Background(), f.repo, "acc", uint64(4), []int32{1, 2, 3})
	if err != nil || fmt.Sprint(got) != "[101 103 106]" {
		t.Fatalf("%v %v, want [101 103 106]", got, err)
	}
}

// The configuration reported (Triton's configuration extension) lists the
// client's tensors only and the sequence batching with Triton's defaults.
func TestSequenceConfigReported(t *testing.T) {
	f := open(t, Config{Roots: []string{samples(t)}, Mode: ModeExplicit, LoadModels: []string{"simple_sequence", "simple_dyna_sequence"}})
	inst, err := f.repo.Get("simple_sequence", "")
	if err != nil {
		t.Fatal(err)
	}
	c := inst.Config
	if len(c.Inputs) != 1 || c.Inputs[0].Name != "INPUT" || len(c.Outputs) != 1 || len(inst.Inputs()) != 1 {
		t.Fatalf("client tensors: %+v %+v", c.Inputs, c.Outputs)
	}
	sb := c.SequenceBatching
	if sb["max_sequence_idle_microseconds"] != int64(1000000) || sb["direct"] == nil || len(sb["control_input"].([]any)) != 2 {
		t.Fatalf("sequence_batching %v", sb)
	}
	if inst.Batcher.Config().MaxDelay != 0 || inst.Sequences.Config().Slots != 8 {
		t.Fatalf("batcher %+v, %d slots", inst.Batcher.Config(), inst.Sequences.Config().Slots)
	}
	dyna, _ := f.repo.Get("simple_dyna_sequence", "")
	if o := dyna.Config.SequenceBatching["oldest"].(map[string]any); fmt.Sprint(o["preferred_batch_size"]) != "[8]" || dyna.Sequences.Config().Slots != 2048 ||
		dyna.Batcher.Config().MaxDelay != 10*time.Millisecond || len(dyna.Batcher.Config().PreferredSizes) != 0 {
		t.Fatalf("oldest: %v, %d slots, %+v", o, dyna.Sequences.Config().Slots, dyna.Batcher.Config())
	}
}

// What fw cannot do with a sequence_batching configuration fails the load
// with the reason, Triton's sentence where it has one.
func TestSequenceConfigRefusals(t *testing.T) {
	f := func(edits []string, want string) {
		t.Helper()
		root := seqRepo(t, "simple_sequence_state", map[string][]string{"acc": edits})
		r, err := New(Config{Roots: []string{root}, Engine: engine.Options{Threads: 1}, SkipWarmup: true}, httpapi.NewMetrics(prometheus.NewRegistry()), quiet())
		if err != nil {
			t.Fatal(err)
		}
		err = r.Start(context.Background())
		_ = r.Shutdown(context.Background(), time.Minute)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%v: %v, want %q", edits, err, want)
		}
	}
	f([]string{`name: "READY" control`, `name: "NOPE" control`}, `the CONTROL_SEQUENCE_READY control names input "NOPE", which the model does not have`)
	f([]string{"bool_false_true: [ false, true ]", "int32_false_true: [ 0, 1 ]"}, `the model takes bool, the configuration sends int32`)
	f([]string{"fp32_false_true: [ 0, 1 ]", "fp32_false_true: [ 0 ]"}, "sequence batching control 'fp32_false_true' must have exactly 2 entries for CONTROL_SEQUENCE_READY for acc")
	f([]string{"kind: CONTROL_SEQUENCE_READY", "kind: CONTROL_SEQUENCE_START"}, "sequence batching specifies multiple CONTROL_SEQUENCE_START tensors for acc")
	f([]string{`output_name: "ACC_OUT"`, `output_name: "NOPE"`}, `state output_name "NOPE" is not an output of the model`)
	f([]string{"zero_data: true", `data_file: "missing"`}, "initial_state data_file")
	f([]string{"direct { }", "direct { minimum_slot_utilization: 1.5 }"}, "sequence batching minimum slot utilization must be in range (0.0, 1.0] for acc")
	f([]string{"direct { }", "direct { minimum_slot_utilization: -0.5 }"}, "sequence batching minimum slot utilization must be in range (0.0, 1.0] for acc")
	f([]string{`input [ { name: "INPUT"`, `input [ { name: "START" data_type: TYPE_BOOL dims: [ 1 ] }, { name: "INPUT"`},
		`input "START" is filled by the server (sequence_batching's control inputs and state); list only the inputs clients send`)
}

// dynaModel writes root/name, Triton's simple_dyna_sequence with its CORRID
// control of data_type corrType (TYPE_UINT64 ... TYPE_STRING): OUTPUT =
// READY * (INPUT + START + END * int32(CORRID)), the oldest strategy, so
// that requests of several sequences share engine calls. A string ID is
// cast to a number by the graph: it must be digits.
func dynaModel(t *testing.T, root, name, corrType string) {
	t.Helper()
	onnxType := map[string]int{"TYPE_UINT64": testmodels.ONNXUint64, "TYPE_INT64": testmodels.ONNXInt64, "TYPE_UINT32": testmodels.ONNXUint32,
		"TYPE_INT32": testmodels.ONNXInt32, "TYPE_STRING": testmodels.ONNXString}[corrType]
	dims := []any{"batch", 1}
	var ins []testmodels.ValueInfo
	for _, n := range []string{"INPUT", "START", "END", "READY"} {
		ins = append(ins, testmodels.ValueInfo{Name: n, Type: testmodels.ONNXInt32, Dims: dims})
	}
	ins = append(ins, testmodels.ValueInfo{Name: "CORRID", Type: onnxType, Dims: dims})
	testmodels.WriteONNX(t, root, filepath.Join(name, "1", "model.onnx"), []testmodels.Node{
		{Op: "Cast", Inputs: []string{"CORRID"}, Outputs: []string{"corrid"}, IntAttrs: map[string]int64{"to": testmodels.ONNXInt32}},
		{Op: "Add", Inputs: []string{"INPUT", "START"}, Outputs: []string{"a"}},
		{Op: "Mul", Inputs: []string{"END", "corrid"}, Outputs: []string{"b"}},
		{Op: "Add", Inputs: []string{"a", "b"}, Outputs: []string{"sum"}},
		{Op: "Mul", Inputs: []string{"READY", "sum"}, Outputs: []string{"OUTPUT"}},
	}, ins, []testmodels.ValueInfo{{Name: "OUTPUT", Type: testmodels.ONNXInt32, Dims: dims}})
	cfg := fmt.Sprintf(`name: %q
platform: "onnxruntime_onnx"
max_batch_size: 8
sequence_batching {
  oldest { max_candidate_sequences: 4 max_queue_delay_microseconds: 2000 }
  control_input [
    { name: "START" control [ { kind: CONTROL_SEQUENCE_START int32_false_true: [ 0, 1 ] } ] },
    { name: "END" control [ { kind: CONTROL_SEQUENCE_END int32_false_true: [ 0, 1 ] } ] },
    { name: "READY" control [ { kind: CONTROL_SEQUENCE_READY int32_false_true: [ 0, 1 ] } ] },
    { name: "CORRID" control [ { kind: CONTROL_SEQUENCE_CORRID data_type: %s } ] }
  ]
}
input [ { name: "INPUT" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "OUTPUT" data_type: TYPE_INT32 dims: [ 1 ] } ]
`, name, corrType)
	if err := os.WriteFile(filepath.Join(root, name, "config.pbtxt"), []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
}

// CORRID of each type Triton allows loads and reaches the model: the
// integer ones with the numeric ID, TYPE_STRING with the string ID (as
// Triton's simple_string_dyna_sequence), several sequences at once sharing
// engine calls. An ID of the other kind is refused with Triton's sentence.
// Before fw had unsigned and string tensors, TYPE_UINT64, TYPE_UINT32 and
// TYPE_STRING failed the load.
func TestSequenceCorrIDTypes(t *testing.T) {
	root := t.TempDir()
	types := []string{"TYPE_UINT64", "TYPE_INT64", "TYPE_UINT32", "TYPE_INT32", "TYPE_STRING"}
	for _, ct := range types {
		dynaModel(t, root, strings.ToLower(ct), ct)
	}
	f := open(t, Config{Roots: []string{root}})
	ctx := context.Background()
	values := []int32{0, 11, 7, 1}
	for _, ct := range types {
		model := strings.ToLower(ct)
		t.Run(ct, func(t *testing.T) {
			var wg sync.WaitGroup
			errs := make(chan error, 6)
			for k := range 6 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					n := int32(1000 + k)
					var id any = uint64(n)
					if ct == "TYPE_STRING" {
						id = fmt.Sprint(n)
					}
					got, err := runSequence(ctx, f.repo, model, id, values)
					want := []int32{1, 11, 7, 1 + n}
					if err == nil && fmt.Sprint(got) != fmt.Sprint(want) {
						err = fmt.Errorf("sequence %v: %v, want %v", id, got, want)
					}
					if err != nil {
						errs <- err
					}
				}()
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Error(err)
			}
			other, want := any("1001"), fmt.Sprintf("sequence batching control 'CORRID' data-type is 'BYTES', but model '%s' expects '%s'; send sequence_id as an unsigned integer", model, strings.TrimPrefix(ct, "TYPE_"))
			if ct == "TYPE_STRING" {
				other, want = uint64(1001), "sequence batching control 'CORRID' data-type is 'UINT64', but model 'type_string' expects 'BYTES'; send sequence_id as a string"
			}
			_, err := seqInfer(ctx, f.repo, model, other, true, false, 1)
			if err == nil || !strings.Contains(err.Error(), want) || serving.Classify(err, time.Second).Kind != serving.KindBadRequest {
				t.Fatalf("an ID of the other kind: %v, want a bad request saying %q", err, want)
			}
		})
	}
	inst, err := f.repo.Get("type_string", "")
	if err != nil {
		t.Fatal(err)
	}
	if cs := inst.Config.SequenceBatching["control_input"].([]any); fmt.Sprint(cs[3]) != "map[control:[map[bool_false_true:[] data_type:TYPE_STRING fp32_false_true:[] int32_false_true:[] kind:CONTROL_SEQUENCE_CORRID]] name:CORRID]" {
		t.Fatalf("CORRID reported as %v", cs[3])
	}
}

// A libtorch model cannot take unsigned or string tensors: a CORRID or a
// state of such a type fails the load, naming the control or state and
// its type, rather than every request.
func TestSequenceLibtorchRefusesTypes(t *testing.T) {
	if _, err := engine.TorchVersion(""); err != nil {
		testmodels.Require(t, "libtorch shim unavailable: "+err.Error())
	}
	ts := filepath.Join(testmodels.Dir(t), "digits_mlp.ts.pt")
	for _, c := range []struct{ seq, want string }{
		{`control_input [ { name: "CORRID" control [ { kind: CONTROL_SEQUENCE_CORRID data_type: TYPE_UINT64 } ] } ]`,
			`sequence_batching control CONTROL_SEQUENCE_CORRID (input "CORRID") has data_type TYPE_UINT64: uint64 tensors are not supported by libtorch models`},
		{`control_input [ { name: "CORRID" control [ { kind: CONTROL_SEQUENCE_CORRID data_type: TYPE_STRING } ] } ]`,
			`sequence_batching control CONTROL_SEQUENCE_CORRID (input "CORRID") has data_type TYPE_STRING: string tensors are not supported by libtorch models`},
		{`state [ { input_name: "S_IN" output_name: "S_OUT" data_type: TYPE_UINT32 dims: [ 1 ] } ]`,
			`sequence_batching state "S_IN" has data_type TYPE_UINT32: uint32 tensors are not supported by libtorch models`},
	} {
		root := t.TempDir()
		dir := filepath.Join(root, "ts", "1")
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(ts)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "model.pt"), b, 0o644); err != nil {
			t.Fatal(err)
		}
		cfg := "name: \"ts\"\nplatform: \"pytorch_libtorch\"\nmax_batch_size: 8\nsequence_batching { " + c.seq + " }\n"
		if err := os.WriteFile(filepath.Join(root, "ts", "config.pbtxt"), []byte(cfg), 0o644); err != nil {
			t.Fatal(err)
		}
		r, err := New(Config{Roots: []string{root}, Engine: engine.Options{Threads: 1}, SkipWarmup: true}, httpapi.NewMetrics(prometheus.NewRegistry()), quiet())
		if err != nil {
			t.Fatal(err)
		}
		err = r.Start(context.Background())
		_ = r.Shutdown(context.Background(), time.Minute)
		if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "or serve the model's ONNX export") {
			t.Errorf("%s: %v, want %q", c.seq, err, c.want)
		}
	}
}

// direct's minimum_slot_utilization and max_queue_delay_microseconds go to
// the slot scheduler (sequence.DirectConfig), which holds each batch; the
// model's batcher then holds nothing. oldest's preferred_batch_size becomes
// the batcher's preferred sizes.
func TestSequenceMinimumSlotUtilization(t *testing.T) {
	root := seqRepo(t, "simple_sequence_state", map[string][]string{
		"half":     {"direct { }", "direct { max_queue_delay_microseconds: 3000000 minimum_slot_utilization: 0.5 }"},
		"nodelay":  {"direct { }", "direct { minimum_slot_utilization: 0.5 }"},
		"fraction": {"direct { }", "direct { max_queue_delay_microseconds: 1000 minimum_slot_utilization: 0.3 }"},
		"oldest":   {"direct { }", "oldest { max_candidate_sequences: 4 preferred_batch_size: [ 4, 2 ] max_queue_delay_microseconds: 1000 }"},
		"tenth":    {"max_batch_size: 8", "max_batch_size: 10", "direct { }", "direct { max_queue_delay_microseconds: 1000 minimum_slot_utilization: 0.1 }"},
	})
	f := open(t, Config{Roots: []string{root}})
	// oldest's preferred sizes hold its batches as dynamic batching's do.
	oldest, err := f.repo.Get("oldest", "")
	if err != nil || fmt.Sprint(oldest.Batcher.Config().PreferredSizes) != "[2 4]" || oldest.Sequences.Config().Direct != nil {
		t.Fatalf("oldest's preferred sizes: %v %v", oldest.Batcher.Config().PreferredSizes, err)
	}
	for name, want := range map[string]sequence.DirectConfig{
		"half":     {Groups: 1, Size: 8, MaxDelay: 3 * time.Second, MinUtilization: 0.5},
		"nodelay":  {Groups: 1, Size: 8, MinUtilization: 0.5},
		"fraction": {Groups: 1, Size: 8, MaxDelay: time.Millisecond, MinUtilization: 0.3},
		"tenth":    {Groups: 1, Size: 10, MaxDelay: time.Millisecond, MinUtilization: 0.1},
	} {
		inst, err := f.repo.Get(name, "")
		if err != nil {
			t.Fatal(err)
		}
		if d := inst.Sequences.Config().Direct; d == nil || *d != want {
			t.Errorf("%s: slot scheduler %+v, want %+v", name, d, want)
		}
		if bc := inst.Batcher.Config(); bc.MinRows != 0 || bc.MaxDelay != 0 {
			t.Errorf("%s: the model's batcher holds batches too: %+v", name, bc)
		}
		if d := inst.Config.SequenceBatching["direct"].(map[string]any); fmt.Sprint(d["minimum_slot_utilization"]) == "0" {
			t.Errorf("%s: reported %v", name, d)
		}
	}
	// The sequence still runs: one request, held up to the delay for more rows.
	got, err := runSequence(context.Background(), f.repo, "fraction", uint64(7), []int32{1, 2})
	if err != nil || fmt.Sprint(got) != "[1 3]" {
		t.Fatalf("%v %v, want [1 3]", got, err)
	}
}
