package serving

import "context"

// outputsKey is the context key of WithOutputs.
type outputsKey struct{}

// WithOutputs marks ctx with the outputs a request asks for, as indexes
// into its instance's Outputs: a model that can skip the work of outputs
// nobody reads (an ensemble's steps) reads them with RequestedOutputs.
// Transports set it only where that model can use it.
func WithOutputs(ctx context.Context, idx []int) context.Context {
	return context.WithValue(ctx, outputsKey{}, idx)
}

// RequestedOutputs are the outputs WithOutputs marked ctx with; ok is
// false when it did not, or marked it with nil (every output is wanted:
// how a model that passes ctx on to another clears its own marking).
func RequestedOutputs(ctx context.Context) (idx []int, ok bool) {
	idx, ok = ctx.Value(outputsKey{}).([]int)
	return idx, ok && idx != nil
}

// SkipsOutputs reports whether inst's model can skip the work of outputs a
// request does not ask for (an ensemble, whose steps that produce only
// those do not run), so a transport marks the request's context.
func (i *Instance) SkipsOutputs() bool { return i.Config.Ensemble != nil }
