package serving

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/fw-serve/fw/engine"
	"github.com/fw-serve/fw/sequence"
)

// Rules of an Open Inference Protocol request that do not depend on its
// transport: the HTTP (httpapi) and gRPC (grpcapi) front ends call these
// so that the same request gets the same answer, with the same message,
// over both.

// sequenceParameters are the request parameters of Triton's sequence
// batcher (stateful models), sorted.
var sequenceParameters = []string{"sequence_end", "sequence_id", "sequence_start"}

// ErrNoSequenceBatching marks a request that addresses Triton's sequence
// batcher (sequence_id, sequence_start, sequence_end) to a model without
// one. Classify makes it KindBadRequest.
var ErrNoSequenceBatching = errors.New("the model has no sequence batching")

// SequenceError is a request refused with ErrNoSequenceBatching: Params are
// the sequence parameters it gave, sorted.
type SequenceError struct {
	Model  string
	Params []string
}

func (e *SequenceError) Error() string {
	quoted := make([]string, len(e.Params))
	for i, p := range e.Params {
		quoted[i] = fmt.Sprintf("%q", p)
	}
	what, are, them := "parameters", "are", "them"
	if len(quoted) == 1 {
		what, are, them = "parameter", "is", "it"
	}
	return fmt.Sprintf("request %s %s %s for stateful sequences, and model %q has no sequence batching (fw answers each request on its own); send the request without %s",
		what, strings.Join(quoted, ", "), are, e.Model, them)
}

func (e *SequenceError) Unwrap() error { return ErrNoSequenceBatching }

// maxStringID is the longest string correlation ID Triton accepts.
const maxStringID = 128

// SequenceParams are a request's sequence parameters, as its transport
// read them with Set: sequence_id (an unsigned integer or a string; 0 and
// "" mean none), sequence_start and sequence_end.
type SequenceParams struct {
	// Given are the sequence parameters the request named.
	Given      []string
	ID         sequence.ID
	Start, End bool
}

// OtherValue is a parameter value of a type Set does not take, named for
// the message ("an object", "a number with a fraction").
type OtherValue string

// Set reads one request-level parameter, name with its value: a bool, an
// int64, a uint64, a string, or an OtherValue naming what it is. It reports
// whether name is a sequence parameter, and refuses a value of the wrong
// type, so that both transports answer alike.
func (p *SequenceParams) Set(name string, v any) (bool, error) {
	if !slices.Contains(sequenceParameters, name) {
		return false, nil
	}
	p.Given = append(p.Given, name)
	if name == "sequence_id" {
		switch x := v.(type) {
		case uint64:
			p.ID = sequence.ID{N: x}
			return true, nil
		case int64:
			if x >= 0 {
				p.ID = sequence.ID{N: uint64(x)}
				return true, nil
			}
		case string:
			if len(x) > maxStringID {
				return true, fmt.Errorf("request parameter %q: a string correlation ID cannot be longer than %d characters", name, maxStringID)
			}
			p.ID = sequence.ID{S: x}
			return true, nil
		}
		return true, fmt.Errorf("request parameter %q must be an unsigned integer or a string, got %s", name, describeValue(v))
	}
	b, ok := v.(bool)
	if !ok {
		return true, fmt.Errorf("request parameter %q must be true or false, got %s", name, describeValue(v))
	}
	if name == "sequence_start" {
		p.Start = b
	} else {
		p.End = b
	}
	return true, nil
}

func describeValue(v any) string {
	switch x := v.(type) {
	case OtherValue:
		return string(x)
	case bool:
		return "a boolean"
	case string:
		return "a string"
	case int64:
		return strconv.FormatInt(x, 10)
	case uint64:
		return strconv.FormatUint(x, 10)
	case float64:
		return "a number with a fraction"
	}
	return fmt.Sprintf("%T", v)
}

// SequenceTicket is a request's place in its sequence (EnterSequence):
// in a stateful model's sequence batcher, or in an ensemble's order.
type SequenceTicket struct {
	params SequenceParams
	seq    *sequence.Ticket // a stateful model's
	turn   *sequence.Turn   // an ensemble's
}

// Release gives the ticket's place up when its request is not run; it
// does nothing after InferSequence, and on nil.
func (t *SequenceTicket) Release() {
	if t == nil {
		return
	}
	t.seq.Release()
	t.turn.Release()
}

// SequenceEcho is what inst's answer to a request with sequence
// parameters p says of its sequence, and whether it says anything: an
// ensemble's answer carries the request's sequence_id, sequence_start and
// sequence_end back as response parameters, as Triton's ensembles do; any
// other model's answer does not.
func SequenceEcho(inst *Instance, p SequenceParams) (SequenceParams, bool) {
	if inst.Order == nil || len(p.Given) == 0 {
		return SequenceParams{}, false
	}
	return p, true
}

// EnterSequence decides whether a request with sequence parameters p may
// run on inst, and admits it to its sequence. A model without sequence
// batching refuses any sequence parameter with a *SequenceError naming
// every one given, sorted; a request without them gets no ticket (nil).
// A model with sequence batching (config.pbtxt's sequence_batching)
// admits the request to its sequence, after the requests of that sequence
// admitted before it (Triton's order: a transport admits requests in the
// order they arrived), or refuses it with Triton's sentence (no
// correlation ID, a sequence not started, inputs of more than one row).
// An ensemble (inst.Order) takes any sequence parameters, as Triton's
// does: its requests of one sequence run one after another, and its
// stateful steps get the sequence. The ticket must reach InferSequence or
// be released.
func EnterSequence(inst *Instance, p SequenceParams, inputs []engine.Tensor) (*SequenceTicket, error) {
	if inst.Order != nil {
		if len(p.Given) == 0 {
			return nil, nil
		}
		return &SequenceTicket{params: p, turn: inst.Order.Enter(p.ID)}, nil
	}
	if inst.Sequences == nil {
		if len(p.Given) == 0 {
			return nil, nil
		}
		given := slices.Clone(p.Given)
		slices.Sort(given)
		return nil, &SequenceError{Model: inst.Model.Name(), Params: slices.Compact(given)}
	}
	if err := inst.Sequences.CheckRows(inputs); err != nil {
		return nil, err
	}
	t, err := inst.Sequences.Enter(p.ID, p.Start, p.End)
	if err != nil {
		return nil, err
	}
	return &SequenceTicket{params: p, seq: t}, nil
}

// sequenceKey is the context key of the sequence an ensemble's request
// belongs to (WithSequence).
type sequenceKey struct{}

// WithSequence marks ctx as a request of sequence p, for the stateful
// steps of the ensemble it runs through.
func WithSequence(ctx context.Context, p SequenceParams) context.Context {
	return context.WithValue(ctx, sequenceKey{}, p)
}

// SequenceFrom is the sequence WithSequence put in ctx, and whether there
// is one.
func SequenceFrom(ctx context.Context) (SequenceParams, bool) {
	p, ok := ctx.Value(sequenceKey{}).(SequenceParams)
	return p, ok
}

// Stateless refuses a request to a stateful model (one with sequence
// batching) that cannot name a sequence: the unprefixed prediction routes.
func Stateless(inst *Instance) error {
	if inst.Sequences == nil {
		return nil
	}
	_, err := inst.Sequences.Enter(sequence.ID{}, false, false) // the refusal of a request without a correlation ID
	return fmt.Errorf("%w; model %q is stateful (sequence_batching): send its requests to /v2/models/%s/infer with the parameters sequence_id, sequence_start and sequence_end", err, inst.Name(), inst.Name())
}

// RowLimit is the --max-rows limit (maxRows, 0: none) on the first axis of
// an input of inst's model: maxRows for a batched model, whose first axis
// counts rows, and 0 for an unbatched one (no batch axis in its file, or
// max_batch_size 0 in its configuration), whose inputs are whole tensors
// that its specs size (the body or message limit bounds them).
func RowLimit(inst *Instance, maxRows int) int {
	if !inst.Batched() {
		return 0
	}
	return maxRows
}

// TooManyRows is the message refusing an input whose first axis, shape[0],
// is above maxRows (0: no limit), "" when it is within it. Both transports
// answer it with their "too large" status (HTTP 413, gRPC RESOURCE_EXHAUSTED).
func TooManyRows(input string, shape []int64, maxRows int) string {
	if maxRows <= 0 || len(shape) == 0 || shape[0] <= int64(maxRows) {
		return ""
	}
	return fmt.Sprintf("input %q: shape %s has %d rows on its first axis, above the limit of %d per request (--max-rows); split the request",
		input, ShapeString(shape), shape[0], maxRows)
}
