package serving

import (
	"errors"
	"fmt"
	"slices"
	"strings"
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

// CheckSequence decides whether a request whose request-level parameters
// are named params may run on inst: a request naming any of sequence_id,
// sequence_start and sequence_end is part of a stateful sequence, which only
// a model configured for sequence batching can serve. No model served by fw
// has it yet, so such a request is refused with a *SequenceError naming
// every sequence parameter given, in sorted order, whatever order params
// come in (a map's, for gRPC). This is where a sequence batcher hooks in:
// an instance whose model configuration enables it will accept them here.
func CheckSequence(inst *Instance, params []string) error {
	var given []string
	for _, p := range sequenceParameters {
		if slices.Contains(params, p) {
			given = append(given, p)
		}
	}
	if len(given) == 0 {
		return nil
	}
	return &SequenceError{Model: inst.Model.Name(), Params: given}
}

// RowLimit is the --max-rows limit (maxRows, 0: none) on the first axis of
// an input of inst's model: maxRows for a batched model, whose first axis
// counts rows, and 0 for an unbatched one, whose inputs are whole tensors
// that its specs size (the body limit bounds them).
func RowLimit(inst *Instance, maxRows int) int {
	if !inst.Model.Batched() {
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
