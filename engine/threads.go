package engine

// The intra-op thread count of a small model: measured at load, not guessed.

import (
	"context"
	"fmt"
	"time"
)

// ThreadTrial is what TryOneThread measured: the fastest call of each
// batch size with the model's threads and with one, and the count kept.
type ThreadTrial struct {
	Rows      []int           // the batch sizes timed
	Many, One []time.Duration // the fastest call of each size: m.Threads() threads, one thread
	Threads   int             // the thread count chosen: m.Threads(), or 1 when one was returned
	Skipped   string          // why no one-thread session was tried, when none was
}

// oneThreadCallMax is the longest call (with the model's threads, at each
// size timed) for which one thread is tried: a longer call has work to
// spread over threads, and timing it would slow the load.
const oneThreadCallMax = time.Millisecond

// oneThreadSlack is how much slower than the model's threads one thread may
// be and still be kept: within it, the second thread's wake-up on every call
// costs more CPU than it saves time.
const oneThreadSlack = 1.10

// oneThreadMaxBytes bounds the model files and the trial inputs a trial
// loads or builds: a second session of a model this big (or inputs this
// big) could take memory the first one left, for a CPU saving that matters
// on small models only.
const oneThreadMaxBytes = 256 << 20

// trialRounds is how many interleaved calls of each session time each size;
// the fastest counts, which other load on the machine can only slow.
const trialRounds = 15

// TryOneThread loads m's file again with one intra-op thread when m, an
// ONNX model on CPU with more than one thread from a file of at most 256
// MB, calls in under 1 ms at 1 and at maxRows rows (inputs of at most 256
// MB), and times both sessions on the same inputs (batches of 1
// and maxRows rows, interleaved). A small model's call has too little work
// to share: each call wakes the other threads only to wait for them, which
// costs CPU and often time. When one thread is at most 10% slower at every
// size, TryOneThread returns the one-thread model, which the caller then
// owns beside m; otherwise it closes it and returns nil. Inputs are the
// test vector's rows, or zeros when the file has none and every input has
// a fixed numeric shape; without either, nothing is tried (trial.Skipped
// says why).
func TryOneThread(ctx context.Context, m *Model, maxRows int) (*Model, ThreadTrial, error) {
	trial := ThreadTrial{Threads: m.Threads()}
	if cuda, _, _ := m.opts.deviceIndex(); cuda || !m.Format.ONNX() || m.Threads() <= 1 {
		trial.Skipped = "not an ONNX model on CPU with more than one thread"
		return nil, trial, nil
	}
	if m.Size > oneThreadMaxBytes {
		trial.Skipped = fmt.Sprintf("the file is %d MB", m.Size>>20)
		return nil, trial, nil
	}
	trial.Rows = []int{1}
	if m.Batched() && maxRows > 1 {
		trial.Rows = append(trial.Rows, maxRows)
	}
	inputs := make([][]Tensor, 0, len(trial.Rows))
	for _, n := range trial.Rows { // the fewest rows first: a big model costs two calls of one row
		if len(inputs) > 0 && tensorBytes(inputs[0])*int64(n) > oneThreadMaxBytes {
			trial.Skipped = fmt.Sprintf("%d rows of input would take over %d MB", n, oneThreadMaxBytes>>20)
			return nil, trial, nil
		}
		in, err := m.trialInputs(n)
		if err != nil {
			trial.Skipped = err.Error()
			return nil, trial, nil
		}
		var d time.Duration
		for range 2 { // the first call of a size may set up what later ones reuse
			if d, err = timeCall(ctx, m, in); err != nil {
				return nil, trial, fmt.Errorf("timing %d rows with %d threads: %w", n, m.Threads(), err)
			}
		}
		if d >= oneThreadCallMax {
			trial.Skipped = fmt.Sprintf("a call of %d rows takes %v with %d threads", n, d.Round(time.Microsecond), m.Threads())
			return nil, trial, nil
		}
		inputs = append(inputs, in)
	}
	opts := m.opts
	opts.Threads = 1
	one, err := Load(ctx, m.Path, opts)
	if err != nil {
		return nil, trial, fmt.Errorf("loading %s with one thread: %w", m.Path, err)
	}
	keep := false
	defer func() {
		if !keep {
			one.Close()
		}
	}()
	asFast := true
	for _, in := range inputs {
		var many, single time.Duration
		for range trialRounds { // interleaved: drift on the machine falls on both
			a, err := timeCall(ctx, m, in)
			if err != nil {
				return nil, trial, fmt.Errorf("timing with %d threads: %w", m.Threads(), err)
			}
			b, err := timeCall(ctx, one, in)
			if err != nil {
				return nil, trial, fmt.Errorf("timing with one thread: %w", err)
			}
			many, single = minDuration(many, a), minDuration(single, b)
		}
		trial.Many, trial.One = append(trial.Many, many), append(trial.One, single)
		asFast = asFast && float64(single) <= oneThreadSlack*float64(many)
	}
	if !asFast {
		return nil, trial, nil
	}
	keep = true
	trial.Threads = 1
	return one, trial, nil
}

// tensorBytes is the data size of in.
func tensorBytes(in []Tensor) int64 {
	var n int64
	for _, t := range in {
		n += int64(len(t.Data))
	}
	return n
}

// timeCall is how long one call of m on in takes.
func timeCall(ctx context.Context, m *Model, in []Tensor) (time.Duration, error) {
	start := time.Now()
	if _, err := m.Run(ctx, in); err != nil {
		return 0, err
	}
	return time.Since(start), nil
}

// minDuration is the smaller of a and b, a zero a counting as unset.
func minDuration(a, b time.Duration) time.Duration {
	if a == 0 || b < a {
		return b
	}
	return a
}

// trialInputs are n rows to time the model with: the test vector's, or
// zeros when the file has none and every input's shape (past the batch
// axis) is fixed and numeric.
func (m *Model) trialInputs(n int) ([]Tensor, error) {
	in, err := m.ExampleInputs(n)
	if err == nil {
		return in, nil
	}
	in = make([]Tensor, 0, len(m.inputs))
	for _, spec := range m.inputs {
		if spec.DType == String || spec.DType == Invalid {
			return nil, fmt.Errorf("input %q is %s: no inputs to time the model with", spec.Name, spec.DType)
		}
		batch := int64(-1) // no batch axis: the spec's axis 0 stands
		if m.batched {
			batch = int64(n)
		}
		shape, ok := []int64{}, true // a scalar input
		if len(spec.Shape) > 0 {
			shape, ok = concreteShape(spec.Shape, batch)
		}
		if !ok {
			return nil, fmt.Errorf("input %q has a dynamic axis %s and the file no test vector: no inputs to time the model with", spec.Name, FormatShape(spec.Shape))
		}
		t, err := NewTensor(spec.DType, shape)
		if err != nil {
			return nil, fmt.Errorf("zeros for input %q: %w", spec.Name, err)
		}
		in = append(in, t)
	}
	return in, nil
}
