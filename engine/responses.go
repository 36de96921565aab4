package engine

import (
	"context"
	"fmt"
	"sync"
)

// Response is one response of a decoupled request: its outputs, or the
// error the model answered; Final on the request's last (which may carry
// neither: Triton's empty final response).
type Response struct {
	Outs  []Tensor
	Err   error
	Final bool
	// Parameters are the response's parameters (a JSON object), if any.
	Parameters string
}

// Responses is a decoupled request's responses in flight, in order, up to
// the final one: the engine puts them (from any goroutine, never waiting
// for the reader, which would hold up the model), the request's own
// goroutine takes them when Ready says there are some. What a slow reader
// has not taken yet is bounded: a response with outputs that would take
// the waiting tensor data past MaxQueuedBytes ends the request with an
// error saying so instead (one alone always goes).
type Responses struct {
	ready chan struct{}

	mu     sync.Mutex
	queue  []Response
	bytes  int64 // tensor bytes in queue
	closed bool
	onEnd  func()
}

// MaxQueuedBytes bounds the tensor bytes of a decoupled request's
// responses waiting for its client (64 MiB).
const MaxQueuedBytes = 64 << 20

// NewResponses returns an empty queue.
func NewResponses() *Responses { return &Responses{ready: make(chan struct{}, 1)} }

// Ready receives when there are responses to take.
func (r *Responses) Ready() <-chan struct{} { return r.ready }

// Take returns the responses queued so far.
func (r *Responses) Take() []Response {
	r.mu.Lock()
	defer r.mu.Unlock()
	q := r.queue
	r.queue, r.bytes = nil, 0
	return q
}

// Put queues resp unless the request has ended; a final one ends it (and
// runs the function OnEnd set). It reports whether resp was queued.
func (r *Responses) Put(resp Response) bool {
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return false
	}
	var n int64
	for _, t := range resp.Outs {
		n += int64(len(t.Data))
	}
	if n > 0 && r.bytes > 0 && r.bytes+n > MaxQueuedBytes { // one response alone always goes, and one without outputs
		resp = Response{Final: true, Err: fmt.Errorf("the client has not read %d bytes of this request's responses, and the next would pass the limit of %d: "+
			"the model sends faster than the client reads; read the stream faster or send smaller responses", r.bytes, MaxQueuedBytes)}
		n = 0
	}
	r.bytes += n
	r.closed = resp.Final
	r.queue = append(r.queue, resp)
	end := r.onEnd
	if resp.Final {
		r.onEnd = nil
	}
	r.mu.Unlock()
	select {
	case r.ready <- struct{}{}:
	default:
	}
	if resp.Final && end != nil {
		end()
	}
	return true
}

// Fail ends the request with err (nothing when it has ended).
func (r *Responses) Fail(err error) { r.Put(Response{Err: err, Final: true}) }

// Ended reports whether the final response was put.
func (r *Responses) Ended() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.closed
}

// OnEnd sets a function to run once the final response is put (at once
// when it has been): the engine's clean-up of the request.
func (r *Responses) OnEnd(f func()) {
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		f()
		return
	}
	r.onEnd = f
	r.mu.Unlock()
}

// Forward hands each response to send as it comes, until the final one:
// the loop of a decoupled request's own goroutine. started receives the
// error of the call that started the request (nil: the responses follow),
// which ends it unless its final response was already put. It returns
// with the first error of send, started or ctx.
func (r *Responses) Forward(ctx context.Context, started <-chan error, send func(Response) error) error {
	for {
		select {
		case <-r.Ready():
		case err := <-started:
			started = nil
			if err != nil && !r.Ended() {
				return err
			}
			continue
		case <-ctx.Done():
			return ctx.Err()
		}
		for _, resp := range r.Take() {
			if err := send(resp); err != nil {
				return err
			}
			if resp.Final {
				return nil
			}
		}
	}
}

// responsesKey carries a request's Responses in its context.
type responsesKey struct{}

// WithResponses returns ctx carrying r: the request it is the context of
// is answered through r (a decoupled model), and the engine's call only
// starts it.
func WithResponses(ctx context.Context, r *Responses) context.Context {
	return context.WithValue(ctx, responsesKey{}, r)
}

// ResponsesOf returns the Responses ctx carries, nil when none.
func ResponsesOf(ctx context.Context) *Responses {
	r, _ := ctx.Value(responsesKey{}).(*Responses)
	return r
}
