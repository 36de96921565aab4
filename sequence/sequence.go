// Package sequence is Triton's sequence batcher for stateful models. A
// sequence is the requests that carry one correlation ID (sequence_id),
// from one with the START flag to one with the END flag. The batcher keeps,
// for each sequence:
//
//   - its order: its requests run one at a time, in the order they were
//     admitted (Enter), each after the previous one has finished;
//   - its implicit state: the state outputs of one request (sequence_batching
//     state) become the state inputs of the next, and are not returned to
//     the client unless the configuration lists them as outputs;
//   - its slot: at most Config.Slots sequences are served at once; a new
//     sequence beyond them waits for one to end or to be idle past
//     Config.MaxIdle (Triton's backlog). A request's queue timeout (the
//     "timeout" parameter, batcher.QueueOptions) bounds that wait for its
//     whole sequence: past it, every request of the sequence waiting fails
//     with ErrBacklogTimeout and the sequence is forgotten, as Triton's.
//
// The control inputs (START, END, READY, CORRID) are filled by the batcher,
// never sent by the client. The engine calls themselves go through the
// model's dynamic batcher (the SubmitFunc given to Run), so requests of
// different sequences share them: with Config.Direct in batches the
// Batcher forms slot by slot as Triton's direct strategy does (direct.go),
// a sequence's slot its row; otherwise request by request. fw's engines
// keep no state between calls: a sequence's state is only what the
// batcher holds.
package sequence

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fw-serve/fw/batcher"
	"github.com/fw-serve/fw/engine"
)

// Strategy is how the sequence batcher of a model is configured: Triton's
// direct (a sequence holds one of max_batch_size slots per instance) or
// oldest (max_candidate_sequences per instance, dynamically batched).
type Strategy string

// The strategies.
const (
	Direct Strategy = "direct"
	Oldest Strategy = "oldest"
)

// Kind is what a control input tells the model.
type Kind int

// The control kinds, numbered as Triton's ModelSequenceBatching.Control.Kind.
const (
	// Start is true on the first request of a sequence.
	Start Kind = iota
	// Ready is true on a row that holds a request, false on a null
	// request's (Config.Direct's padding of a free slot).
	Ready
	// End is true on the last request of a sequence.
	End
	// CorrID is the sequence's correlation ID.
	CorrID
)

func (k Kind) String() string {
	return [...]string{"CONTROL_SEQUENCE_START", "CONTROL_SEQUENCE_READY", "CONTROL_SEQUENCE_END", "CONTROL_SEQUENCE_CORRID"}[k]
}

// Control is one control input: a model input the batcher fills.
type Control struct {
	Input string
	Kind  Kind
	// DType is the input's: Int32, Float32 or Bool for a flag (Triton's
	// int32_false_true, fp32_false_true, bool_false_true); for CorrID one
	// of CorrIDTypes: an integer type takes numeric IDs, String takes
	// string IDs.
	DType engine.DType
	// False and True are a flag's values.
	False, True float64
}

// CorrIDTypes are the datatypes a CorrID control may have, Triton's:
// TYPE_UINT64, TYPE_INT64, TYPE_UINT32, TYPE_INT32 and TYPE_STRING.
var CorrIDTypes = []engine.DType{engine.Uint64, engine.Int64, engine.Uint32, engine.Int32, engine.String}

// State is one implicit state: the model input Input receives what the
// model output Output gave on the sequence's previous request.
type State struct {
	Input, Output string
	DType         engine.DType
	// Dims are the state's dimensions without the batch axis; -1 is any
	// size.
	Dims []int64
	// Growable (Triton's use_growable_memory) lets the model's state
	// output take any shape of the state's rank: a state that grows past
	// Dims as a sequence goes on.
	Growable bool
	// InitialDims and Initial are the state the first request of a
	// sequence receives: InitialDims fixed, Initial its bytes (row-major,
	// little-endian), or nil for zeros.
	InitialDims []int64
	Initial     []byte
}

// Config is a model's sequence batching.
type Config struct {
	// Model names the model in messages.
	Model    string
	Strategy Strategy
	// Slots is how many sequences are served at once; a new sequence
	// beyond them waits for a free slot.
	Slots int
	// MaxIdle frees a sequence that has had no request for this long: its
	// later requests are refused as if it had never started.
	MaxIdle  time.Duration
	Controls []Control
	States   []State
	// VisibleStates are the state outputs a client may request (listed as
	// outputs in the configuration, Triton's rule for debugging).
	VisibleStates []string
	// Direct, for a batched model with the direct strategy, makes the
	// batcher form its batches slot by slot as Triton's does (direct.go);
	// Slots is then Groups*Size. Nil: requests go to the model's dynamic
	// batcher one by one.
	Direct *DirectConfig
}

// ID is a correlation ID: an unsigned integer (N) or a string (S, when
// not empty). Zero and "" mean "not in a sequence".
type ID struct {
	N uint64
	S string
}

func (id ID) String() string {
	if id.S != "" {
		return id.S
	}
	return strconv.FormatUint(id.N, 10)
}

// Zero reports whether id names no sequence.
func (id ID) Zero() bool { return id.N == 0 && id.S == "" }

// ErrBacklogTimeout fails the requests of a sequence that waited for a
// slot past a request's timeout (Triton's UNAVAILABLE, its sentence).
var ErrBacklogTimeout = errors.New("timeout of the corresponding sequence has been expired")

// Error is a request the sequence batcher refuses (a transport's 400); the
// message is Triton's sentence where Triton has one.
type Error struct{ Msg string }

func (e *Error) Error() string { return e.Msg }

func refuse(format string, args ...any) *Error { return &Error{Msg: fmt.Sprintf(format, args...)} }

// SubmitFunc runs one request (every model input, in the model's order)
// through the model's batcher.
type SubmitFunc func(ctx context.Context, inputs []engine.Tensor) ([]engine.Tensor, batcher.Timing, error)

// Batcher is one model version's sequence batcher. Create it with New,
// admit a request with Enter, run it with Ticket.Run, stop it with Close.
type Batcher struct {
	cfg     Config
	batched bool
	inputs  []engine.TensorSpec
	outputs []engine.TensorSpec
	// The model's positions of the client's inputs and outputs, the
	// controls' inputs and the states' inputs and outputs.
	clientIn, clientOut []int
	controlIn           []int
	stateIn, stateOut   []int
	// initial are the states' first values, shaped for one request.
	initial []engine.Tensor
	// corrID is the CorrID control's input name and datatype (Invalid
	// when the model has none).
	corrIDInput string
	corrID      engine.DType
	// slots holds a token per sequence being served.
	slots chan struct{}
	log   *slog.Logger
	now   func() time.Time
	stop  chan struct{}
	done  chan struct{}

	mu      sync.Mutex
	seqs    map[ID]*seq
	closed  bool
	reaping bool
	// dir is the slot scheduler (Config.Direct), nil without.
	dir *direct
}

// seq is one sequence's place, slot and state; guarded by Batcher.mu.
type seq struct {
	id ID
	// tail is closed when the last request admitted has finished.
	tail    chan struct{}
	pending int // requests admitted and not finished
	last    time.Time
	slot    bool
	// ended: an END request was admitted; the next one needs START.
	ended bool
	state []engine.Tensor
	// While the sequence waits for a slot: expiresAt is the earliest
	// deadline its requests' timeouts set (zero: none), timer fires then,
	// and expired is closed when it has (gone then says so).
	expiresAt time.Time
	timer     *time.Timer
	expired   chan struct{}
	gone      bool
	// With Config.Direct: pos is the slot held (-1: none), queue the
	// requests waiting in it or in the backlog, tailQueued closed once
	// the last request admitted has queued.
	pos        int
	queue      []*slotReq
	tailQueued chan struct{}
}

// closedChan is the tail of a sequence with nothing admitted.
var closedChan = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

// New makes the sequence batcher of a model whose inputs and outputs are
// given, batched when it has a batch axis (max_batch_size > 0). It checks
// the configuration against them: every control and state names a model
// tensor of the configured datatype and a shape the batcher can send.
func New(cfg Config, inputs, outputs []engine.TensorSpec, batched bool, log *slog.Logger) (_ *Batcher, err error) {
	if cfg.Slots <= 0 {
		cfg.Slots = 1
	}
	if cfg.MaxIdle <= 0 {
		cfg.MaxIdle = time.Second
	}
	if d := cfg.Direct; d != nil {
		if !batched || cfg.Strategy != Direct || d.Groups <= 0 || d.Size <= 0 {
			return nil, fmt.Errorf("sequence: the slot scheduler takes a batched model with the direct strategy and groups of slots, got batched=%v %s %d x %d", batched, cfg.Strategy, d.Groups, d.Size)
		}
		cfg.Slots = d.Groups * d.Size
	}
	b := &Batcher{cfg: cfg, batched: batched, inputs: inputs, outputs: outputs, log: log, now: time.Now,
		slots: make(chan struct{}, cfg.Slots), stop: make(chan struct{}), done: make(chan struct{}), seqs: map[ID]*seq{}}
	if d := cfg.Direct; d != nil {
		b.dir = &direct{cfg: *d, occ: make([]*seq, cfg.Slots)}
		defer func() {
			if err == nil {
				b.startDirect()
			}
		}()
	}
	index := func(specs []engine.TensorSpec, name string) int {
		for i, sp := range specs {
			if sp.Name == name {
				return i
			}
		}
		return -1
	}
	used := map[string]string{}
	claim := func(name, what string) error {
		if prev, ok := used[name]; ok {
			return fmt.Errorf("sequence_batching: input %q is both %s and %s", name, prev, what)
		}
		used[name] = what
		return nil
	}
	perRow := []int64{1} // a control's shape for one request
	if batched {
		perRow = []int64{1, 1}
	}
	for _, c := range cfg.Controls {
		what := "the " + c.Kind.String() + " control"
		if err := claim(c.Input, what); err != nil {
			return nil, err
		}
		i := index(inputs, c.Input)
		if i < 0 {
			return nil, fmt.Errorf("sequence_batching: %s names input %q, which the model does not have; its inputs are %s", what, c.Input, describe(inputs))
		}
		if c.Kind == CorrID {
			if !slices.Contains(CorrIDTypes, c.DType) {
				return nil, fmt.Errorf("sequence_batching: %s %q has datatype %s; it takes uint64, int64, uint32, int32 or string", what, c.Input, c.DType)
			}
			b.corrIDInput, b.corrID = c.Input, c.DType
		}
		if err := fits(inputs[i], c.DType, perRow); err != nil {
			return nil, fmt.Errorf("sequence_batching: %s %q: %v", what, c.Input, err)
		}
		b.controlIn = append(b.controlIn, i)
	}
	for _, s := range cfg.States {
		if err := claim(s.Input, "a state input"); err != nil {
			return nil, err
		}
		i, o := index(inputs, s.Input), index(outputs, s.Output)
		if i < 0 {
			return nil, fmt.Errorf("sequence_batching: state input_name %q is not an input of the model, whose inputs are %s", s.Input, describe(inputs))
		}
		if o < 0 {
			return nil, fmt.Errorf("sequence_batching: state output_name %q is not an output of the model, whose outputs are %s", s.Output, describe(outputs))
		}
		shape := append([]int64{}, s.InitialDims...)
		if batched {
			shape = append([]int64{1}, shape...)
		}
		if err := fits(inputs[i], s.DType, shape); err != nil {
			return nil, fmt.Errorf("sequence_batching: state input %q: %v", s.Input, err)
		}
		if sp := outputs[o]; sp.DType != engine.Invalid && sp.DType != s.DType {
			return nil, fmt.Errorf("sequence_batching: state output %q: the model gives %s, the state is %s", s.Output, sp.DType, s.DType)
		}
		n := int(engine.NumElements(s.InitialDims)) * s.DType.Size()
		if s.DType == engine.String {
			n = int(engine.NumElements(s.InitialDims)) * engine.StringHeader // empty strings: a zero length each
		}
		data := s.Initial
		if data == nil {
			data = make([]byte, n)
		} else if len(data) != n {
			return nil, fmt.Errorf("sequence_batching: state %q: the initial state holds %d bytes, its dims %v of %s need %d", s.Input, len(data), s.InitialDims, s.DType, n)
		}
		b.stateIn, b.stateOut = append(b.stateIn, i), append(b.stateOut, o)
		b.initial = append(b.initial, engine.Tensor{DType: s.DType, Shape: shape, Data: data})
	}
	for i, sp := range inputs {
		if _, ok := used[sp.Name]; !ok {
			b.clientIn = append(b.clientIn, i)
		}
	}
	for o, sp := range outputs {
		hidden := false
		for _, s := range cfg.States {
			hidden = hidden || (s.Output == sp.Name && !contains(cfg.VisibleStates, sp.Name))
		}
		if !hidden {
			b.clientOut = append(b.clientOut, o)
		}
	}
	return b, nil
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// fits checks that a model input takes tensors of dtype and shape.
func fits(spec engine.TensorSpec, dtype engine.DType, shape []int64) error {
	if spec.DType != engine.Invalid && spec.DType != dtype {
		return fmt.Errorf("the model takes %s, the configuration sends %s", spec.DType, dtype)
	}
	if len(spec.Shape) == 0 && spec.DType == engine.Invalid {
		return nil // a shape the engine does not know: the model checks it
	}
	ok := len(spec.Shape) == len(shape)
	for i := 0; ok && i < len(shape); i++ {
		ok = spec.Shape[i] < 0 || spec.Shape[i] == shape[i]
	}
	if !ok {
		return fmt.Errorf("the model's shape is %s, the sequence batcher sends %s per request", engine.FormatShape(spec.Shape), engine.FormatShape(shape))
	}
	return nil
}

func describe(specs []engine.TensorSpec) string {
	var sb strings.Builder
	for i, sp := range specs {
		if i > 0 {
			sb.WriteString(", ")
		}
		fmt.Fprintf(&sb, "%q", sp.Name)
	}
	return sb.String()
}

// Config is the configuration the batcher serves.
func (b *Batcher) Config() Config { return b.cfg }

// Inputs are the inputs a client sends: the model's, less the controls and
// the states.
func (b *Batcher) Inputs() []engine.TensorSpec { return pick(b.inputs, b.clientIn) }

// Outputs are the outputs a client receives: the model's, less the states
// not listed as outputs in the configuration.
func (b *Batcher) Outputs() []engine.TensorSpec { return pick(b.outputs, b.clientOut) }

func pick(specs []engine.TensorSpec, idx []int) []engine.TensorSpec {
	out := make([]engine.TensorSpec, len(idx))
	for i, j := range idx {
		out[i] = specs[j]
	}
	return out
}

// Active is the number of sequences the batcher holds (served, waiting for
// a slot, or idle and not yet freed).
func (b *Batcher) Active() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.seqs)
}

// checkIDType refuses a correlation ID of the other kind than the model's
// CORRID control takes (a string ID to an integer CORRID, a numeric one to
// a string CORRID), with Triton's sentence; any ID suits a model without a
// CORRID control.
func (b *Batcher) checkIDType(id ID) error {
	if b.corrID == engine.Invalid {
		return nil
	}
	str := b.corrID == engine.String
	if (id.S != "") == str {
		return nil
	}
	sent, fix := "UINT64", fmt.Sprintf("send sequence_id as a string (sequence_id %d was sent as an integer)", id.N)
	if !str {
		sent, fix = "BYTES", fmt.Sprintf("send sequence_id as an unsigned integer (sequence_id %q was sent as a string)", id.S)
	}
	return refuse("sequence batching control '%s' data-type is '%s', but model '%s' expects '%s'; %s",
		b.corrIDInput, sent, b.cfg.Model, protocolName(b.corrID), fix)
}

// protocolName is a datatype's name in the inference protocol (Triton's
// DataTypeToProtocolString): "UINT64", "BYTES".
func protocolName(d engine.DType) string {
	if d == engine.String {
		return "BYTES"
	}
	return strings.ToUpper(d.String())
}

// CheckRows refuses a request of more than one row to a batched model:
// Triton's sequence batcher takes one row per request. Transports check it
// before Enter, so that such a request does not enter its sequence.
func (b *Batcher) CheckRows(inputs []engine.Tensor) error {
	if !b.batched {
		return nil
	}
	for _, in := range inputs {
		if len(in.Shape) == 0 || in.Shape[0] != 1 {
			return refuse("inference request to model '%s' must specify batch-size 1 due to requirements of sequence batcher", b.cfg.Model)
		}
	}
	return nil
}

// Enter admits a request of sequence id: it takes the request's place
// after the sequence's requests admitted before it. A request with start
// begins the sequence (or, when the sequence is still going, ends it early
// and begins it again, as Triton does); any other request must belong to a
// sequence that started, has not ended and was not freed as idle. The
// ticket must then be Run or Released, or the sequence stops.
func (b *Batcher) Enter(id ID, start, end bool) (*Ticket, error) {
	if id.Zero() {
		return nil, refuse("inference request to model '%s' must specify a non-zero or non-empty correlation ID", b.cfg.Model)
	}
	if err := b.checkIDType(id); err != nil {
		return nil, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return nil, batcher.ErrClosed
	}
	if !b.reaping {
		b.reaping = true
		go b.reapLoop()
	}
	s := b.seqs[id]
	switch {
	case s == nil || s.ended:
		if !start {
			return nil, refuse("inference request for sequence %s to model '%s' must specify the START flag on the first request of the sequence", id, b.cfg.Model)
		}
		if s == nil || b.dir != nil {
			// With slots, a new sequence after an END is one of its own, as
			// Triton's: it takes a slot (or the backlog) of its own while the
			// ended one may still hold its slot.
			s = &seq{id: id, tail: closedChan, tailQueued: closedChan, pos: -1}
			b.seqs[id] = s
		}
		s.ended = false
	case start:
		b.log.Warn("sequence "+id.String()+" for model '"+b.cfg.Model+"' has a conflict. The previous sequence did not end before this sequence start. Previous sequence will be terminated early.",
			"model", b.cfg.Model, "sequence_id", id.String())
	}
	t := &Ticket{b: b, s: s, prev: s.tail, done: make(chan struct{}), start: start, end: end}
	s.tail = t.done
	if b.dir != nil {
		t.prevQueued, t.queued = s.tailQueued, make(chan struct{})
		s.tailQueued = t.queued
	}
	s.pending++
	s.last = b.now()
	if end {
		s.ended = true
	}
	return t, nil
}

// Ticket is a request's place in its sequence.
type Ticket struct {
	b          *Batcher
	s          *seq
	prev, done chan struct{}
	start, end bool
	used       atomic.Bool
	// With Config.Direct: closed once the request before it has queued in
	// the slot, and once it has (or given up).
	prevQueued, queued chan struct{}
	queuedOnce         sync.Once
}

// ID is the ticket's sequence.
func (t *Ticket) ID() ID { return t.s.id }

// Run waits for the sequence's earlier requests and for a slot, then runs
// the request: inputs are the client's (Batcher.Inputs' order), completed
// with the controls and the sequence's state, submitted with submit. It
// returns the client's outputs (Batcher.Outputs' order) and keeps the state
// outputs for the sequence's next request; a request that fails leaves the
// state as it was. The request after it waits until Run returns.
func (t *Ticket) Run(ctx context.Context, inputs []engine.Tensor, submit SubmitFunc) ([]engine.Tensor, batcher.Timing, error) {
	if !t.used.CompareAndSwap(false, true) {
		return nil, batcher.Timing{}, errors.New("sequence: a ticket runs once")
	}
	if t.b.dir != nil {
		return t.b.runDirect(ctx, t, inputs, submit)
	}
	expired := t.b.backlog(t.s, batcher.QueueOptionsFrom(ctx).Timeout)
	select {
	case <-t.prev:
	case <-ctx.Done():
		t.b.finish(t)
		return nil, batcher.Timing{}, ctx.Err()
	case <-expired:
		t.b.finish(t)
		return nil, batcher.Timing{}, ErrBacklogTimeout
	}
	defer t.b.finish(t)
	return t.b.run(ctx, t, inputs, submit, expired)
}

// backlog is the channel closed when sequence s, waiting for a slot, has
// waited past its requests' timeouts; a request's timeout (0: none) may
// bring that deadline closer. It is nil once s holds a slot.
func (b *Batcher) backlog(s *seq, timeout time.Duration) <-chan struct{} {
	b.mu.Lock()
	defer b.mu.Unlock()
	if s.slot {
		return nil
	}
	if s.expired == nil {
		s.expired = make(chan struct{})
	}
	if timeout > 0 && !s.gone {
		at := b.now().Add(timeout)
		if s.expiresAt.IsZero() || at.Before(s.expiresAt) {
			s.expiresAt = at
			if s.timer != nil {
				s.timer.Stop()
			}
			s.timer = time.AfterFunc(timeout, func() { b.expire(s, at) })
		}
	}
	return s.expired
}

// expire forgets sequence s, still without a slot at its deadline at: its
// waiting requests fail, and a later one must START it again.
func (b *Batcher) expire(s *seq, at time.Time) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if s.slot || s.gone || !s.expiresAt.Equal(at) {
		return
	}
	s.gone = true
	if b.seqs[s.id] == s {
		delete(b.seqs, s.id)
	}
	close(s.expired)
	b.log.Info("sequence expired: it waited for a slot past its requests' timeout", "model", b.cfg.Model, "sequence_id", s.id.String())
}

// Release gives the ticket's place up without running it (the request
// failed before reaching Run); the next request of the sequence goes on.
// It does nothing after Run, and on nil.
func (t *Ticket) Release() {
	if t != nil && t.used.CompareAndSwap(false, true) {
		t.markQueued()
		t.b.finish(t)
	}
}

// finish ends a ticket once the request before it has finished (at once
// from Run, else in the background): the next request may run, and a
// sequence that has ended and has nothing left frees its slot.
func (b *Batcher) finish(t *Ticket) {
	done := func() {
		b.mu.Lock()
		s := t.s
		s.pending--
		s.last = b.now()
		if s.pending == 0 && s.ended {
			b.freeLocked(s)
		}
		b.mu.Unlock()
		close(t.done)
	}
	afterPrev(t.prev, done)
}

// afterPrev runs done once prev is closed: at once when it is, else in the
// background, so that a request given up early never lets a later one of
// its sequence overtake an earlier one still running.
func afterPrev(prev <-chan struct{}, done func()) {
	select {
	case <-prev:
		done()
	default:
		go func() { <-prev; done() }()
	}
}

// freeLocked forgets a sequence and gives its slot back.
func (b *Batcher) freeLocked(s *seq) {
	if b.seqs[s.id] == s {
		delete(b.seqs, s.id)
	}
	if s.timer != nil {
		s.timer.Stop()
	}
	switch {
	case b.dir != nil:
		b.releaseLocked(s)
	case s.slot:
		<-b.slots
		s.slot = false
	}
	s.state = nil
}

// run runs a request whose turn has come; expired is its sequence's
// (Batcher.backlog).
func (b *Batcher) run(ctx context.Context, t *Ticket, inputs []engine.Tensor, submit SubmitFunc, expired <-chan struct{}) ([]engine.Tensor, batcher.Timing, error) {
	var none batcher.Timing
	if len(inputs) != len(b.clientIn) {
		return nil, none, fmt.Errorf("sequence: %d inputs for the model's %d client inputs", len(inputs), len(b.clientIn))
	}
	if err := b.CheckRows(inputs); err != nil {
		return nil, none, err
	}
	b.mu.Lock()
	has, gone := t.s.slot, t.s.gone
	b.mu.Unlock()
	if gone {
		return nil, none, ErrBacklogTimeout
	}
	if !has {
		select {
		case b.slots <- struct{}{}:
		case <-ctx.Done():
			return nil, none, ctx.Err()
		case <-b.stop:
			return nil, none, batcher.ErrClosed
		case <-expired:
			return nil, none, ErrBacklogTimeout
		}
		b.mu.Lock()
		if t.s.gone { // expired as the slot came free: give it back
			b.mu.Unlock()
			<-b.slots
			return nil, none, ErrBacklogTimeout
		}
		t.s.slot = true
		if t.s.timer != nil {
			t.s.timer.Stop()
		}
		b.mu.Unlock()
	}
	b.mu.Lock()
	state := t.s.state
	b.mu.Unlock()
	full := b.fullInputs(t, inputs, state)
	out, timing, err := submit(ctx, full)
	if err != nil {
		return nil, timing, err
	}
	res, err := b.keep(t, full, out)
	return res, timing, err
}

// keep keeps a request's state outputs for its sequence's next request and
// returns the client's outputs; full are the request's model inputs, out
// the model's outputs.
func (b *Batcher) keep(t *Ticket, full, out []engine.Tensor) ([]engine.Tensor, error) {
	next := make([]engine.Tensor, len(b.cfg.States))
	for i, s := range b.cfg.States {
		j := b.stateOut[i]
		if j >= len(out) {
			return nil, fmt.Errorf("the model returned %d outputs, without its state output %q", len(out), s.Output)
		}
		if out[j].Absent() {
			// The model's response left the state out (a Python model's may):
			// the state is not updated, as a Triton backend that does not
			// call TRITONBACKEND_StateUpdate leaves it.
			next[i] = full[b.stateIn[i]]
			continue
		}
		if err := b.checkState(s, out[j]); err != nil {
			return nil, err
		}
		// A copy: the output may be rows of a larger engine output, which
		// the state would otherwise keep alive.
		next[i] = engine.Tensor{DType: out[j].DType, Shape: append([]int64{}, out[j].Shape...), Data: bytes.Clone(out[j].Data)}
	}
	b.mu.Lock()
	t.s.state = next
	b.mu.Unlock()
	res := make([]engine.Tensor, len(b.clientOut))
	for i, j := range b.clientOut {
		if j >= len(out) {
			return nil, fmt.Errorf("the model returned %d outputs, without %q", len(out), b.outputs[j].Name)
		}
		res[i] = out[j]
	}
	return res, nil
}

// checkState checks a state output against the state's dims.
func (b *Batcher) checkState(s State, t engine.Tensor) error {
	shape := t.Shape
	if b.batched {
		if len(shape) == 0 || shape[0] != 1 {
			return fmt.Errorf("state output %q has shape %s: one row expected", s.Output, engine.FormatShape(shape))
		}
		shape = shape[1:]
	}
	ok := t.DType == s.DType && len(shape) == len(s.Dims)
	for i := 0; ok && i < len(shape) && !s.Growable; i++ {
		ok = s.Dims[i] < 0 || s.Dims[i] == shape[i]
	}
	if !ok {
		return fmt.Errorf("state output %q is %s %s, but the state is %s %s", s.Output, t.DType, engine.FormatShape(shape), s.DType, engine.FormatShape(s.Dims))
	}
	return nil
}

// controlValue is the value of a control input for a request of sequence
// id (a null request: the zero ID, not ready).
func (b *Batcher) controlValue(c Control, id ID, start, end, ready bool) engine.Tensor {
	shape := []int64{1}
	if b.batched {
		shape = []int64{1, 1}
	}
	out := engine.Tensor{DType: c.DType, Shape: shape, Data: make([]byte, c.DType.Size())}
	if c.Kind == CorrID {
		// As Triton: the ID's bytes, little-endian, cut to the width of a
		// 32-bit CORRID; a string ID as one BYTES element (Enter checked
		// that the ID is of the CORRID's kind).
		switch c.DType {
		case engine.Int64, engine.Uint64:
			binary.LittleEndian.PutUint64(out.Data, id.N)
		case engine.Int32, engine.Uint32:
			binary.LittleEndian.PutUint32(out.Data, uint32(id.N))
		case engine.String:
			out.Data = engine.AppendString(nil, id.S)
		}
		return out
	}
	on := (c.Kind == Ready && ready) || (c.Kind == Start && start) || (c.Kind == End && end)
	v := c.False
	if on {
		v = c.True
	}
	switch c.DType {
	case engine.Int32:
		binary.LittleEndian.PutUint32(out.Data, uint32(int32(v)))
	case engine.Float32:
		binary.LittleEndian.PutUint32(out.Data, math.Float32bits(float32(v)))
	case engine.Bool:
		if v != 0 {
			out.Data[0] = 1
		}
	}
	return out
}

// reapLoop frees idle sequences until Close.
func (b *Batcher) reapLoop() {
	defer close(b.done)
	t := time.NewTicker(min(max(b.cfg.MaxIdle/10, time.Millisecond), 100*time.Millisecond))
	defer t.Stop()
	for {
		select {
		case <-b.stop:
			return
		case <-t.C:
			b.reap(b.now())
		}
	}
}

// reap frees the sequences with no request admitted for MaxIdle, and
// returns how many.
func (b *Batcher) reap(now time.Time) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	n := 0
	for _, s := range b.seqs {
		if s.pending == 0 && now.Sub(s.last) >= b.cfg.MaxIdle {
			b.freeLocked(s)
			n++
			b.log.Debug("sequence freed: idle for longer than max_sequence_idle_microseconds", "model", b.cfg.Model,
				"sequence_id", s.id.String(), "max_idle", b.cfg.MaxIdle)
		}
	}
	return n
}

// Close stops admitting requests (Enter then fails with batcher.ErrClosed)
// and stops freeing idle sequences; a request admitted and still waiting
// for a slot fails with batcher.ErrClosed, one already running finishes
// (the model's batcher, closing too, decides whether it reaches the
// engine).
func (b *Batcher) Close() {
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return
	}
	b.closed = true
	reaping := b.reaping
	for _, s := range b.seqs { // a sequence waiting for a slot: its deadline no longer matters
		if s.timer != nil {
			s.timer.Stop()
		}
	}
	close(b.stop)
	b.mu.Unlock()
	if reaping {
		<-b.done
	}
}
