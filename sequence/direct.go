package sequence

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/fw-serve/fw/batcher"
	"github.com/fw-serve/fw/engine"
)

// DirectConfig makes the Batcher form a batched model's batches itself,
// as Triton's direct strategy does (Config.Direct): the slots are Groups
// groups (the model's instances) of Size slots (max_batch_size). A sequence
// holds one slot from its first request to its END (or until it is idle
// past MaxIdle); its requests queue in the slot as they come, in order. Each
// group runs one batch at a time: the head request of every occupied slot,
// slots 0 to the highest one holding a request, an empty slot below it
// filled with a null request (its READY control false, its outputs
// dropped), so a sequence keeps its row in every batch; a request whose
// tensors differ in shape from the batch's first waits for a later batch
// in the same way. The batch is one engine call of its own
// (batcher.WithWhole), its null rows reported as padding. A new sequence
// with no slot free waits in the backlog, in order, and takes the slot an
// END frees when that END joins a batch.
type DirectConfig struct {
	Groups, Size int
	// MaxDelay and MinUtilization are direct's max_queue_delay_microseconds
	// and minimum_slot_utilization: with both set, a group's batch waits
	// until that share of its slots holds a request, or its oldest request
	// has waited MaxDelay (float32, as Triton compares them).
	MaxDelay       time.Duration
	MinUtilization float32
	// DelayScheduler and BacklogDelay hold the first batches until that
	// many requests wait in the slots, and in the backlog: Triton's
	// TRITONSERVER_DELAY_SCHEDULER and TRITONSERVER_BACKLOG_DELAY_SCHEDULER
	// test hooks, with which its QA suites make batches deterministic.
	DelayScheduler, BacklogDelay int
}

// slotReq is one request queued in its sequence's slot.
type slotReq struct {
	t      *Ticket
	ctx    context.Context
	inputs []engine.Tensor // the client's
	full   []engine.Tensor // the model's, once taken (controls and state added)
	submit SubmitFunc
	enq    time.Time
	waited time.Duration // in the slot (and the backlog) before its batch
	taken  bool          // guarded by Batcher.mu: in a batch
	res    chan slotResult
}

type slotResult struct {
	out    []engine.Tensor
	timing batcher.Timing
	err    error
}

// direct is the slot scheduler's state, guarded by Batcher.mu.
type direct struct {
	cfg DirectConfig
	// occ holds the sequence in each slot (group g's slots are
	// occ[g*Size:(g+1)*Size]); nil is free.
	occ []*seq
	// backlog is the sequences waiting for a slot, oldest first.
	backlog []*seq
	wake    []chan struct{} // capacity 1, one per group
	// released: the delay hooks' counts were reached once, which releases
	// every group for good (Triton's instances each report their count
	// and keep releasing once the total was reached).
	released bool
}

// startDirect starts the groups' schedulers.
func (b *Batcher) startDirect() {
	d := b.dir
	for range d.cfg.Groups {
		d.wake = append(d.wake, make(chan struct{}, 1))
	}
	for g := range d.cfg.Groups {
		go b.groupLoop(g)
	}
}

// signalLocked wakes the scheduler of the group holding s.
func (b *Batcher) signalLocked(s *seq) {
	if s.pos < 0 {
		return
	}
	select {
	case b.dir.wake[s.pos/b.dir.cfg.Size] <- struct{}{}:
	default:
	}
}

// placeLocked gives s the lowest free slot (over the groups, lowest index
// first, as Triton's) or puts it at the back of the backlog.
func (b *Batcher) placeLocked(s *seq) {
	d := b.dir
	for i := range d.cfg.Size {
		for g := range d.cfg.Groups {
			if p := g*d.cfg.Size + i; d.occ[p] == nil {
				d.occ[p], s.pos, s.slot = s, p, true
				if s.timer != nil {
					s.timer.Stop()
				}
				b.signalLocked(s)
				return
			}
		}
	}
	if !slices.Contains(d.backlog, s) {
		d.backlog = append(d.backlog, s)
	}
}

// releaseLocked frees the slot s holds and hands it to the backlog's
// oldest sequence still waiting. s has nothing queued then: its END was the
// last request it took (a START after it begins a sequence of its own), or
// it was freed idle.
func (b *Batcher) releaseLocked(s *seq) {
	d := b.dir
	if s.pos < 0 { // no slot (its END freed it, or it waits): out of the backlog once it has nothing queued
		if i := slices.Index(d.backlog, s); i >= 0 && len(s.queue) == 0 {
			d.backlog = slices.Delete(d.backlog, i, i+1)
		}
		return
	}
	d.occ[s.pos] = nil
	s.pos, s.slot = -1, false
	for len(d.backlog) > 0 {
		next := d.backlog[0]
		d.backlog = d.backlog[1:]
		if !next.gone && len(next.queue) > 0 {
			b.placeLocked(next)
			break
		}
	}
}

// runDirect is Ticket.Run with a slot scheduler: the request queues in its
// sequence's slot once the request before it has, and waits for its batch.
func (b *Batcher) runDirect(ctx context.Context, t *Ticket, inputs []engine.Tensor, submit SubmitFunc) ([]engine.Tensor, batcher.Timing, error) {
	defer b.finish(t)
	defer t.markQueued()
	var none batcher.Timing
	expired := b.backlog(t.s, batcher.QueueOptionsFrom(ctx).Timeout)
	select {
	case <-t.prevQueued:
	case <-ctx.Done():
		return nil, none, ctx.Err()
	case <-expired:
		return nil, none, ErrBacklogTimeout
	}
	if len(inputs) != len(b.clientIn) {
		return nil, none, fmt.Errorf("sequence: %d inputs for the model's %d client inputs", len(inputs), len(b.clientIn))
	}
	if err := b.CheckRows(inputs); err != nil {
		return nil, none, err
	}
	r := &slotReq{t: t, ctx: ctx, inputs: inputs, submit: submit, enq: b.now(), res: make(chan slotResult, 1)}
	b.mu.Lock()
	switch {
	case b.closed:
		b.mu.Unlock()
		return nil, none, batcher.ErrClosed
	case t.s.gone:
		b.mu.Unlock()
		return nil, none, ErrBacklogTimeout
	}
	t.s.queue = append(t.s.queue, r)
	if t.s.pos < 0 {
		b.placeLocked(t.s)
	} else {
		b.signalLocked(t.s)
	}
	b.mu.Unlock()
	t.markQueued()
	drop := func() {
		b.mu.Lock()
		if !r.taken {
			if i := slices.Index(r.t.s.queue, r); i >= 0 {
				r.t.s.queue = slices.Delete(r.t.s.queue, i, i+1)
			}
		}
		b.mu.Unlock()
	}
	select {
	case res := <-r.res:
		return res.out, res.timing, res.err
	case <-ctx.Done():
		drop()
		return nil, none, ctx.Err()
	case <-expired:
		drop()
		return nil, none, ErrBacklogTimeout
	case <-b.stop:
		drop()
		b.mu.Lock()
		taken := r.taken
		b.mu.Unlock()
		if !taken {
			return nil, none, batcher.ErrClosed
		}
		select { // in a batch already: it finishes
		case res := <-r.res:
			return res.out, res.timing, res.err
		case <-ctx.Done():
			return nil, none, ctx.Err()
		}
	}
}

// markQueued lets the sequence's next request queue: once, when this one
// has queued or given up.
func (t *Ticket) markQueued() {
	if t.queued != nil {
		t.queuedOnce.Do(func() { close(t.queued) })
	}
}

// groupLoop is group g's scheduler: one batch at a time, until Close (a
// batch in flight then still finishes).
func (b *Batcher) groupLoop(g int) {
	d := b.dir
	hold := d.cfg.DelayScheduler > 0 // the backlog's count is looked at only with it, as Triton's
	var timer *time.Timer
	for {
		var wait time.Duration
		var batch []*slotReq
		b.mu.Lock()
		if b.closed {
			b.mu.Unlock()
			return
		}
		if hold && b.holdLocked() {
			wait = 10 * time.Millisecond // as Triton's: look again shortly
		} else {
			hold = false
			batch, wait = b.formLocked(g)
		}
		wake := d.wake[g]
		b.mu.Unlock()
		if batch != nil {
			b.runSlots(batch)
			continue
		}
		var fire <-chan time.Time
		if wait > 0 {
			if timer == nil {
				timer = time.NewTimer(wait)
			} else {
				timer.Reset(wait)
			}
			fire = timer.C
		}
		select {
		case <-wake:
		case <-fire:
		case <-b.stop:
			return
		}
		if timer != nil {
			timer.Stop()
		}
	}
}

// holdLocked reports whether the delay hooks still hold the first batches:
// fewer than DelayScheduler requests wait in the slots (all groups), or
// fewer than BacklogDelay in the backlog.
func (b *Batcher) holdLocked() bool {
	d := b.dir
	if d.released {
		return false
	}
	defer func() {
		if !d.released {
			return
		}
		for _, w := range d.wake { // the other groups look again now
			select {
			case w <- struct{}{}:
			default:
			}
		}
	}()
	queued := 0
	for _, s := range d.occ {
		if s != nil {
			queued += len(s.queue)
		}
	}
	if queued < d.cfg.DelayScheduler {
		return true
	}
	backlogged := 0
	for _, s := range d.backlog {
		backlogged += len(s.queue)
	}
	d.released = backlogged >= d.cfg.BacklogDelay
	return !d.released
}

// formLocked takes group g's next batch (nil when there is none yet, with
// how long to wait before looking again, 0: until woken): per slot up to
// the highest occupied one, its head request or nil for a null request.
// A request taken has its full inputs built; an END frees its slot.
func (b *Batcher) formLocked(g int) ([]*slotReq, time.Duration) {
	d := b.dir
	occ := d.occ[g*d.cfg.Size : (g+1)*d.cfg.Size]
	highest, ready := -1, 0
	var oldest time.Time
	for i, s := range occ {
		if s == nil || len(s.queue) == 0 {
			continue
		}
		ready++
		highest = i
		if e := s.queue[0].enq; oldest.IsZero() || e.Before(oldest) {
			oldest = e
		}
	}
	if highest < 0 {
		return nil, 0
	}
	if d.cfg.MaxDelay > 0 && d.cfg.MinUtilization > 0 {
		age := b.now().Sub(oldest)
		if age <= d.cfg.MaxDelay && float32(ready)/float32(d.cfg.Size) < d.cfg.MinUtilization {
			return nil, max(d.cfg.MaxDelay-age, time.Microsecond) // runs once past the delay, as Triton's
		}
	}
	batch := make([]*slotReq, highest+1)
	var first []engine.Tensor
	for i := 0; i <= highest; i++ {
		s := occ[i]
		if s == nil || len(s.queue) == 0 {
			continue
		}
		r := s.queue[0]
		full := b.fullInputs(r.t, r.inputs, s.state)
		if first != nil && !sameShapes(first, full) {
			continue // waits for a batch of its shapes (its inputs' or its state's)
		}
		if first == nil {
			first = full
		}
		s.queue = s.queue[1:]
		r.taken, r.full, r.waited = true, full, b.now().Sub(r.enq)
		batch[i] = r
		if r.t.end {
			b.releaseLocked(s) // as Triton: the slot is free once the END is in a batch
		}
	}
	return batch, 0
}

// sameShapes reports whether two requests' tensors could be rows of one
// engine call.
func sameShapes(a, c []engine.Tensor) bool {
	for i := range a {
		if a[i].DType != c[i].DType || !slices.Equal(a[i].Shape, c[i].Shape) {
			return false
		}
	}
	return true
}

// runSlots makes batch's engine call and answers its requests: the
// inputs of each row in slot order, null rows copied from the first
// request with their controls not ready, and each request's state outputs
// kept for its sequence's next request. The call carries the first
// request's context (its trace, without its cancellation): one engine call
// for the batch, as Triton's.
func (b *Batcher) runSlots(batch []*slotReq) {
	var proto *slotReq
	for _, r := range batch {
		if r != nil {
			proto = r
			break
		}
	}
	var null []engine.Tensor // every null row alike: the first request's, not ready
	rows := make([][]engine.Tensor, len(batch))
	padding := 0
	for i, r := range batch {
		if r != nil {
			rows[i] = r.full
			continue
		}
		if null == nil {
			null = b.nullInputs(proto.full)
		}
		rows[i] = null
		padding++
	}
	joined := make([]engine.Tensor, len(b.inputs))
	for j := range joined {
		joined[j] = joinRows(rows, j)
	}
	ctx := batcher.WithWhole(context.WithoutCancel(proto.ctx), padding)
	out, timing, err := proto.submit(ctx, joined)
	if err != nil && retryAlone(err) && len(batch)-padding > 1 {
		// One request's fault must not fail the others: each alone.
		for i, r := range batch {
			if r != nil {
				b.runAlone(r, rows[i])
			}
		}
		return
	}
	var parts [][]engine.Tensor // [output][row]
	if err == nil {
		parts = make([][]engine.Tensor, len(out))
		ones := make([]int, len(batch))
		for i := range ones {
			ones[i] = 1
		}
		for j, o := range out {
			if o.Absent() {
				continue
			}
			if parts[j], err = engine.SplitRows(o, ones); err != nil {
				err = fmt.Errorf("splitting output %d of a sequence batch of %d rows: %w", j, len(batch), err)
				break
			}
		}
	}
	for i, r := range batch {
		if r == nil {
			continue
		}
		if err != nil {
			r.res <- slotResult{timing: r.queued(timing), err: err}
			continue
		}
		row := make([]engine.Tensor, len(out))
		for j := range out {
			if parts[j] != nil {
				row[j] = parts[j][i]
			}
		}
		res, rerr := b.keep(r.t, rows[i], row)
		r.res <- slotResult{out: res, timing: r.queued(timing), err: rerr}
	}
}

// queued is timing with the request's wait in its slot added to its queue
// time, as Triton counts a sequence request's queue from its arrival.
func (r *slotReq) queued(timing batcher.Timing) batcher.Timing {
	timing.Queue += r.waited
	return timing
}

// retryAlone reports whether a failed batch's requests are worth running
// one by one: not when the server refused it for its own state (closing,
// queue full) or gave up on it.
func retryAlone(err error) bool {
	return !errors.Is(err, batcher.ErrClosed) && !errors.Is(err, batcher.ErrQueueFull) &&
		!errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded)
}

// runAlone runs one request of a failed batch as an engine call of its
// own and answers it.
func (b *Batcher) runAlone(r *slotReq, full []engine.Tensor) {
	out, timing, err := r.submit(batcher.WithWhole(context.WithoutCancel(r.ctx), 0), full)
	if err != nil {
		r.res <- slotResult{timing: r.queued(timing), err: err}
		return
	}
	res, err := b.keep(r.t, full, out)
	r.res <- slotResult{out: res, timing: r.queued(timing), err: err}
}

// fullInputs are a request's model inputs: the client's, the controls and
// the sequence's state (its initial state on START).
func (b *Batcher) fullInputs(t *Ticket, inputs, state []engine.Tensor) []engine.Tensor {
	full := make([]engine.Tensor, len(b.inputs))
	for i, j := range b.clientIn {
		full[j] = inputs[i]
	}
	for i, c := range b.cfg.Controls {
		full[b.controlIn[i]] = b.controlValue(c, t.s.id, t.start, t.end, true)
	}
	for i := range b.cfg.States {
		if t.start || state == nil {
			full[b.stateIn[i]] = b.initial[i]
		} else {
			full[b.stateIn[i]] = state[i]
		}
	}
	return full
}

// nullInputs is a null request's row: proto's tensors, its controls not
// ready, no START or END, correlation ID 0 (Triton's null request).
func (b *Batcher) nullInputs(proto []engine.Tensor) []engine.Tensor {
	row := slices.Clone(proto)
	for i, c := range b.cfg.Controls {
		row[b.controlIn[i]] = b.controlValue(c, ID{}, false, false, false)
	}
	return row
}

// joinRows is input j of every row, one row each, as one tensor.
func joinRows(rows [][]engine.Tensor, j int) engine.Tensor {
	p := rows[0][j]
	if p.Absent() {
		return p
	}
	n := 0
	for _, r := range rows {
		n += len(r[j].Data)
	}
	data := make([]byte, 0, n)
	for _, r := range rows {
		data = append(data, r[j].Data...)
	}
	shape := slices.Clone(p.Shape)
	shape[0] = int64(len(rows))
	return engine.Tensor{DType: p.DType, Shape: shape, Data: data}
}
