package serving

import (
	"context"
	"errors"
	"fmt"

	"github.com/fw-serve/fw/engine"
)

// DecoupledError refuses a request that expects one answer from a decoupled
// model (Triton's model_transaction_policy decoupled: true), which answers
// a request any number of times.
type DecoupledError struct{ Model string }

func (e *DecoupledError) Error() string {
	return fmt.Sprintf("model '%s' is decoupled (model_transaction_policy decoupled: true): it answers a request any number of times, so its requests go over gRPC's ModelStreamInfer (tritonclient's start_stream and async_stream_infer) or POST /v2/models/%s/generate_stream; this endpoint doesn't support models with decoupled transaction policy", e.Model, e.Model)
}

// Decoupled reports whether inst's model answers over a stream only.
func (i *Instance) Decoupled() bool { return i.Model != nil && i.Model.Decoupled() }

// InferStream runs one request of a decoupled model: its inputs checked as
// Infer checks them and queued in its batcher like any request (a batch's
// requests reach the model's execute together), then each of the model's
// responses handed to send as it comes, while execute runs and after it
// (outputs, or the error the model answered, final on the last, which may
// carry neither); a ResponseSink in ctx holds the parameters of the
// response being sent. It returns when the final response has been sent, or
// with the first error of the inputs, send, ctx or the engine; ctx ending
// tells the model its request was cancelled.
func InferStream(ctx context.Context, inst *Instance, inputs []engine.Tensor, send func(outs []engine.Tensor, err error, final bool) error) error {
	if !inst.Decoupled() {
		return errors.New("the model is not decoupled")
	}
	inputs, rows, err := inst.toModel(inputs)
	if err != nil {
		return err
	}
	q := engine.NewResponses()
	started := make(chan error, 1)
	go func() {
		_, _, err := inst.Batcher.SubmitChecked(engine.WithResponses(ctx, q), inputs, rows)
		started <- err
	}()
	sink := engine.ResponseSinkOf(ctx) // each response's parameters, for send to read
	return q.Forward(ctx, started, func(r engine.Response) error {
		if inst.Reshape != nil && r.Outs != nil {
			inst.Reshape.fromModel(r.Outs)
		}
		if sink != nil {
			sink.SetParameters(r.Parameters)
		}
		return send(r.Outs, r.Err, r.Final)
	})
}
