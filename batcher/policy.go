package batcher

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"time"
)

// Priority levels, queue policies and preferred batch sizes: Triton's
// dynamic_batching priority_levels, default_priority_level,
// default_queue_policy, priority_queue_policy and preferred_batch_size.

// ErrQueueTimeout is returned by Submit for a request that waited in the
// queue past its queue policy's timeout (QueuePolicy.Timeout) under the
// REJECT action. The request never ran.
var ErrQueueTimeout = errors.New("batcher: queue timeout")

// QueuePolicy is how the requests of one priority level wait: Triton's
// ModelQueuePolicy.
type QueuePolicy struct {
	// MaxQueue is the most requests of the level that may wait, delayed
	// ones included; beyond it Submit fails at once with ErrQueueFull
	// ("Exceeds maximum queue size"). 0: only Config.MaxQueue bounds them.
	MaxQueue int
	// Timeout is the longest a request may wait for its engine call; 0:
	// no limit.
	Timeout time.Duration
	// AllowOverride lets a request's own timeout (QueueOptions.Timeout)
	// shorten Timeout. As in Triton, it never lengthens it and never sets
	// one where Timeout is 0.
	AllowOverride bool
	// Delay says what a request past its timeout gets: it is moved behind
	// the requests of its level that are not past theirs, and runs after
	// them (Triton's timeout_action DELAY). Otherwise it fails with
	// ErrQueueTimeout (REJECT).
	Delay bool
}

// timeout is the queue timeout of a request asking for own (0: none).
func (p QueuePolicy) timeout(own time.Duration) time.Duration {
	if p.AllowOverride && own > 0 && own < p.Timeout {
		return own
	}
	return p.Timeout
}

// Queues are the priority levels of a Batcher and the policy of each.
// The zero value is one queue with no policy (what fw does by default).
type Queues struct {
	// Levels is the number of priority levels, 1 the highest. A request
	// of a higher level is batched before any of a lower one; within a
	// level requests run in arrival order. 0: one level.
	Levels uint64
	// DefaultLevel is the level of a request that names none, or one
	// outside 1..Levels (Triton's rule); outside 1..Levels itself it is
	// taken as Levels, the lowest.
	DefaultLevel uint64
	// Policy is every level's policy, except those in ByLevel.
	Policy QueuePolicy
	// ByLevel are the levels with a policy of their own.
	ByLevel map[uint64]QueuePolicy
}

// enabled reports whether q asks for anything beyond one plain queue.
func (q Queues) enabled() bool {
	return q.Levels > 0 || q.Policy != (QueuePolicy{}) || len(q.ByLevel) > 0
}

// level is the level of a request asking for priority p (0: none).
func (q Queues) level(p uint64) uint64 {
	if q.Levels == 0 {
		return 0
	}
	if p == 0 || p > q.Levels {
		return q.DefaultLevel
	}
	return p
}

// policy is level's policy.
func (q Queues) policy(level uint64) QueuePolicy {
	if p, ok := q.ByLevel[level]; ok {
		return p
	}
	return q.Policy
}

// QueueOptions are what one request asks of the queue: Triton's request
// parameters "priority" and "timeout".
type QueueOptions struct {
	// Priority is the request's priority level (1 the highest); 0 or a
	// level the model lacks takes its default level.
	Priority uint64
	// Timeout is the request's own queue timeout, which only a policy
	// with AllowOverride honours; 0: none.
	Timeout time.Duration
}

// queueOptionsKey is the context key of a request's QueueOptions.
type queueOptionsKey struct{}

// WithQueueOptions returns ctx carrying o, for the Batcher a request
// submitted with it reaches. A Batcher without priority levels or queue
// policies reads none of it.
func WithQueueOptions(ctx context.Context, o QueueOptions) context.Context {
	return context.WithValue(ctx, queueOptionsKey{}, o)
}

// QueueOptionsFrom returns the QueueOptions in ctx (zero when none).
func QueueOptionsFrom(ctx context.Context) QueueOptions {
	o, _ := ctx.Value(queueOptionsKey{}).(QueueOptions)
	return o
}

// MicrosecondsDuration converts a microsecond count taken from a
// configuration or a request, saturating instead of overflowing.
func MicrosecondsDuration(us uint64) time.Duration {
	if us > uint64(math.MaxInt64/int64(time.Microsecond)) {
		return time.Duration(math.MaxInt64)
	}
	return time.Duration(us) * time.Microsecond
}

// before orders two queued requests of one group: the higher level
// first, then those not delayed, then arrival.
func before(a, b *request) bool {
	if a.level != b.level {
		return a.level < b.level
	}
	return !a.delayed && b.delayed
}

// enqueueLocked puts r in g's queue at its place (after every request it
// does not go before) and counts it in its level.
func (b *Batcher) enqueueLocked(g *group, r *request) {
	g.reqs = append(g.reqs, r)
	if r.enqueued.After(g.newest) {
		g.newest = r.enqueued
	}
	if !b.queueing {
		return
	}
	i := len(g.reqs) - 1
	for i > 0 && before(r, g.reqs[i-1]) {
		g.reqs[i] = g.reqs[i-1]
		i--
	}
	g.reqs[i] = r
	b.levelQueued[r.level]++
}

// admitLocked sets r's level and queue timeout from ctx, and refuses it
// when its level's queue is full.
func (b *Batcher) admitLocked(ctx context.Context, r *request) error {
	o := QueueOptionsFrom(ctx)
	r.level = b.cfg.Queues.level(o.Priority)
	p := b.cfg.Queues.policy(r.level)
	r.timeout = p.timeout(o.Timeout)
	if p.MaxQueue > 0 && b.levelQueued[r.level] >= p.MaxQueue {
		if b.cfg.Queues.Levels > 0 {
			return fmt.Errorf("%w: Exceeds maximum queue size: %d requests of priority level %d are waiting", ErrQueueFull, b.levelQueued[r.level], r.level)
		}
		return fmt.Errorf("%w: Exceeds maximum queue size: %d requests are waiting", ErrQueueFull, b.levelQueued[r.level])
	}
	return nil
}

// unqueuedLocked uncounts r, which left its queue.
func (b *Batcher) unqueuedLocked(r *request) {
	if !b.queueing {
		return
	}
	if n := b.levelQueued[r.level] - 1; n > 0 {
		b.levelQueued[r.level] = n
	} else {
		delete(b.levelQueued, r.level)
	}
}

// expire applies r's queue policy once r has waited its timeout: unless
// a worker has taken it, a REJECT policy removes it (expire returns
// ErrQueueTimeout) and a DELAY policy moves it behind the requests of its
// level that are not delayed (expire returns nil and r keeps waiting).
// Either may make a batch ready, so the gatherer is woken.
func (b *Batcher) expire(r *request) error {
	b.mu.Lock()
	if r.taken {
		b.mu.Unlock()
		return nil
	}
	g := r.g
	var err error
	if b.cfg.Queues.policy(r.level).Delay {
		i := slices.Index(g.reqs, r)
		g.reqs = slices.Delete(g.reqs, i, i+1)
		r.delayed = true
		b.unqueuedLocked(r)
		b.enqueueLocked(g, r)
	} else {
		b.removeLocked(r)
		err = ErrQueueTimeout
	}
	wake := b.waiting
	if wake {
		b.waiting = false
	}
	b.mu.Unlock()
	if wake {
		b.wake()
	}
	if err != nil {
		b.putRequest(r)
	}
	return err
}

// oldestLocked is when g's oldest request was queued: its head's time,
// unless levels or delays have put a newer request first (MaxDelay runs
// from the oldest, as Triton's pending batch does).
func (b *Batcher) oldestLocked(g *group) time.Time {
	t := g.reqs[0].enqueued
	if b.queueing {
		for _, r := range g.reqs[1:] {
			if r.enqueued.Before(t) {
				t = r.enqueued
			}
		}
	}
	return t
}

// preferredLocked reports whether g's queue holds a preferred batch: as
// many rows as the largest preferred size, or a first few requests whose
// rows add up to a preferred size (Config.PreferredSizes).
func (b *Batcher) preferredLocked(g *group) bool {
	if b.maxPreferred == 0 {
		return false
	}
	if g.rows >= b.maxPreferred {
		return true
	}
	if g.rows < b.cfg.PreferredSizes[0] {
		return false
	}
	n, _ := b.preferredPrefix(g)
	return n > 0
}

// minRowsLocked reports whether g's queue holds Config.MinRows rows (false
// without MinRows).
func (b *Batcher) minRowsLocked(g *group) bool {
	return b.cfg.MinRows > 0 && g.rows >= b.cfg.MinRows
}

// preferredPrefix is the longest run of requests at the head of g whose
// rows add up to a preferred size, without passing the largest one, as
// Triton's dynamic batcher picks a preferred batch: n requests of rows, or
// 0 when there is none.
func (b *Batcher) preferredPrefix(g *group) (n, rows int) {
	sum := 0
	for i, r := range g.reqs {
		sum += r.rows
		if sum > b.maxPreferred {
			break
		}
		if _, ok := slices.BinarySearch(b.cfg.PreferredSizes, sum); ok {
			n, rows = i+1, sum
		}
	}
	return n, rows
}

// sortedSizes returns the positive sizes of s, sorted, without repeats.
func sortedSizes(s []int) []int {
	if len(s) == 0 {
		return nil
	}
	out := make([]int, 0, len(s))
	for _, v := range s {
		if v > 0 {
			out = append(out, v)
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}
