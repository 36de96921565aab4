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

// tailLines is how many of the process's last lines an error quotes.
const tailLines = 8

// proc is one running instance: the Python process and its channel.
type proc struct {
	cmd  *exec.Cmd
	w    io.WriteCloser
	r    *bufio.Reader
	done chan struct{} // closed once the process has exited
	werr error         // its exit status, set before done closes

	mu   sync.Mutex
	tail []string // its last lines on standard error
}

// spawn starts the stub for instance i of cfg.
func spawn(cfg Config, i int) (*proc, error) {
	cmd := exec.Command(cfg.Python, "-u", "-c", stubSource)
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
	p := &proc{cmd: cmd, w: w, r: bufio.NewReaderSize(r, 64<<10), done: make(chan struct{})}
	logged := make(chan struct{})
	go func() {
		defer close(logged)
		p.logLines(e, cfg, i)
	}()
	go func() {
		<-logged // Wait closes the pipes: read them to the end first
		p.werr = cmd.Wait()
		close(p.done)
	}()
	return p, nil
}

// logLines logs what the process writes to standard error, a line at a
// time (long lines cut), keeping the last few for errors.
func (p *proc) logLines(rd io.Reader, cfg Config, i int) {
	br := bufio.NewReaderSize(rd, 16<<10)
	for {
		line, err := br.ReadSlice('\n')
		if len(line) > 0 {
			s := strings.TrimRight(string(line), "\r\n")
			cfg.Log.Info("python model", "model", cfg.Name, "version", cfg.Version, "instance", i, "line", s)
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

// exited reports whether the process has ended.
func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// kill ends the process (and any it started) now.
func (p *proc) kill() {
	killGroup(p.cmd)
	_ = p.w.Close()
}

// died describes the process's end for an error: its exit and last lines.
func (p *proc) died(what string, err error) error {
	select {
	case <-p.done:
	case <-time.After(2 * time.Second):
	}
	p.mu.Lock()
	tail := strings.Join(p.tail, "\n")
	p.mu.Unlock()
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

// message is a header with its tensors' bytes.
type message struct {
	Op        string          `json:"op"`
	Tensors   []wireTensor    `json:"tensors,omitempty"`
	Message   string          `json:"message,omitempty"`
	Code      int             `json:"code,omitempty"`
	Model     string          `json:"model,omitempty"`
	Version   string          `json:"version,omitempty"`
	Outputs   []string        `json:"outputs,omitempty"`
	Error     *wireError      `json:"error,omitempty"`
	Responses []wireResponse  `json:"responses,omitempty"`
	Config    json.RawMessage `json:"config,omitempty"` // auto_complete_config's answer
}

type wireError struct {
	Message string `json:"message"`
	Code    int    `json:"code"`
}

type wireResponse struct {
	Outputs int        `json:"outputs"`
	Error   *wireError `json:"error,omitempty"`
}

// send writes one message: head (JSON), then the data of each tensor.
func (p *proc) send(head any, datas [][]byte) error {
	h, err := json.Marshal(head)
	if err != nil {
		return err
	}
	var n [4]byte
	binary.LittleEndian.PutUint32(n[:], uint32(len(h)))
	bufs := append([][]byte{n[:], h}, datas...)
	for _, b := range bufs {
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
			return nil, nil, fmt.Errorf("tensors of more than %d bytes in one answer", maxBytes)
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

// watch kills the process when ctx ends before stop is called: a call the
// caller stopped waiting for leaves no process running it.
func (p *proc) watch(ctx context.Context) (stop func() bool) {
	return context.AfterFunc(ctx, p.kill)
}

// initialize sends the model's file and args and waits for initialize.
func (p *proc) initialize(ctx context.Context, cfg Config, args map[string]string) error {
	defer p.watch(ctx)()
	err := p.send(map[string]any{"op": "init", "file": cfg.File, "dir": cfg.Dir, "args": args}, nil)
	if err != nil {
		return p.died("did not start", err)
	}
	m, _, err := p.recv(0)
	switch {
	case err != nil && ctx.Err() != nil:
		return fmt.Errorf("initialize did not finish: %w", ctx.Err())
	case err != nil:
		return p.died("exited while loading the model", err)
	case m.Op == "error":
		return fmt.Errorf("%s", m.Message)
	case m.Op != "ready":
		return p.died("broke the protocol", fmt.Errorf("answered %q to init", m.Op))
	}
	return nil
}

// execute runs the requests in one execute call and returns each
// response's outputs in cfg.Outputs' order, checked against them, or the
// error the model answered for it. err is a failure of the whole call.
func (p *proc) execute(ctx context.Context, cfg Config, reqs [][]engine.Tensor) ([][]engine.Tensor, []error, error) {
	defer p.watch(ctx)()
	type wireRequest struct {
		Inputs  []wireTensor `json:"inputs"`
		Outputs []string     `json:"outputs"`
	}
	names := make([]string, len(cfg.Outputs))
	for i, o := range cfg.Outputs {
		names[i] = o.Name
	}
	var all []wireTensor
	var datas [][]byte
	wire := make([]wireRequest, len(reqs))
	for i, inputs := range reqs {
		descs := make([]wireTensor, len(inputs))
		for j, t := range inputs {
			descs[j] = wireTensor{Name: cfg.Inputs[j].Name, Datatype: datatypes[t.DType], Shape: t.Shape, Size: int64(len(t.Data))}
			datas = append(datas, t.Data)
		}
		all = append(all, descs...)
		wire[i] = wireRequest{Inputs: descs, Outputs: names}
	}
	if err := p.send(map[string]any{"op": "execute", "tensors": all, "requests": wire}, datas); err != nil {
		return nil, nil, p.broken(ctx, "stopped reading", err)
	}
	for {
		m, got, err := p.recv(cfg.MaxBytes)
		if err != nil {
			return nil, nil, p.broken(ctx, "ended during execute", err)
		}
		switch m.Op {
		case "bls":
			if err := p.bls(ctx, cfg, m, got); err != nil {
				return nil, nil, p.broken(ctx, "stopped reading", err)
			}
			continue
		case "result":
		default:
			return nil, nil, p.broken(ctx, "broke the protocol", fmt.Errorf("answered %q to execute", m.Op))
		}
		if m.Error != nil {
			return nil, nil, modelError(cfg.Name, m.Error)
		}
		if len(m.Responses) != len(reqs) {
			return nil, nil, p.broken(ctx, "broke the protocol", fmt.Errorf("%d responses to %d requests", len(m.Responses), len(reqs)))
		}
		outs := make([][]engine.Tensor, len(reqs))
		errs := make([]error, len(reqs))
		next := 0
		for i, r := range m.Responses {
			if r.Error != nil {
				errs[i] = modelError(cfg.Name, r.Error)
				continue
			}
			if r.Outputs < 0 || r.Outputs > len(m.Tensors)-next {
				return nil, nil, p.broken(ctx, "broke the protocol", fmt.Errorf("response %d claims %d outputs", i, r.Outputs))
			}
			outs[i], errs[i] = outputs(cfg, m.Tensors[next:next+r.Outputs], got[next:next+r.Outputs])
			next += r.Outputs
		}
		return outs, errs, nil
	}
}

// broken is the error of a call whose channel failed: ctx's when the call
// was given up (the process was killed for it), else the process's end.
func (p *proc) broken(ctx context.Context, what string, err error) error {
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return p.died(what, err)
}

// modelError is the error a model answered, an *engine.InputError when
// it said the request was invalid (TritonError.INVALID_ARG).
func modelError(name string, e *wireError) error {
	const invalidArg = 3
	if e.Code == invalidArg {
		return &engine.InputError{Msg: e.Message}
	}
	return &ModelError{Model: name, Msg: e.Message}
}

// outputs checks a response's tensors against the configuration: each a
// declared output, once, of its datatype and well formed; every declared
// output present. They come back in the configuration's order.
func outputs(cfg Config, descs []wireTensor, datas [][]byte) ([]engine.Tensor, error) {
	out := make([]engine.Tensor, len(cfg.Outputs))
	seen := make([]bool, len(cfg.Outputs))
	for i, d := range descs {
		j := specIndex(cfg.Outputs, d.Name)
		if j < 0 {
			return nil, &ModelError{Model: cfg.Name, Msg: fmt.Sprintf("its response has an output %q that config.pbtxt does not list", d.Name)}
		}
		if seen[j] {
			return nil, &ModelError{Model: cfg.Name, Msg: fmt.Sprintf("its response has output %q twice", d.Name)}
		}
		seen[j] = true
		dt, ok := dtypeOf(d.Datatype)
		if !ok || dt != cfg.Outputs[j].DType {
			return nil, &ModelError{Model: cfg.Name, Msg: fmt.Sprintf("output %q is %s, config.pbtxt says %s; convert it (array.astype) before making the Tensor", d.Name, d.Datatype, datatypes[cfg.Outputs[j].DType])}
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
	for j, ok := range seen {
		if !ok {
			return nil, &ModelError{Model: cfg.Name, Msg: fmt.Sprintf("its response has no output %q; fw answers every output config.pbtxt lists, so the response must carry each", cfg.Outputs[j].Name)}
		}
	}
	return out, nil
}

// bls runs a model the Python model asked for and sends the answer back.
func (p *proc) bls(ctx context.Context, cfg Config, m *message, datas [][]byte) error {
	answer := func(err error) error { return p.send(map[string]any{"op": "bls_result", "error": err.Error()}, nil) }
	if cfg.Call == nil {
		return answer(errors.New("this server runs no other models for a Python model"))
	}
	ins := make(map[string]engine.Tensor, len(m.Tensors))
	for i, d := range m.Tensors {
		dt, ok := dtypeOf(d.Datatype)
		if !ok {
			return answer(fmt.Errorf("input %q: datatype %q", d.Name, d.Datatype))
		}
		t := engine.Tensor{DType: dt, Shape: d.Shape, Data: datas[i]}
		if len(d.Shape) > 16 {
			return answer(fmt.Errorf("input %q has %d dims", d.Name, len(d.Shape)))
		}
		if err := t.Check(); err != nil {
			return answer(fmt.Errorf("input %q: %w", d.Name, err))
		}
		ins[d.Name] = t
	}
	outs, err := cfg.Call(ctx, m.Model, m.Version, ins, m.Outputs)
	if err != nil {
		return answer(err)
	}
	descs := make([]wireTensor, 0, len(outs))
	odatas := make([][]byte, 0, len(outs))
	for name, t := range outs {
		dt, ok := datatypes[t.DType]
		if !ok {
			return answer(fmt.Errorf("output %q of model %q is %s, which a Python model cannot take", name, m.Model, t.DType))
		}
		descs = append(descs, wireTensor{Name: name, Datatype: dt, Shape: t.Shape, Size: int64(len(t.Data))})
		odatas = append(odatas, t.Data)
	}
	return p.send(map[string]any{"op": "bls_result", "tensors": descs}, odatas)
}

// finalize asks the process to run finalize and exit, and kills it when
// it does not in time.
func (p *proc) finalize() {
	if !p.exited() && p.send(map[string]string{"op": "finalize"}, nil) == nil {
		_ = p.w.Close()
		select {
		case <-p.done:
			return
		case <-time.After(finalizeWait):
		}
	}
	p.kill()
	<-p.done
}
