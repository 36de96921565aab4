package serving

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/fw-serve/fw/batcher"
	"github.com/fw-serve/fw/engine"
	"github.com/fw-serve/fw/payloadlog"
	"github.com/fw-serve/fw/respcache"
	"github.com/fw-serve/fw/sequence"
	"github.com/fw-serve/fw/telemetry"
)

// Infer checks inputs against inst's model and runs them through its
// batcher. When a hot reload closed inst between the transport's lookup and
// the submit, it retries on the instance now serving the same model version,
// so a reload fails no request. A stateful model (sequence batching) is
// refused: its requests name their sequence (InferSequence).
func Infer(ctx context.Context, models Models, inst *Instance, inputs []engine.Tensor) ([]engine.Tensor, batcher.Timing, error) {
	pl, start := payloadStart(ctx)
	ctx, call := telemetry.StartCall(ctx)
	var out []engine.Tensor
	var t batcher.Timing
	var err error
	if inst.Cache != nil && inst.Sequences == nil && !inst.StatefulSteps && !inst.Decoupled() {
		out, t, err = cachedInfer(ctx, models, inst, inputs)
	} else {
		out, t, err = infer(ctx, models, inst, inputs)
	}
	call.Done(inst.Name(), inst.Version(), t.Queue, err)
	if pl != nil {
		pl.Log(inst.Name(), inst.Version(), inst.Inputs(), inputs, inst.Outputs(), out, time.Since(start), err)
	}
	return out, t, err
}

// cachedInfer is infer through inst's response cache: the answer kept for
// the same model version, inputs, requested outputs and request
// parameters, else the model's, kept for next time. Failures are not kept.
func cachedInfer(ctx context.Context, models Models, inst *Instance, inputs []engine.Tensor) ([]engine.Tensor, batcher.Timing, error) {
	began := time.Now()
	kb := respcache.NewKey(inst.Name(), inst.Version())
	kb.Ints([]int{int(inst.CacheGeneration)}) // this load's: a reload of the version answers anew
	kb.Tensors(inputs)
	if idx, ok := RequestedOutputs(ctx); ok {
		kb.String("outputs")
		kb.Ints(idx)
	} else {
		kb.String("all outputs")
	}
	ri, _ := engine.RequestInfoOf(ctx)
	kb.String(ri.Parameters) // forwarded headers included: a per-request header makes every request miss
	key := kb.Sum()
	if out, ok := inst.Cache.Get(key); ok {
		inst.Stats.cacheLookup(true, time.Since(began))
		return out, batcher.Timing{}, nil
	}
	lookup := time.Since(began)
	out, t, err := infer(ctx, models, inst, inputs)
	if err == nil {
		kept := time.Now()
		inst.Cache.Put(key, out)
		lookup += time.Since(kept)
	}
	inst.Stats.cacheLookup(false, lookup)
	return out, t, err
}

func infer(ctx context.Context, models Models, inst *Instance, inputs []engine.Tensor) ([]engine.Tensor, batcher.Timing, error) {
	given := inputs
	for {
		if err := Stateless(inst); err != nil {
			return nil, batcher.Timing{}, err
		}
		if inst.Decoupled() {
			return nil, batcher.Timing{}, &DecoupledError{Model: inst.Name()}
		}
		inputs, rows, err := inst.toModel(given)
		if err != nil {
			return nil, batcher.Timing{}, err
		}
		out, t, err := inst.Batcher.SubmitChecked(ctx, inputs, rows)
		if errors.Is(err, batcher.ErrClosed) {
			if cur, _ := models.Get(inst.Name(), inst.Version()); cur != nil && cur != inst {
				inst = cur
				continue
			}
		}
		if err == nil && inst.Reshape != nil {
			inst.Reshape.fromModel(out)
		}
		return out, t, err
	}
}

// CheckInputs checks inputs, in the shapes inst's clients send (its
// configuration's dims where it reshapes), against inst's model, as Infer
// does before it submits them: for a transport that answers a bad input
// before anything runs (a /predict/batch item).
func CheckInputs(inst *Instance, inputs []engine.Tensor) error {
	_, _, err := inst.toModel(inputs)
	return err
}

// toModel gives inputs, as inst's clients send them, the model's shapes
// (Reshape) and positions (Ragged), and checks them; it returns them with
// the rows.
func (i *Instance) toModel(inputs []engine.Tensor) ([]engine.Tensor, int64, error) {
	if i.Reshape != nil {
		var err error
		if inputs, err = i.Reshape.toModel(inputs); err != nil {
			return nil, 0, err
		}
	}
	if i.Ragged != nil {
		return i.Ragged.toModel(inputs)
	}
	rows, err := i.checkInputs(inputs)
	return inputs, rows, err
}

// checkInputs checks inputs in the model's shapes against inst's model, as
// inst serves it: whole when it serves a batchable model without a batch
// axis (max_batch_size 0), so the inputs' first axes need not agree.
func (i *Instance) checkInputs(inputs []engine.Tensor) (int64, error) {
	if !i.Batched() && i.Model.Batched() {
		return i.Model.CheckInputsWhole(inputs)
	}
	return i.Model.CheckInputs(inputs)
}

// InferSequence runs a request that EnterSequence admitted: with no ticket
// (a stateless model), as Infer; else, once the sequence's earlier requests
// have run, with the client's inputs (inst.Inputs) completed by the
// sequence batcher's controls and state, and it returns the client's
// outputs (inst.Outputs). A stateful request is never retried on another
// instance: a reload loses the sequences of the replaced one, as Triton's
// does.
func InferSequence(ctx context.Context, models Models, inst *Instance, inputs []engine.Tensor, t *SequenceTicket) ([]engine.Tensor, batcher.Timing, error) {
	if t == nil {
		return Infer(ctx, models, inst, inputs)
	}
	if t.turn != nil { // an ensemble: its turn in the sequence, then as Infer with the sequence for its steps
		var out []engine.Tensor
		var timing batcher.Timing
		err := t.turn.Run(ctx, func(ctx context.Context) error {
			var err error
			out, timing, err = Infer(WithSequence(ctx, t.params), models, inst, inputs)
			return err
		})
		return out, timing, err
	}
	pl, start := payloadStart(ctx)
	ctx, call := telemetry.StartCall(ctx)
	out, timing, err := t.seq.Run(ctx, inputs, func(ctx context.Context, full []engine.Tensor) ([]engine.Tensor, batcher.Timing, error) {
		rows, err := inst.checkInputs(full)
		if err != nil {
			return nil, batcher.Timing{}, err
		}
		ctx = engine.WithCorrelation(ctx, engine.Correlation{ID: t.params.ID.N, IDString: t.params.ID.S, Start: t.params.Start, End: t.params.End})
		return inst.Batcher.SubmitChecked(ctx, full, rows)
	})
	call.Done(inst.Name(), inst.Version(), timing.Queue, err)
	if pl != nil {
		pl.Log(inst.Name(), inst.Version(), inst.Inputs(), inputs, inst.Outputs(), out, time.Since(start), err)
	}
	return out, timing, err
}

// Kind is what went wrong with an inference call, for a transport to map
// onto its status codes (HTTP 422/503/504/500, gRPC InvalidArgument,
// Unavailable, DeadlineExceeded, Internal...).
type Kind int

// The kinds of failure Classify tells apart.
const (
	// KindInvalidInput: the inputs do not fit the model (*engine.InputError).
	KindInvalidInput Kind = iota + 1
	// KindOverloaded: the queue is full or could not serve the request in
	// time, or the request waited past its queue policy's timeout.
	KindOverloaded
	// KindNotReady: the model is being replaced or the server is stopping.
	KindNotReady
	// KindTimeout: no result within the request's deadline.
	KindTimeout
	// KindEngine: the engine failed.
	KindEngine
	// KindAnswered: the model itself answered an error for the request
	// (engine.ModelAnswer): Failure.Code is its Triton error code, and the
	// message is the model's own.
	KindAnswered
	// KindBadRequest: the request asks for what the model does not do
	// (a *SequenceError: sequence parameters to a model without sequence
	// batching), or breaks its sequence's rules (a *sequence.Error: no
	// correlation ID, a sequence not started, more than one row), or asks
	// for classes of an output without an order (a *ClassificationError).
	KindBadRequest
)

// Failure is a classified inference error with a message that says what to do.
type Failure struct {
	Kind    Kind
	Message string
	// Input is the *engine.InputError when Kind is KindInvalidInput.
	Input *engine.InputError
	// Code is the model's Triton error code when Kind is KindAnswered.
	Code int
}

// Classify describes err, returned by Infer, for a client. timeout is the
// server's request timeout, named in the message of a KindTimeout.
func Classify(err error, timeout time.Duration) Failure {
	var ie *engine.InputError
	var se *sequence.Error
	switch {
	case errors.As(err, &ie):
		return Failure{Kind: KindInvalidInput, Message: ie.Error(), Input: ie}
	case answered(err) != nil:
		code, msg, _ := answered(err).ModelAnswer()
		return Failure{Kind: KindAnswered, Message: msg, Code: code}
	case errors.Is(err, ErrNoSequenceBatching), errors.As(err, &se), errors.As(err, new(*ClassificationError)), errors.As(err, new(*DecoupledError)):
		return Failure{Kind: KindBadRequest, Message: ensembleMessage(err)}
	case errors.As(err, new(*ModelError)): // a model an ensemble's step needs is not served now
		me, _ := AsModelError(err)
		return Failure{Kind: KindNotReady, Message: "a model this request needs is not available: " + me.Message}
	case errors.Is(err, sequence.ErrBacklogTimeout): // Triton's UNAVAILABLE, its sentence
		return Failure{Kind: KindOverloaded, Message: sequence.ErrBacklogTimeout.Error()}
	case errors.Is(err, batcher.ErrQueueTimeout): // Triton's sentence alone: its clients compare it whole
		return Failure{Kind: KindOverloaded, Message: "Request timeout expired"}
	case errors.Is(err, batcher.ErrQueueFull):
		why := strings.TrimPrefix(err.Error(), batcher.ErrQueueFull.Error()+": ")
		return Failure{Kind: KindOverloaded, Message: "the server is overloaded (" + why + "); retry after a short wait, or add replicas or --instances"}
	case errors.Is(err, batcher.ErrClosed):
		return Failure{Kind: KindNotReady, Message: "the model is being replaced or the server is shutting down; retry"}
	case errors.Is(err, context.DeadlineExceeded):
		return Failure{Kind: KindTimeout, Message: fmt.Sprintf("no result within %s (--timeout); the server is overloaded or the model is slow, retry after a short wait", timeout)}
	case errors.Is(err, context.Canceled):
		return Failure{Kind: KindNotReady, Message: "the server is shutting down"}
	}
	return Failure{Kind: KindEngine, Message: "the engine failed on this request: " + err.Error()}
}

// ensembleMessage is err's message as Triton words a failure in an
// ensemble's step, which its clients match: "in ensemble 'E', " for each
// ensemble the request went through, then the failed step's own error
// (not fw's wrapping of it). Outside an ensemble it is err's message.
func ensembleMessage(err error) string {
	var names []string
	var inner error
	for e := err; e != nil; e = errors.Unwrap(e) {
		if sf, ok := e.(StepFailure); ok {
			names, inner = append(names, sf.EnsembleName()), sf.Unwrap()
		}
	}
	if inner == nil {
		return err.Error()
	}
	var b strings.Builder
	for _, n := range names {
		fmt.Fprintf(&b, "in ensemble '%s', ", n)
	}
	b.WriteString(inner.Error())
	return b.String()
}

// answered is the error the model itself answered within err, or nil.
func answered(err error) engine.ModelAnswer {
	var ma engine.ModelAnswer
	if errors.As(err, &ma) {
		if _, _, ok := ma.ModelAnswer(); ok {
			return ma
		}
	}
	return nil
}

// payloadStart is the payload logger of a request sampled for it, and the
// time its inference began; an unsampled request reads no clock for it.
func payloadStart(ctx context.Context) (*payloadlog.Logger, time.Time) {
	pl := payloadlog.From(ctx)
	if pl == nil {
		return nil, time.Time{}
	}
	return pl, time.Now()
}
