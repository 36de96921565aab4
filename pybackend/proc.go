package pybackend

import (
	"bufio"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"strings"
	"sync"
	"time"

	"github.com/fw-serve/fw/engine"
)

// maxHeader bounds the JSON header of one message from the process.
const maxHeader = 1 << 20

// finalizeWait is how long finalize may take before the process is killed.
const finalizeWait = 10 * time.Second

// cancelGrace is how long an execute call whose own context ended (the
// batcher's: the server stops) may go on after the model was told
// (request.is_cancelled() turns true) before its process is killed:
// Python cannot be interrupted mid-call. A request's own context ending
// only tells the model.
const cancelGrace = 5 * time.Second

// maxBLS bounds the BLS calls one process has in flight: past it a call is
// answered with an error at once (each holds a goroutine and its tensors).
const maxBLS = 256

// tailLines is how many of the process's last lines an error quotes.
const tailLines = 8

// proc is one running instance: the Python process and its channel. A
// reader goroutine takes every message the process sends and hands it to
// whoever waits for it: the answer to a control message (init, auto,
// finalize), an execute call's result (by call id), a decoupled request's
// responses (by request id), or a BLS call to run.
type proc struct {
	cmd      *exec.Cmd
	cfg      Config
	instance string   // its model_instance_name
	outNames []string // the configuration's outputs, every request's requested_output_names
	w        io.WriteCloser
	r        *bufio.Reader

	done   chan struct{} // closed once the process has exited
	werr   error         // its exit status, set before done closes
	life   context.Context
	cancel context.CancelFunc // ends life: BLS calls the process made

	wmu sync.Mutex // one message written at a time

	mu      sync.Mutex
	tail    []string // its last lines on standard error
	nextID  uint64
	calls   map[uint64]chan reply // execute calls waiting for their result
	streams map[uint64]*stream    // decoupled requests not yet final
	blsStop map[uint64]func()     // BLS calls to decoupled models in flight: their cancel()
	blsBusy chan struct{}         // one token per BLS call in flight (maxBLS)
	ctrl    chan reply            // answers to init, auto and finalize
	ended   error                 // why the reader stopped (nil while it reads)
	// initialized is set once initialize has returned; hasIsReady then
	// says whether the model defines is_ready().
	initialized, hasIsReady bool
}

// reply is one message with its tensors' bytes; m is nil when the
// process ended before answering.
type reply struct {
	m     *message
	datas [][]byte
}

// spawn starts the stub for instance i of cfg and its reader.
func spawn(cfg Config, i int) (*proc, error) {
	// After the source, the process's name in ps and pgrep, as Triton's
	// (triton_python_backend_stub), and its instance's.
	cmd := exec.Command(cfg.Python, "-u", "-c", stubSource, "triton_python_backend_stub", fmt.Sprintf("%s_0_%d", cfg.Name, i))
	cmd.Dir = cfg.Dir
	setProcAttrs(cmd)
	w, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	r, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	e, err := cmd.StderrPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s for the Python model: %w", cfg.Python, err)
	}
	life, cancel := context.WithCancel(context.Background())
	p := &proc{cmd: cmd, cfg: cfg, instance: fmt.Sprintf("%s_0_%d", cfg.Name, i), w: w, r: bufio.NewReaderSize(r, 64<<10), done: make(chan struct{}),
		life: life, cancel: cancel, calls: map[uint64]chan reply{}, streams: map[uint64]*stream{}, blsStop: map[uint64]func(){}, blsBusy: make(chan struct{}, maxBLS), ctrl: make(chan reply, 1)}
	for _, o := range cfg.Outputs {
		p.outNames = append(p.outNames, o.Name)
	}
	logged := make(chan struct{})
	read := make(chan struct{})
	go func() {
		defer close(logged)
		p.logLines(e, i)
	}()
	go func() {
		defer close(read)
		p.readLoop()
	}()
	go func() {
		<-logged // Wait closes the pipes: read them to the end first
		<-read
		p.werr = cmd.Wait()
		close(p.done)
	}()
	return p, nil
}

// logLines logs what the process writes to standard error, a line at a
// time (long lines cut), keeping the last few for errors.
func (p *proc) logLines(rd io.Reader, i int) {
	br := bufio.NewReaderSize(rd, 16<<10)
	for {
		line, err := br.ReadSlice('\n')
		if len(line) > 0 {
			s := strings.TrimRight(string(line), "\r\n")
			p.cfg.Log.Info("python model", "model", p.cfg.Name, "version", p.cfg.Version, "instance", i, "line", s)
			p.mu.Lock()
			p.tail = append(p.tail, s)
			if len(p.tail) > tailLines {
				p.tail = p.tail[len(p.tail)-tailLines:]
			}
			p.mu.Unlock()
		}
		if err != nil && !errors.Is(err, bufio.ErrBufferFull) {
			return
		}
	}
}

// readLoop hands each message to whoever waits for it until the channel
// fails; then every waiter is told, the process is killed (a process that
// broke the protocol is not trusted with more) and BLS calls it made end.
func (p *proc) readLoop() {
	var err error
	for err == nil {
		var m *message
		var datas [][]byte
		if m, datas, err = p.recv(p.cfg.MaxBytes); err != nil {
			break
		}
		err = p.dispatch(m, datas)
	}
	p.mu.Lock()
	p.ended = err
	calls, streams := p.calls, p.streams
	p.calls, p.streams = map[uint64]chan reply{}, map[uint64]*stream{}
	p.mu.Unlock()
	p.kill()
	for _, ch := range calls {
		ch <- reply{}
	}
	if len(streams) > 0 {
		// With the exit status, once reaped (which waits for this reader
		// to end): a goroutine.
		go func() {
			end := p.died("ended before its last response", err)
			for _, s := range streams {
				s.fail(end)
			}
		}()
	}
	select {
	case p.ctrl <- reply{}:
	default:
	}
}

// dispatch hands one message on; an error breaks the channel.
func (p *proc) dispatch(m *message, datas [][]byte) error {
	switch m.Op {
	case "ready", "error", "config", "done":
		select {
		case p.ctrl <- reply{m, datas}:
			return nil
		default:
			return fmt.Errorf("an unasked %q message", m.Op)
		}
	case "result", "ready_result":
		p.mu.Lock()
		ch, ok := p.calls[m.Call]
		delete(p.calls, m.Call)
		p.mu.Unlock()
		if !ok {
			return fmt.Errorf("a result for call %d, which is not waiting", m.Call)
		}
		ch <- reply{m, datas}
		return nil
	case "send":
		p.mu.Lock()
		s := p.streams[m.Req]
		if m.Final {
			delete(p.streams, m.Req)
		}
		p.mu.Unlock()
		if s != nil { // nil: a request given up (its client went away)
			s.deliver(p.cfg, m, datas)
		}
		return nil
	case "bls":
		select {
		case p.blsBusy <- struct{}{}:
			ctx := p.life
			if m.Decoupled { // its cancel() may be the very next message: registered before that is read
				var stop func()
				ctx, stop = withCancelRequest(p.life)
				p.mu.Lock()
				p.blsStop[m.ID] = stop
				p.mu.Unlock()
			}
			go func() {
				defer func() { <-p.blsBusy }()
				p.bls(ctx, m, datas)
			}()
		default:
			go p.refuseBLS(m.ID, fmt.Errorf("this instance has %d BLS calls in flight, the most fw runs at once; wait for some to answer", maxBLS))
		}
		return nil
	case "repo":
		select {
		case p.blsBusy <- struct{}{}:
			go func() {
				defer func() { <-p.blsBusy }()
				p.repository(m)
			}()
		default:
			go p.refuseBLS(m.ID, fmt.Errorf("this instance has %d calls in flight, the most fw runs at once; wait for some to answer", maxBLS))
		}
		return nil
	case "bls_cancel": // the model's response iterator's cancel(); ignored once the call ended
		p.mu.Lock()
		stop := p.blsStop[m.ID]
		p.mu.Unlock()
		if stop != nil {
			stop()
		}
		return nil
	case "metric_family", "metric":
		p.metric(m)
		return nil
	}
	return fmt.Errorf("an unknown message %q", m.Op)
}

// cancelRequests tells the process that the requests with these ids are
// cancelled: their is_cancelled() turns true. A process that no longer
// reads is left to the caller's kill.
func (p *proc) cancelRequests(ids []uint64) {
	_ = p.send(cancelMessage{Op: "cancel", Reqs: ids}, nil)
}

// cancelMessage tells the process which requests were cancelled.
type cancelMessage struct {
	Op   string   `json:"op"`
	Reqs []uint64 `json:"reqs"`
}

// exited reports whether the process has ended.
func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// dead reports whether the process has ended or its channel has.
func (p *proc) dead() bool {
	if p.exited() {
		return true
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.ended != nil
}

// kill ends the process (and any it started) now; once it has been
// reaped its group id may belong to another, so it is left alone.
func (p *proc) kill() {
	if !p.exited() {
		killGroup(p.cmd)
	}
	_ = p.w.Close()
	p.cancel()
}

// died describes the process's end for an error: its exit and last lines
// (waiting a moment for it to exit).
func (p *proc) died(what string, err error) error {
	select {
	case <-p.done:
	case <-time.After(2 * time.Second):
	}
	return p.diedNow(what, err)
}

// diedNow is died without waiting.
func (p *proc) diedNow(what string, err error) error {
	p.mu.Lock()
	tail := strings.Join(p.tail, "\n")
	p.mu.Unlock()
	if err == nil || errors.Is(err, io.EOF) {
		err = errors.New("its output ended")
	}
	msg := fmt.Sprintf("the model's Python process %s: %v", what, err)
	if p.exited() && p.werr != nil {
		msg += " (" + p.werr.Error() + ")"
	}
	if tail != "" {
		msg += "; it printed last:\n" + tail
	}
	return errors.New(msg)
}

// wireTensor is a tensor's description in a message's header.
type wireTensor struct {
	Name     string  `json:"name"`
	Datatype string  `json:"datatype"`
	Shape    []int64 `json:"shape"`
	Size     int64   `json:"size"`
}

// message is a header from the process (its tensors' bytes follow it).
type message struct {
	Op        string            `json:"op"`
	Tensors   []wireTensor      `json:"tensors,omitempty"`
	Message   string            `json:"message,omitempty"`
	Code      int               `json:"code,omitempty"`
	Model     string            `json:"model,omitempty"`
	Version   string            `json:"version,omitempty"`
	Outputs   []string          `json:"outputs,omitempty"`
	Error     *wireError        `json:"error,omitempty"`
	Responses []wireResponse    `json:"responses,omitempty"`
	Config    json.RawMessage   `json:"config,omitempty"`       // auto_complete_config's answer
	ID        uint64            `json:"id,omitempty"`           // a BLS call's, echoed in its answer
	Call      uint64            `json:"call,omitempty"`         // the execute call a result answers
	Req       uint64            `json:"req,omitempty"`          // the decoupled request a response is for
	Final     bool              `json:"final,omitempty"`        // the request's last response
	Response  bool              `json:"response,omitempty"`     // a send that carries outputs
	Decoupled bool              `json:"decoupled,omitempty"`    // a BLS call to a decoupled model
	Buckets   []float64         `json:"buckets,omitempty"`      // a metric family's histogram buckets
	Labels    map[string]string `json:"labels,omitempty"`       // a metric's labels
	Action    string            `json:"action,omitempty"`       // what a metric message does
	Value     float64           `json:"value,omitempty"`        // its value
	Params    string            `json:"parameters,omitempty"`   // a BLS request's parameters, a JSON object
	RequestID string            `json:"request_id,omitempty"`   // a BLS request's ID
	HasReady  bool              `json:"has_is_ready,omitempty"` // the model defines is_ready() ("ready")
	Depends   bool              `json:"dependents,omitempty"`   // unload_model's unload_dependents ("repo")
	Raised    bool              `json:"raised,omitempty"`       // a "send" error that is execute's exception
	Ready     bool              `json:"ready,omitempty"`        // is_ready()'s answer ("ready_result")
}

// wireError is an error a model answered: its message and TritonError code.
type wireError struct {
	Message string `json:"message"`
	Code    int    `json:"code"`
}

// wireResponse is one response of an execute result: how many of the
// result's tensors are its outputs, or its error.
type wireResponse struct {
	Outputs int        `json:"outputs"`
	Error   *wireError `json:"error,omitempty"`
	// Raised marks an error that is execute's exception (the call answered
	// other requests before it raised), not an error response.
	Raised bool `json:"raised,omitempty"`
	// Parameters are the response's parameters (a JSON object of strings,
	// integers and booleans), when the model gave any.
	Parameters string `json:"parameters,omitempty"`
}

// send writes one message: head (JSON), then the data of each tensor.
func (p *proc) send(head any, datas [][]byte) error {
	h, err := json.Marshal(head)
	if err != nil {
		return err
	}
	var n [4]byte
	binary.LittleEndian.PutUint32(n[:], uint32(len(h)))
	p.wmu.Lock()
	defer p.wmu.Unlock()
	for _, b := range append([][]byte{n[:], h}, datas...) {
		if _, err := p.w.Write(b); err != nil {
			return err
		}
	}
	return nil
}

// recv reads one message, its tensors bounded by maxBytes in all.
func (p *proc) recv(maxBytes int64) (*message, [][]byte, error) {
	var n [4]byte
	if _, err := io.ReadFull(p.r, n[:]); err != nil {
		return nil, nil, err
	}
	size := binary.LittleEndian.Uint32(n[:])
	if size > maxHeader {
		return nil, nil, fmt.Errorf("a message header of %d bytes (at most %d)", size, maxHeader)
	}
	h := make([]byte, size)
	if _, err := io.ReadFull(p.r, h); err != nil {
		return nil, nil, err
	}
	var m message
	if err := json.Unmarshal(h, &m); err != nil {
		return nil, nil, fmt.Errorf("a message header that is not JSON: %w", err)
	}
	var total int64
	for _, t := range m.Tensors {
		if t.Size < 0 || t.Size > maxBytes-total {
			return nil, nil, fmt.Errorf("tensors of more than %d bytes in one message", maxBytes)
		}
		total += t.Size
	}
	datas := make([][]byte, len(m.Tensors))
	for i, t := range m.Tensors {
		datas[i] = make([]byte, t.Size)
		if _, err := io.ReadFull(p.r, datas[i]); err != nil {
			return nil, nil, err
		}
	}
	return &m, datas, nil
}

// control sends a control message and waits for its answer; ctx ending
// first kills the process.
func (p *proc) control(ctx context.Context, head any, what string) (*message, error) {
	defer context.AfterFunc(ctx, p.kill)()
	if err := p.send(head, nil); err != nil {
		return nil, p.died("did not start", err)
	}
	var r reply
	select {
	case r = <-p.ctrl:
	case <-p.done:
	}
	switch {
	case ctx.Err() != nil:
		return nil, fmt.Errorf("%s did not finish: %w", what, ctx.Err())
	case r.m == nil:
		p.mu.Lock()
		err := p.ended
		p.mu.Unlock()
		return nil, p.died("exited in "+what, err)
	}
	return r.m, nil
}

// initialize sends the model's file and args and waits for initialize.
func (p *proc) initialize(ctx context.Context, args map[string]string) error {
	m, err := p.control(ctx, map[string]any{"op": "init", "file": p.cfg.File, "dir": p.cfg.Dir, "args": args, "decoupled": p.cfg.Decoupled, "iterative": p.cfg.Iterative}, "initialize")
	switch {
	case err != nil:
		return err
	case m.Op == "error":
		return fmt.Errorf("initialize: %s", m.Message)
	case m.Op != "ready":
		return p.died("broke the protocol", fmt.Errorf("answered %q to init", m.Op))
	}
	p.mu.Lock()
	p.initialized, p.hasIsReady = true, m.HasReady
	p.mu.Unlock()
	return nil
}

// isReady runs the model's is_ready() (in a thread of the process's own,
// beside execute) and returns its answer: nil for True.
func (p *proc) isReady() error {
	ch := make(chan reply, 1)
	p.mu.Lock()
	if p.ended != nil || p.exited() {
		p.mu.Unlock()
		return notHealthy(p.instance)
	}
	p.nextID++
	id := p.nextID
	p.calls[id] = ch
	p.mu.Unlock()
	if err := p.send(map[string]any{"op": "is_ready", "call": id}, nil); err != nil {
		p.kill()
		return notHealthy(p.instance)
	}
	r := <-ch // the reader answers every call, if only with its end
	switch {
	case r.m == nil:
		return notHealthy(p.instance)
	case r.m.Error != nil:
		return fmt.Errorf("its is_ready() failed: %s", r.m.Error.Message)
	case !r.m.Ready:
		return fmt.Errorf("its is_ready() returned False (instance %s)", p.instance)
	}
	return nil
}

// notHealthy is the readiness error of an instance whose process is not
// running, in Triton's words.
type notHealthy string

func (n notHealthy) Error() string {
	return fmt.Sprintf("Stub process '%s' is not healthy. fw starts it again: ready once it has started", string(n))
}

// wireRequest is one request of an execute call.
type wireRequest struct {
	Inputs  []wireTensor `json:"inputs"`
	Outputs []string     `json:"outputs"`
	// Corr is its correlation ID in a sequence (a number, or a string),
	// Flags Triton's sequence flags (1 START, 2 END).
	Corr  any    `json:"corr,omitempty"`
	Flags int    `json:"flags,omitempty"`
	Req   uint64 `json:"req,omitempty"` // the request's id: a cancel names it, a decoupled one's responses carry it
	// RequestID and Parameters are what the request says of itself
	// (engine.RequestInfo): request.request_id() and request.parameters().
	RequestID  string `json:"request_id,omitempty"`
	Parameters string `json:"parameters,omitempty"`
}

// call runs one execute of reqs and returns the result message. A request
// whose context (ctxs[i]) carries engine.Responses is decoupled: it is
// registered as a stream under its id, and its responses go there until
// the final one. ctx ending first tells the model its requests are
// cancelled (request.is_cancelled()) and kills the process when execute
// has not returned cancelGrace later: Python cannot be interrupted
// mid-execute. A request's own context ending, or a soft cancellation of
// it (a BLS caller's cancel()), only tells the model about that request.
func (p *proc) call(ctx context.Context, ctxs []context.Context, reqs [][]engine.Tensor) (reply, error) {
	all := []wireTensor{} // [] even when every input was left out
	var datas [][]byte
	wire := make([]wireRequest, len(reqs))
	for i, inputs := range reqs {
		descs := make([]wireTensor, 0, len(inputs))
		for j, t := range inputs {
			if t.Absent() { // an optional input left out: get_input_tensor_by_name answers None
				continue
			}
			descs = append(descs, wireTensor{Name: p.cfg.Inputs[j].Name, Datatype: datatypes[t.DType], Shape: t.Shape, Size: int64(len(t.Data))})
			datas = append(datas, t.Data)
		}
		all = append(all, descs...)
		wire[i] = wireRequest{Inputs: descs, Outputs: p.outNames}
		if i < len(ctxs) {
			if ri, ok := engine.RequestInfoOf(ctxs[i]); ok {
				wire[i].RequestID, wire[i].Parameters = ri.ID, ri.Parameters
			}
			if c, ok := engine.CorrelationOf(ctxs[i]); ok {
				wire[i].Corr = c.ID
				if c.IDString != "" {
					wire[i].Corr = c.IDString
				}
				if c.Start {
					wire[i].Flags |= 1
				}
				if c.End {
					wire[i].Flags |= 2
				}
			}
		}
	}
	ch := make(chan reply, 1)
	p.mu.Lock()
	if p.ended != nil || p.exited() {
		err := p.ended
		p.mu.Unlock()
		return reply{}, p.died("had ended", err)
	}
	p.nextID++
	id := p.nextID
	p.calls[id] = ch
	ids := make([]uint64, len(wire))
	streams := make([]*stream, len(wire))
	for i := range wire {
		p.nextID++
		wire[i].Req, ids[i] = p.nextID, p.nextID
		if i < len(ctxs) {
			if q := engine.ResponsesOf(ctxs[i]); q != nil {
				streams[i] = &stream{id: p.nextID, q: q}
				p.streams[p.nextID] = streams[i]
			}
		}
	}
	p.mu.Unlock()
	// The call's context ending (the batcher's: the server stops) kills
	// the process cancelGrace later unless execute has returned; the
	// timer starts before the send, which it also ends when the process
	// no longer reads. Cancellations are sent only after execute is, so
	// the process knows the requests they name.
	done, sent := make(chan struct{}), make(chan struct{})
	defer close(done)
	defer context.AfterFunc(ctx, func() {
		kill := time.AfterFunc(cancelGrace, p.kill)
		select {
		case <-sent:
			p.cancelRequests(ids)
		case <-done:
		}
		select {
		case <-done:
			kill.Stop()
		case <-p.done:
		}
	})()
	head := map[string]any{"op": "execute", "call": id, "tensors": all, "requests": wire, "instance": p.instance}
	err := p.send(head, datas)
	close(sent)
	if err != nil {
		p.kill()
		return reply{}, p.broken(ctx, "stopped reading", err)
	}
	for i := range ctxs {
		if ctxs[i] == ctx && streams[i] == nil {
			continue // the call's own context, watched above
		}
		stop := p.watch(ctxs[i], ids[i], streams[i])
		if st := streams[i]; st != nil {
			// A decoupled request is watched until its last response. An
			// end that did not come from the model (its client fell too far
			// behind, execute raised) also tells the model and stops
			// routing its responses.
			st.q.OnEnd(func() {
				stop()
				p.mu.Lock()
				_, open := p.streams[st.id]
				p.mu.Unlock()
				if open {
					p.forget(st)
					go p.cancelRequests([]uint64{st.id}) // this may run on the reader, which must not wait for a write
				}
			})
		} else {
			defer stop()
		}
	}
	r := <-ch // the reader answers every call, if only with its end
	if r.m == nil {
		p.mu.Lock()
		ended := p.ended
		p.mu.Unlock()
		err := p.broken(ctx, "ended during execute", ended)
		for _, st := range streams { // ended with the call's error, before the caller hears it
			if st != nil {
				st.fail(err)
			}
		}
		return reply{}, err
	}
	if r.m.Error != nil { // execute raised: after what they were sent, it ends the decoupled requests
		for _, st := range streams {
			if st != nil {
				st.fail(modelError(p.cfg.Name, r.m.Error))
			}
		}
	}
	return r, nil
}

// watch tells the process when the request with this id is cancelled:
// its context ends (a decoupled request's stream is then forgotten) or a
// soft cancellation is asked. stop ends the watch.
func (p *proc) watch(rctx context.Context, id uint64, st *stream) (stop func()) {
	stopHard := context.AfterFunc(rctx, func() {
		p.cancelRequests([]uint64{id})
		if st != nil {
			p.forget(st)
		}
	})
	soft := cancelRequested(rctx)
	if soft == nil {
		return func() { stopHard() }
	}
	end := make(chan struct{})
	go func() {
		select {
		case <-soft:
			p.cancelRequests([]uint64{id})
		case <-end:
		case <-rctx.Done(): // told by stopHard; the request may never end otherwise
		}
	}()
	var once sync.Once
	return func() { stopHard(); once.Do(func() { close(end) }) }
}

// execute runs the requests in one execute call and returns each
// response's outputs in cfg.Outputs' order, checked against them, or the
// error the model answered for it; a decoupled request (its context
// carries engine.Responses) gets nil for both, its answers going there.
// err is a failure of the whole call.
func (p *proc) execute(ctx context.Context, ctxs []context.Context, reqs [][]engine.Tensor) ([][]engine.Tensor, []error, error) {
	r, err := p.call(ctx, ctxs, reqs)
	if err != nil {
		return nil, nil, err
	}
	m := r.m
	if p.cfg.Decoupled {
		if m.Error != nil { // the requests were ended with it (call)
			return nil, nil, modelError(p.cfg.Name, m.Error)
		}
		return make([][]engine.Tensor, len(reqs)), make([]error, len(reqs)), nil
	}
	if m.Error != nil {
		return nil, nil, modelError(p.cfg.Name, m.Error)
	}
	if len(m.Responses) != len(reqs) {
		p.kill()
		return nil, nil, p.died("broke the protocol", fmt.Errorf("%d responses to %d requests", len(m.Responses), len(reqs)))
	}
	outs := make([][]engine.Tensor, len(reqs))
	errs := make([]error, len(reqs))
	next := 0
	for i, resp := range m.Responses {
		if resp.Error != nil {
			errs[i] = answeredError(p.cfg.Name, resp.Error)
			if resp.Raised {
				errs[i] = modelError(p.cfg.Name, resp.Error)
			}
			continue
		}
		if resp.Outputs < 0 || resp.Outputs > len(m.Tensors)-next {
			p.kill()
			return nil, nil, p.died("broke the protocol", fmt.Errorf("response %d claims %d outputs", i, resp.Outputs))
		}
		outs[i], errs[i] = outputs(p.cfg, m.Tensors[next:next+resp.Outputs], r.datas[next:next+resp.Outputs])
		next += resp.Outputs
		if resp.Parameters != "" && errs[i] == nil && i < len(ctxs) {
			if s := engine.ResponseSinkOf(ctxs[i]); s != nil {
				s.SetParameters(resp.Parameters)
			}
		}
	}
	return outs, errs, nil
}

// broken is the error of a call whose channel failed: ctx's when the call
// was given up (the process was killed for it), else the process's end.
func (p *proc) broken(ctx context.Context, what string, err error) error {
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return p.died(what, err)
}

// modelError is the error of an exception from the model's execute, an
// *engine.InputError when it said the request was invalid
// (TritonError.INVALID_ARG).
func modelError(name string, e *wireError) error {
	if e.Code == codeInvalidArg {
		return &engine.InputError{Msg: e.Message}
	}
	return &ModelError{Model: name, Msg: e.Message, Code: e.Code, Raised: true}
}

// answeredError is modelError for an error response the model gave a
// request (InferenceResponse(error=...)): its clients get its message
// unchanged, with the status its code maps to, as Triton's do.
func answeredError(name string, e *wireError) error {
	err := modelError(name, e)
	if me, ok := err.(*ModelError); ok {
		me.Answered, me.Raised = true, false
	}
	return err
}

// TritonError's codes that fw tells apart.
const (
	codeInternal    = 1
	codeInvalidArg  = 3
	codeUnavailable = 4
	codeCancelled   = 7
)

// errorCode is the TritonError code a BLS caller sees for err: the
// model's own code, INVALID_ARG for a request the model refused,
// CANCELLED for a call given up, else INTERNAL.
func errorCode(err error) int {
	var me *ModelError
	switch {
	case errors.As(err, &me) && me.Code != 0:
		return me.Code
	case errors.As(err, new(*engine.InputError)):
		return codeInvalidArg
	case errors.Is(err, context.Canceled):
		return codeCancelled
	}
	return codeInternal
}

// outputs checks a response's tensors against the configuration: each a
// declared output, once, well formed; one left out is the zero Tensor. They
// come back in the configuration's order. An output's datatype is its
// array's, as Triton's Python backend sends it, even where config.pbtxt
// declares another.
func outputs(cfg Config, descs []wireTensor, datas [][]byte) ([]engine.Tensor, error) {
	out := make([]engine.Tensor, len(cfg.Outputs))
	seen := make([]bool, len(cfg.Outputs))
	for i, d := range descs {
		j := engine.SpecIndex(cfg.Outputs, d.Name)
		if j < 0 {
			return nil, &ModelError{Model: cfg.Name, Msg: fmt.Sprintf("its response has an output %q that config.pbtxt does not list", d.Name)}
		}
		if seen[j] {
			return nil, &ModelError{Model: cfg.Name, Msg: fmt.Sprintf("its response has output %q twice", d.Name)}
		}
		seen[j] = true
		dt, ok := dtypeOf(d.Datatype)
		if !ok {
			return nil, &ModelError{Model: cfg.Name, Msg: fmt.Sprintf("output %q has datatype %q", d.Name, d.Datatype)}
		}
		if len(d.Shape) > 16 {
			return nil, &ModelError{Model: cfg.Name, Msg: fmt.Sprintf("output %q has %d dims", d.Name, len(d.Shape))}
		}
		t := engine.Tensor{DType: dt, Shape: d.Shape, Data: datas[i]}
		if err := t.Check(); err != nil {
			return nil, &ModelError{Model: cfg.Name, Msg: fmt.Sprintf("output %q: %v", d.Name, err)}
		}
		out[j] = t
	}
	return out, nil // an output the response left out stays the zero Tensor (Absent), as Triton leaves it out
}

// metric applies a custom metric message ("metric_family": Model is the
// name, Message the description, Code the kind; "metric": Model is the
// family). A mistake is logged: the model keeps serving.
func (p *proc) metric(m *message) {
	if p.cfg.Metrics == nil {
		return
	}
	var err error
	if m.Op == "metric_family" {
		err = p.cfg.Metrics.Family(m.Model, m.Message, m.Code, m.Buckets)
	} else {
		err = p.cfg.Metrics.Update(m.Model, m.Labels, m.Action, m.Value)
	}
	if err != nil {
		p.cfg.Log.Warn("a Python model's custom metric", "model", p.cfg.Name, "err", err)
	}
}

// forget stops routing the responses of st (its request ended or its
// client went away); later ones are dropped.
func (p *proc) forget(st *stream) {
	p.mu.Lock()
	delete(p.streams, st.id)
	p.mu.Unlock()
}

// refuseBLS answers BLS call id with err.
func (p *proc) refuseBLS(id uint64, err error) {
	if p.send(map[string]any{"op": "bls_result", "id": id, "error": err.Error(), "code": codeUnavailable, "final": true}, nil) != nil {
		p.kill()
	}
}

// bls runs a model the Python model asked for and sends the answer back
// (each response of a decoupled one, "final" on the last), under the
// process's life (its calls end when it does).
func (p *proc) bls(ctx context.Context, m *message, datas [][]byte) {
	if m.Decoupled {
		defer func() { // dispatch registered its cancel()
			p.mu.Lock()
			delete(p.blsStop, m.ID)
			p.mu.Unlock()
		}()
	}
	answer := func(head map[string]any, datas [][]byte) error {
		head["op"], head["id"] = "bls_result", m.ID
		if err := p.send(head, datas); err != nil {
			p.kill() // it no longer reads: the next call gets a fresh one
			return err
		}
		return nil
	}
	fail := func(err error) {
		_ = answer(map[string]any{"error": err.Error(), "code": errorCode(err), "final": true}, nil)
	}
	if p.cfg.Call == nil || (m.Decoupled && p.cfg.StreamCall == nil) {
		fail(errors.New("this server runs no other models for a Python model"))
		return
	}
	info, err := blsRequestInfo(m)
	if err != nil {
		fail(err)
		return
	}
	ctx = engine.WithRequestInfo(ctx, info)
	ins := make(map[string]engine.Tensor, len(m.Tensors))
	for i, d := range m.Tensors {
		dt, ok := dtypeOf(d.Datatype)
		if !ok {
			fail(fmt.Errorf("input %q: datatype %q", d.Name, d.Datatype))
			return
		}
		if len(d.Shape) > 16 {
			fail(fmt.Errorf("input %q has %d dims", d.Name, len(d.Shape)))
			return
		}
		t := engine.Tensor{DType: dt, Shape: d.Shape, Data: datas[i]}
		if err := t.Check(); err != nil {
			fail(fmt.Errorf("input %q: %w", d.Name, err))
			return
		}
		ins[d.Name] = t
	}
	encode := func(outs map[string]engine.Tensor, final bool) (map[string]any, [][]byte, error) {
		descs := make([]wireTensor, 0, len(outs))
		odatas := make([][]byte, 0, len(outs))
		for name, t := range outs {
			dt, ok := datatypes[t.DType]
			if !ok {
				return nil, nil, fmt.Errorf("output %q of model %q is %s, which a Python model cannot take", name, m.Model, t.DType)
			}
			descs = append(descs, wireTensor{Name: name, Datatype: dt, Shape: t.Shape, Size: int64(len(t.Data))})
			odatas = append(odatas, t.Data)
		}
		return map[string]any{"tensors": descs, "final": final}, odatas, nil
	}
	if m.Decoupled {
		finished := false
		ctx, sink := engine.WithResponseSink(ctx) // each response's parameters, for response.parameters()
		err := p.cfg.StreamCall(ctx, m.Model, m.Version, ins, m.Outputs, func(outs map[string]engine.Tensor, err error, final bool) error {
			finished = final
			if err != nil {
				return answer(map[string]any{"error": err.Error(), "code": errorCode(err), "final": final}, nil)
			}
			head, odatas, err := encode(outs, final)
			if err != nil {
				return answer(map[string]any{"error": err.Error(), "final": final}, nil)
			}
			if js := sink.Parameters(); js != "" {
				head["parameters"] = js
			}
			return answer(head, odatas)
		})
		if err != nil && !finished {
			fail(err)
		}
		return
	}
	ctx, sink := engine.WithResponseSink(ctx) // the called model's response parameters, for response.parameters()
	outs, err := p.cfg.Call(ctx, m.Model, m.Version, ins, m.Outputs)
	if err != nil {
		fail(err)
		return
	}
	head, odatas, err := encode(outs, true)
	if js := sink.Parameters(); err == nil && js != "" {
		head["parameters"] = js
	}
	if err != nil {
		fail(err)
		return
	}
	_ = answer(head, odatas)
}

// repository answers the model's pb_utils.load_model, unload_model or
// is_model_ready (m.Action) as a BLS call is answered, under the process's
// life.
func (p *proc) repository(m *message) {
	answer := map[string]any{"op": "bls_result", "id": m.ID, "final": true}
	var err error
	switch repo := p.cfg.Repository; {
	case repo == nil:
		err = errors.New("this server runs no model repository for a Python model to load models from")
	case m.Action == "load":
		var config string
		if len(m.Config) > 0 {
			if err = json.Unmarshal(m.Config, &config); err != nil {
				err = fmt.Errorf("load_model's config must be a string of JSON: %w", err)
				break
			}
		}
		err = repo.Load(p.life, m.Model, []byte(config))
	case m.Action == "unload":
		err = repo.Unload(p.life, m.Model, m.Depends)
	case m.Action == "ready":
		var ready bool
		ready, err = repo.Ready(m.Model, m.Version)
		answer["ready"] = ready
	default:
		err = fmt.Errorf("an unknown repository action %q", m.Action)
	}
	if err != nil {
		answer["error"] = err.Error()
	}
	if p.send(answer, nil) != nil {
		p.kill()
	}
}

// blsRequestInfo is the ID and parameters a BLS request gives the model it
// calls: its own, never those of the request its caller is serving.
func blsRequestInfo(m *message) (engine.RequestInfo, error) {
	info := engine.RequestInfo{ID: m.RequestID}
	var params map[string]json.RawMessage
	if m.Params != "" {
		if err := json.Unmarshal([]byte(m.Params), &params); err != nil {
			return info, fmt.Errorf("the request's parameters must be a JSON object of strings, numbers and booleans: %w", err)
		}
	}
	for k, v := range params {
		if c := v[0]; c == '{' || c == '[' || c == 'n' { // objects, arrays and null: Triton's stub refuses them too
			return info, fmt.Errorf("the request's parameter %q is %s: parameters are strings, numbers and booleans", k, v)
		}
	}
	if len(params) > 0 {
		info.Parameters = m.Params
	}
	return info, nil
}

// finalize asks the process to run finalize and exit, and kills it when
// it does not in time.
func (p *proc) finalize() {
	if !p.exited() && p.send(map[string]string{"op": "finalize"}, nil) == nil {
		select {
		case <-p.done:
			return
		case <-p.ctrl: // "done": it exits now
			select {
			case <-p.done:
				return
			case <-time.After(finalizeWait):
			}
		case <-time.After(finalizeWait):
		}
	}
	p.kill()
	<-p.done
}
