package sequence

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fw-serve/fw/batcher"
	"github.com/fw-serve/fw/engine"
	"github.com/fw-serve/fw/internal/testleak"
)

func TestMain(m *testing.M) { testleak.Main(m) }

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// The model of these tests: INPUT, the controls and the state ACC_IN, all
// [-1,1]; OUTPUT and ACC_OUT. The fake engine (accumulate) sums INPUT into
// the state, restarting at START.
var (
	ins = []engine.TensorSpec{
		{Name: "INPUT", DType: engine.Int32, Shape: []int64{-1, 1}},
		{Name: "START", DType: engine.Int32, Shape: []int64{-1, 1}},
		{Name: "END", DType: engine.Float32, Shape: []int64{-1, 1}},
		{Name: "READY", DType: engine.Bool, Shape: []int64{-1, 1}},
		{Name: "CORRID", DType: engine.Int64, Shape: []int64{-1, 1}},
		{Name: "ACC_IN", DType: engine.Int32, Shape: []int64{-1, 1}},
	}
	outs = []engine.TensorSpec{
		{Name: "OUTPUT", DType: engine.Int32, Shape: []int64{-1, 1}},
		{Name: "ACC_OUT", DType: engine.Int32, Shape: []int64{-1, 1}},
	}
)

func config(slots int) Config {
	return Config{
		Model: "acc", Strategy: Direct, Slots: slots, MaxIdle: time.Hour,
		Controls: []Control{
			{Input: "START", Kind: Start, DType: engine.Int32, False: 0, True: 1},
			{Input: "END", Kind: End, DType: engine.Float32, False: 0, True: 2.5},
			{Input: "READY", Kind: Ready, DType: engine.Bool, False: 0, True: 1},
			{Input: "CORRID", Kind: CorrID, DType: engine.Int64},
		},
		States: []State{{Input: "ACC_IN", Output: "ACC_OUT", DType: engine.Int32, Dims: []int64{1}, InitialDims: []int64{1}}},
	}
}

func newBatcher(t *testing.T, cfg Config) *Batcher {
	t.Helper()
	b, err := New(cfg, ins, outs, true, quiet())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	return b
}

func i32(v int32) engine.Tensor {
	d := make([]byte, 4)
	binary.LittleEndian.PutUint32(d, uint32(v))
	return engine.Tensor{DType: engine.Int32, Shape: []int64{1, 1}, Data: d}
}

func val(t engine.Tensor) int32 { return int32(binary.LittleEndian.Uint32(t.Data)) }

// seen is what the fake engine was sent on one call.
type seen struct {
	input, start, accIn int32
	end                 float32
	ready               bool
	corrid              uint64
}

// engineLog is a fake engine: it records every call and accumulates.
type engineLog struct {
	mu    sync.Mutex
	calls []seen
}

func (e *engineLog) submit(_ context.Context, in []engine.Tensor) ([]engine.Tensor, batcher.Timing, error) {
	s := seen{
		input: val(in[0]), start: val(in[1]), end: math.Float32frombits(binary.LittleEndian.Uint32(in[2].Data)),
		ready: in[3].Data[0] == 1, corrid: binary.LittleEndian.Uint64(in[4].Data), accIn: val(in[5]),
	}
	e.mu.Lock()
	e.calls = append(e.calls, s)
	e.mu.Unlock()
	acc := s.accIn + s.input
	if s.start == 1 {
		acc = s.input
	}
	return []engine.Tensor{i32(acc), i32(acc)}, batcher.Timing{}, nil
}

// send admits and runs one request.
func send(b *Batcher, e *engineLog, id ID, start, end bool, x int32) (int32, error) {
	t, err := b.Enter(id, start, end)
	if err != nil {
		return 0, err
	}
	out, _, err := t.Run(context.Background(), []engine.Tensor{i32(x)}, e.submit)
	if err != nil {
		return 0, err
	}
	if len(out) != 1 {
		return 0, fmt.Errorf("%d outputs returned; the state must not be", len(out))
	}
	return val(out[0]), nil
}

func TestSplitsClientTensors(t *testing.T) {
	b := newBatcher(t, config(1))
	if in, out := b.Inputs(), b.Outputs(); len(in) != 1 || in[0].Name != "INPUT" || len(out) != 1 || out[0].Name != "OUTPUT" {
		t.Fatalf("client tensors: %v -> %v", in, out)
	}
	cfg := config(1)
	cfg.VisibleStates = []string{"ACC_OUT"}
	b2 := newBatcher(t, cfg)
	if out := b2.Outputs(); len(out) != 2 {
		t.Fatalf("a state listed as an output is the client's too: %v", out)
	}
}

// Many sequences at once, more than the slots: each gets its own running
// sum, in its own order, whatever the others do.
func TestInterleavedSequences(t *testing.T) {
	b := newBatcher(t, config(3))
	e := &engineLog{}
	const seqs, steps = 12, 25
	var wg sync.WaitGroup
	errs := make(chan error, seqs)
	for s := range seqs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			id := ID{N: uint64(1000 + s)}
			want := int32(0)
			for i := range steps {
				x := int32(s*100 + i)
				want += x
				got, err := send(b, e, id, i == 0, i == steps-1, x)
				if err != nil {
					errs <- err
					return
				}
				if got != want {
					errs <- fmt.Errorf("sequence %d step %d: %d, want %d", s, i, got, want)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if n := b.Active(); n != 0 {
		t.Errorf("%d sequences still held after every END", n)
	}
	if len(b.slots) != 0 {
		t.Errorf("%d slots still taken", len(b.slots))
	}
}

// Requests run in the order they were admitted, whatever order their
// callers reach Run in.
func TestAdmissionOrder(t *testing.T) {
	b := newBatcher(t, config(1))
	e := &engineLog{}
	id := ID{N: 7}
	var tickets []*Ticket
	for i := range 6 {
		tk, err := b.Enter(id, i == 0, i == 5)
		if err != nil {
			t.Fatal(err)
		}
		tickets = append(tickets, tk)
	}
	var wg sync.WaitGroup
	for i := len(tickets) - 1; i >= 0; i-- {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, _, err := tickets[i].Run(context.Background(), []engine.Tensor{i32(int32(i))}, e.submit); err != nil {
				t.Error(err)
			}
		}()
		time.Sleep(time.Millisecond) // the later ones reach Run first (the order is not timing's: any interleaving must pass)
	}
	wg.Wait()
	for i, c := range e.calls {
		if c.input != int32(i) {
			t.Fatalf("engine calls in order %v", e.calls)
		}
	}
}

func TestUnknownEndRestart(t *testing.T) {
	b := newBatcher(t, config(2))
	e := &engineLog{}
	_, err := send(b, e, ID{N: 42}, false, false, 1)
	var se *Error
	if !errors.As(err, &se) || err.Error() != "inference request for sequence 42 to model 'acc' must specify the START flag on the first request of the sequence" {
		t.Fatalf("unknown sequence: %v", err)
	}
	if _, err := send(b, e, ID{}, true, false, 1); err == nil || err.Error() != "inference request to model 'acc' must specify a non-zero or non-empty correlation ID" {
		t.Fatalf("no correlation ID: %v", err)
	}
	for i, x := range []int32{5, 6, 7} {
		if _, err := send(b, e, ID{N: 42}, i == 0, i == 2, x); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := send(b, e, ID{N: 42}, false, false, 1); err == nil || !strings.Contains(err.Error(), "must specify the START flag") {
		t.Fatalf("after END: %v", err)
	}
	// Started again: the state begins anew.
	if got, _ := send(b, e, ID{N: 42}, true, false, 100); got != 100 {
		t.Fatalf("restarted sequence: %d", got)
	}
	if got, _ := send(b, e, ID{N: 42}, false, false, 1); got != 101 {
		t.Fatalf("restarted sequence, next: %d", got)
	}
	// START on a sequence still going ends it early and begins again.
	if got, _ := send(b, e, ID{N: 42}, true, false, 9); got != 9 {
		t.Fatalf("conflicting START: %d", got)
	}
}

// String IDs are sequences of their own; a model whose CORRID control is
// an integer refuses them, with Triton's sentence.
func TestStringIDs(t *testing.T) {
	e := &engineLog{}
	if _, err := send(newBatcher(t, config(2)), e, ID{S: "abc"}, true, false, 1); err == nil ||
		!strings.Contains(err.Error(), "sequence batching control 'CORRID' data-type is 'BYTES', but model 'acc' expects 'INT64'; send sequence_id as an unsigned integer") {
		t.Fatalf("string ID to an INT64 CORRID model: %v", err)
	}
	cfg := config(2)
	cfg.Controls = cfg.Controls[:3] // no CORRID
	noCorr := append(append([]engine.TensorSpec{}, ins[:4]...), ins[5])
	b, err := New(cfg, noCorr, outs, true, quiet())
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	sub := func(ctx context.Context, in []engine.Tensor) ([]engine.Tensor, batcher.Timing, error) {
		return e.submit(ctx, []engine.Tensor{in[0], in[1], in[2], in[3], {DType: engine.Int64, Shape: []int64{1, 1}, Data: make([]byte, 8)}, in[4]})
	}
	run := func(id ID, start bool, x int32) int32 {
		tk, err := b.Enter(id, start, false)
		if err != nil {
			t.Fatal(err)
		}
		out, _, err := tk.Run(context.Background(), []engine.Tensor{i32(x)}, sub)
		if err != nil {
			t.Fatal(err)
		}
		return val(out[0])
	}
	run(ID{S: "a"}, true, 1)
	run(ID{N: 1}, true, 50)
	if got := run(ID{S: "a"}, false, 2); got != 3 {
		t.Fatalf("string sequence: %d", got)
	}
}

// CORRID of each of Triton's types: the ID's little-endian bytes (cut to
// four for the 32-bit ones), or a string ID as one BYTES element; an ID of
// the other kind is refused before it enters a sequence, with Triton's
// sentence, and a model without CORRID takes both kinds.
func TestCorrIDTypes(t *testing.T) {
	for _, c := range []struct {
		dt       engine.DType
		id       ID
		want     []byte
		other    ID
		mismatch string
	}{
		{engine.Uint64, ID{N: 1<<63 + 5}, []byte{5, 0, 0, 0, 0, 0, 0, 0x80}, ID{S: "7"}, "data-type is 'BYTES', but model 'm' expects 'UINT64'"},
		{engine.Int64, ID{N: 1<<40 + 3}, []byte{3, 0, 0, 0, 0, 1, 0, 0}, ID{S: "x"}, "data-type is 'BYTES', but model 'm' expects 'INT64'"},
		{engine.Uint32, ID{N: 1<<32 + 9}, []byte{9, 0, 0, 0}, ID{S: "x"}, "data-type is 'BYTES', but model 'm' expects 'UINT32'"},
		{engine.Int32, ID{N: 0xfffffffe}, []byte{0xfe, 0xff, 0xff, 0xff}, ID{S: "x"}, "data-type is 'BYTES', but model 'm' expects 'INT32'"},
		{engine.String, ID{S: "seq-é"}, append([]byte{6, 0, 0, 0}, "seq-é"...), ID{N: 42},
			"sequence batching control 'CORRID' data-type is 'UINT64', but model 'm' expects 'BYTES'; send sequence_id as a string (sequence_id 42 was sent as an integer)"},
	} {
		t.Run(c.dt.String(), func(t *testing.T) {
			specs := []engine.TensorSpec{{Name: "INPUT", DType: engine.Int32, Shape: []int64{-1, 1}}, {Name: "CORRID", DType: c.dt, Shape: []int64{-1, 1}}}
			cfg := Config{Model: "m", Slots: 2, MaxIdle: time.Hour, Controls: []Control{{Input: "CORRID", Kind: CorrID, DType: c.dt}}}
			b, err := New(cfg, specs, outs[:1], true, quiet())
			if err != nil {
				t.Fatal(err)
			}
			defer b.Close()
			var got []engine.Tensor
			submit := func(_ context.Context, in []engine.Tensor) ([]engine.Tensor, batcher.Timing, error) {
				got = append(got, in[1])
				return []engine.Tensor{in[0]}, batcher.Timing{}, nil
			}
			for i := range 2 {
				tk, err := b.Enter(c.id, i == 0, i == 1)
				if err != nil {
					t.Fatal(err)
				}
				if _, _, err := tk.Run(context.Background(), []engine.Tensor{i32(1)}, submit); err != nil {
					t.Fatal(err)
				}
			}
			for _, g := range got {
				if g.DType != c.dt || fmt.Sprint(g.Shape) != "[1 1]" || string(g.Data) != string(c.want) || g.Check() != nil {
					t.Fatalf("CORRID sent %s %v % x, want %s [1 1] % x", g.DType, g.Shape, g.Data, c.dt, c.want)
				}
			}
			_, err = b.Enter(c.other, true, false)
			var re *Error
			if !errors.As(err, &re) || !strings.Contains(err.Error(), c.mismatch) {
				t.Fatalf("an ID of the other kind: %v, want %q", err, c.mismatch)
			}
			if _, err := b.Enter(ID{}, true, false); err == nil || !strings.Contains(err.Error(), "must specify a non-zero or non-empty correlation ID") {
				t.Fatalf("no ID: %v", err)
			}
			if n := b.Active(); n != 0 {
				t.Fatalf("%d sequences held: the refused ID entered one", n)
			}
		})
	}
	specs := []engine.TensorSpec{{Name: "INPUT", DType: engine.Int32, Shape: []int64{-1, 1}}, {Name: "CORRID", DType: engine.Float32, Shape: []int64{-1, 1}}}
	_, err := New(Config{Model: "m", Controls: []Control{{Input: "CORRID", Kind: CorrID, DType: engine.Float32}}}, specs, outs[:1], true, quiet())
	if err == nil || !strings.Contains(err.Error(), "it takes uint64, int64, uint32, int32 or string") {
		t.Fatalf("a float32 CORRID: %v", err)
	}
	specs[1].DType = engine.Int64
	_, err = New(Config{Model: "m", Controls: []Control{{Input: "CORRID", Kind: CorrID, DType: engine.String}}}, specs, outs[:1], true, quiet())
	if err == nil || !strings.Contains(err.Error(), "the model takes int64, the configuration sends string") {
		t.Fatalf("a string CORRID for an int64 input: %v", err)
	}
}

func TestControls(t *testing.T) {
	b := newBatcher(t, config(1))
	e := &engineLog{}
	id := ID{N: 1<<40 + 3}
	for i := range 3 {
		if _, err := send(b, e, id, i == 0, i == 2, 1); err != nil {
			t.Fatal(err)
		}
	}
	want := []seen{
		{input: 1, start: 1, end: 0, ready: true, corrid: 1<<40 + 3, accIn: 0},
		{input: 1, start: 0, end: 0, ready: true, corrid: 1<<40 + 3, accIn: 1},
		{input: 1, start: 0, end: 2.5, ready: true, corrid: 1<<40 + 3, accIn: 2},
	}
	for i := range want {
		if e.calls[i] != want[i] {
			t.Errorf("call %d: %+v, want %+v", i, e.calls[i], want[i])
		}
	}
}

func TestInitialState(t *testing.T) {
	cfg := config(1)
	cfg.Controls[0].True = 0 // START never set: the state alone restarts the sum
	d := make([]byte, 4)
	binary.LittleEndian.PutUint32(d, 100)
	cfg.States[0].Initial = d
	b := newBatcher(t, cfg)
	e := &engineLog{}
	for i, want := range []int32{101, 103} {
		if got, err := send(b, e, ID{N: 5}, i == 0, false, int32(i+1)); err != nil || got != want {
			t.Fatalf("step %d: %d %v, want %d", i, got, err, want)
		}
	}
	cfg.States[0].Initial = d[:2]
	if _, err := New(cfg, ins, outs, true, quiet()); err == nil || !strings.Contains(err.Error(), "holds 2 bytes") {
		t.Fatalf("short initial state: %v", err)
	}
}

func TestBatchSizeOne(t *testing.T) {
	b := newBatcher(t, config(1))
	tk, err := b.Enter(ID{N: 1}, true, false)
	if err != nil {
		t.Fatal(err)
	}
	two := engine.Tensor{DType: engine.Int32, Shape: []int64{2, 1}, Data: make([]byte, 8)}
	_, _, err = tk.Run(context.Background(), []engine.Tensor{two}, (&engineLog{}).submit)
	if err == nil || err.Error() != "inference request to model 'acc' must specify batch-size 1 due to requirements of sequence batcher" {
		t.Fatalf("two rows: %v", err)
	}
}

// An idle sequence is freed: its slot goes to a waiting sequence and its
// later requests are refused.
func TestIdleSequenceFreed(t *testing.T) {
	cfg := config(1)
	cfg.MaxIdle = time.Minute
	b := newBatcher(t, cfg)
	clock := time.Unix(1000, 0)
	var mu sync.Mutex
	b.now = func() time.Time { mu.Lock(); defer mu.Unlock(); return clock }
	e := &engineLog{}
	if _, err := send(b, e, ID{N: 1}, true, false, 1); err != nil {
		t.Fatal(err)
	}
	// Sequence 2 waits for the only slot.
	got := make(chan error, 1)
	go func() { _, err := send(b, e, ID{N: 2}, true, false, 1); got <- err }()
	select {
	case err := <-got:
		t.Fatalf("sequence 2 ran while 1 held the slot: %v", err)
	case <-time.After(20 * time.Millisecond):
	}
	if n := b.reap(clock.Add(59 * time.Second)); n != 0 {
		t.Fatalf("freed %d sequences before their time", n)
	}
	mu.Lock()
	clock = clock.Add(time.Minute)
	mu.Unlock()
	// Sequence 2 is pending (waiting for its slot), so only 1 is freed.
	if n := b.reap(clock); n != 1 {
		t.Fatalf("freed %d sequences, want 1", n)
	}
	if err := <-got; err != nil {
		t.Fatal(err)
	}
	if _, err := send(b, e, ID{N: 1}, false, false, 1); err == nil || !strings.Contains(err.Error(), "sequence 1 to model 'acc' must specify the START flag") {
		t.Fatalf("request of a freed sequence: %v", err)
	}
}

// A request cancelled while it waits for its turn gives the turn on
// without running, and only after the request before it has finished.
func TestCancelWhileWaiting(t *testing.T) {
	b := newBatcher(t, config(1))
	release := make(chan struct{})
	var order []int32
	var mu sync.Mutex
	submit := func(_ context.Context, in []engine.Tensor) ([]engine.Tensor, batcher.Timing, error) {
		if val(in[0]) == 1 {
			<-release
		}
		mu.Lock()
		order = append(order, val(in[0]))
		mu.Unlock()
		return []engine.Tensor{in[0], in[0]}, batcher.Timing{}, nil
	}
	id := ID{N: 3}
	t1, _ := b.Enter(id, true, false)
	t2, _ := b.Enter(id, false, false)
	t3, _ := b.Enter(id, false, false)
	done1 := make(chan error, 1)
	go func() { _, _, err := t1.Run(context.Background(), []engine.Tensor{i32(1)}, submit); done1 <- err }()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, _, err := t2.Run(ctx, []engine.Tensor{i32(2)}, submit); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled request: %v", err)
	}
	done3 := make(chan error, 1)
	go func() { _, _, err := t3.Run(context.Background(), []engine.Tensor{i32(3)}, submit); done3 <- err }()
	select {
	case <-done3:
		t.Fatal("request 3 ran before request 1 finished")
	case <-time.After(20 * time.Millisecond):
	}
	close(release)
	if err := <-done1; err != nil {
		t.Fatal(err)
	}
	if err := <-done3; err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(order) != "[1 3]" {
		t.Fatalf("order %v", order)
	}
	// A ticket released unused passes its turn on too.
	t4, _ := b.Enter(id, false, false)
	t4.Release()
	t4.Release()
	if _, err := send(b, &engineLog{}, id, false, true, 1); err != nil {
		t.Fatal(err)
	}
}

func TestClose(t *testing.T) {
	b, err := New(config(1), ins, outs, true, quiet())
	if err != nil {
		t.Fatal(err)
	}
	e := &engineLog{}
	if _, err := send(b, e, ID{N: 1}, true, false, 1); err != nil {
		t.Fatal(err)
	}
	waiting := make(chan error, 1)
	go func() { _, err := send(b, e, ID{N: 2}, true, false, 1); waiting <- err }()
	time.Sleep(10 * time.Millisecond) // usually waiting for the slot by now; either way it must fail
	b.Close()
	b.Close()
	if err := <-waiting; !errors.Is(err, batcher.ErrClosed) {
		t.Fatalf("waiting for a slot at Close: %v", err)
	}
	if _, err := b.Enter(ID{N: 3}, true, false); !errors.Is(err, batcher.ErrClosed) {
		t.Fatalf("Enter after Close: %v", err)
	}
}

func TestConfigChecked(t *testing.T) {
	f := func(mut func(*Config), want string) {
		t.Helper()
		cfg := config(1)
		mut(&cfg)
		_, err := New(cfg, ins, outs, true, quiet())
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("got %v, want %q", err, want)
		}
	}
	f(func(c *Config) { c.Controls[0].Input = "NOPE" }, `names input "NOPE", which the model does not have`)
	f(func(c *Config) { c.Controls[0].DType = engine.Float32 }, "the model takes int32, the configuration sends float32")
	f(func(c *Config) { c.Controls[1].Input = "START" }, `input "START" is both`)
	f(func(c *Config) { c.States[0].Output = "NOPE" }, `state output_name "NOPE" is not an output`)
	f(func(c *Config) { c.States[0].InitialDims = []int64{2} }, "the model's shape is [N, 1], the sequence batcher sends [1, 2]")
}

// A model without a batch axis (max_batch_size 0): each control is a [1]
// tensor and the state has its own dims, no batch axis; any row count
// passes (there are no rows).
func TestUnbatchedModel(t *testing.T) {
	in := []engine.TensorSpec{
		{Name: "INPUT", DType: engine.Int32, Shape: []int64{3}},
		{Name: "START", DType: engine.Int32, Shape: []int64{1}},
		{Name: "ACC_IN", DType: engine.Int32, Shape: []int64{3}},
	}
	out := []engine.TensorSpec{{Name: "ACC_OUT", DType: engine.Int32, Shape: []int64{3}}}
	cfg := Config{Model: "nb", Slots: 1, MaxIdle: time.Hour,
		Controls: []Control{{Input: "START", Kind: Start, DType: engine.Int32, True: 1}},
		States:   []State{{Input: "ACC_IN", Output: "ACC_OUT", DType: engine.Int32, Dims: []int64{3}, InitialDims: []int64{3}}}}
	b, err := New(cfg, in, out, false, quiet())
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if got := b.Outputs(); len(got) != 0 {
		t.Fatalf("client outputs %v: the state is the server's", got)
	}
	var shapes []string
	submit := func(_ context.Context, in []engine.Tensor) ([]engine.Tensor, batcher.Timing, error) {
		shapes = append(shapes, fmt.Sprint(in[1].Shape, in[2].Shape))
		acc := make([]byte, 12)
		for i := range 3 {
			v := int32(binary.LittleEndian.Uint32(in[0].Data[4*i:])) + int32(binary.LittleEndian.Uint32(in[2].Data[4*i:]))
			binary.LittleEndian.PutUint32(acc[4*i:], uint32(v))
		}
		return []engine.Tensor{{DType: engine.Int32, Shape: []int64{3}, Data: acc}}, batcher.Timing{}, nil
	}
	x := engine.Tensor{DType: engine.Int32, Shape: []int64{3}, Data: []byte{1, 0, 0, 0, 2, 0, 0, 0, 3, 0, 0, 0}}
	if err := b.CheckRows([]engine.Tensor{x}); err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		tk, err := b.Enter(ID{N: 1}, i == 0, false)
		if err != nil {
			t.Fatal(err)
		}
		if _, _, err := tk.Run(context.Background(), []engine.Tensor{x}, submit); err != nil {
			t.Fatal(err)
		}
	}
	if fmt.Sprint(shapes) != "[[1] [3] [1] [3]]" {
		t.Fatalf("control and state shapes %v", shapes)
	}
}

// A response that leaves the state output out does not update the state:
// the next request gets the state the last one got (Triton's
// L0_implicit_state test_no_update).
func TestStateNotUpdated(t *testing.T) {
	b := newBatcher(t, config(1))
	var accIns []int32
	submit := func(_ context.Context, in []engine.Tensor) ([]engine.Tensor, batcher.Timing, error) {
		accIns = append(accIns, val(in[5]))
		if val(in[0]) == 7 { // this call updates the state
			return []engine.Tensor{in[0], i32(40)}, batcher.Timing{}, nil
		}
		return []engine.Tensor{in[0], {}}, batcher.Timing{}, nil
	}
	id := ID{N: 9}
	for k, v := range []int32{1, 2, 7, 3, 4} {
		tk, err := b.Enter(id, k == 0, false)
		if err != nil {
			t.Fatal(err)
		}
		if _, _, err := tk.Run(context.Background(), []engine.Tensor{i32(v)}, submit); err != nil {
			t.Fatal(err)
		}
		tk.Release()
	}
	if fmt.Sprint(accIns) != "[0 0 0 40 40]" {
		t.Fatalf("state inputs %v, want the initial 0 until the one update, then 40", accIns)
	}
}

// A BYTES (TYPE_STRING) implicit state starts as empty strings and carries
// what the model answers, as Triton's onnx_*_sequence_object models keep it.
func TestStringState(t *testing.T) {
	sIns := []engine.TensorSpec{{Name: "INPUT", DType: engine.Int32, Shape: []int64{-1, 1}}, {Name: "S_IN", DType: engine.String, Shape: []int64{-1, 2}}}
	sOuts := []engine.TensorSpec{{Name: "OUTPUT", DType: engine.Int32, Shape: []int64{-1, 1}}, {Name: "S_OUT", DType: engine.String, Shape: []int64{-1, 2}}}
	b, err := New(Config{Model: "strs", Strategy: Direct, Slots: 1, MaxIdle: time.Hour,
		States: []State{{Input: "S_IN", Output: "S_OUT", DType: engine.String, Dims: []int64{2}, InitialDims: []int64{2}}}}, sIns, sOuts, true, quiet())
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	strs := func(ss ...string) engine.Tensor {
		var d []byte
		for _, s := range ss {
			d = engine.AppendString(d, s)
		}
		return engine.Tensor{DType: engine.String, Shape: []int64{1, int64(len(ss))}, Data: d}
	}
	var got []string
	submit := func(_ context.Context, in []engine.Tensor) ([]engine.Tensor, batcher.Timing, error) {
		got = append(got, fmt.Sprintf("%q", in[1].Data))
		n := val(in[0])
		return []engine.Tensor{in[0], strs(fmt.Sprint(n), fmt.Sprint(n*10))}, batcher.Timing{}, nil
	}
	for k, v := range []int32{1, 2} {
		tk, err := b.Enter(ID{N: 5}, k == 0, false)
		if err != nil {
			t.Fatal(err)
		}
		if _, _, err := tk.Run(context.Background(), []engine.Tensor{i32(v)}, submit); err != nil {
			t.Fatal(err)
		}
		tk.Release()
	}
	want := []string{fmt.Sprintf("%q", make([]byte, 8)), fmt.Sprintf("%q", strs("1", "10").Data)}
	if !slices.Equal(got, want) {
		t.Fatalf("state inputs %v, want two empty strings, then the first answer's", got)
	}
}

// A sequence waiting for a slot past a request's timeout (the "timeout"
// parameter) fails, every request of it waiting, with Triton's sentence,
// and is forgotten: its next request must START it again. A sequence
// holding a slot is not timed out; one without a timeout waits.
func TestBacklogTimeout(t *testing.T) {
	b := newBatcher(t, config(1))
	e := &engineLog{}
	if _, err := send(b, e, ID{N: 1}, true, false, 1); err != nil { // sequence 1 holds the only slot
		t.Fatal(err)
	}
	timeout := func(d time.Duration) context.Context {
		return batcher.WithQueueOptions(context.Background(), batcher.QueueOptions{Timeout: d})
	}
	start, err := b.Enter(ID{N: 2}, true, false)
	if err != nil {
		t.Fatal(err)
	}
	next, err := b.Enter(ID{N: 2}, false, false)
	if err != nil {
		t.Fatal(err)
	}
	errs := make(chan error, 2)
	go func() { _, _, err := next.Run(context.Background(), []engine.Tensor{i32(5)}, e.submit); errs <- err }()
	go func() {
		_, _, err := start.Run(timeout(50*time.Millisecond), []engine.Tensor{i32(4)}, e.submit)
		errs <- err
	}()
	for range 2 {
		if err := <-errs; !errors.Is(err, ErrBacklogTimeout) || err.Error() != "timeout of the corresponding sequence has been expired" {
			t.Fatalf("a backlogged sequence past its timeout: %v", err)
		}
	}
	if _, err := b.Enter(ID{N: 2}, false, true); err == nil || !strings.Contains(err.Error(), "must specify the START flag") {
		t.Fatalf("the expired sequence's next request: %v, want a START refusal", err)
	}
	// Sequence 1, holding its slot, is not timed out by its own timeouts.
	one, err := b.Enter(ID{N: 1}, false, false)
	if err != nil {
		t.Fatal(err)
	}
	if out, _, err := one.Run(timeout(time.Nanosecond), []engine.Tensor{i32(2)}, e.submit); err != nil || val(out[0]) != 3 {
		t.Fatalf("a slotted sequence with a timeout: %v %v", out, err)
	}
	// Without a timeout a backlogged sequence waits; when sequence 1 ends it
	// gets the slot.
	waiting, err := b.Enter(ID{N: 3}, true, true)
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan error, 1)
	go func() { _, _, err := waiting.Run(context.Background(), []engine.Tensor{i32(7)}, e.submit); got <- err }()
	if _, err := send(b, e, ID{N: 1}, false, true, 1); err != nil {
		t.Fatal(err)
	}
	if err := <-got; err != nil {
		t.Fatalf("a backlogged sequence without a timeout: %v", err)
	}
	if n := b.Active(); n != 0 {
		t.Fatalf("%d sequences left", n)
	}
}

// A growable state (use_growable_memory) may grow past its dims, keeping
// its rank and datatype; without it the model's larger state is refused.
func TestGrowableState(t *testing.T) {
	grow := func(_ context.Context, in []engine.Tensor) ([]engine.Tensor, batcher.Timing, error) {
		st := in[5]
		n := int64(len(st.Data)/4) + 1 // one element more each call
		out := engine.Tensor{DType: engine.Int32, Shape: []int64{1, n}, Data: append(bytes.Clone(st.Data), in[0].Data...)}
		return []engine.Tensor{in[0], out}, batcher.Timing{}, nil
	}
	for _, growable := range []bool{true, false} {
		cfg := config(1)
		cfg.States[0].Growable = growable
		cfg.States[0].Dims = []int64{1}
		b := newBatcher(t, cfg)
		id := ID{N: 3}
		var err error
		for k := range 3 {
			var tk *Ticket
			if tk, err = b.Enter(id, k == 0, false); err != nil {
				t.Fatal(err)
			}
			if _, _, err = tk.Run(context.Background(), []engine.Tensor{i32(int32(k))}, grow); err != nil {
				break
			}
		}
		switch {
		case growable && err != nil:
			t.Fatalf("a growable state growing: %v", err)
		case !growable && (err == nil || !strings.Contains(err.Error(), `state output "ACC_OUT" is int32 [2], but the state is int32 [1]`)):
			t.Fatalf("a fixed state growing: %v", err)
		}
	}
}
