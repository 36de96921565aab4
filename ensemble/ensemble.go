// Package ensemble runs a Triton ensemble: a model that is a pipeline of
// other models of the repository, whose steps pass tensors to each other
// by name (config.pbtxt's platform "ensemble" and ensemble_scheduling).
// The pipeline is checked once, when the ensemble loads, against the
// models it names (every step's tensors exist, datatypes agree, each
// tensor has one producer, no cycle); each request then runs the steps in
// dependency order, those that do not depend on each other at the same
// time, each through its model's own batcher, so requests of an ensemble
// are batched with each other and with direct requests to its models.
package ensemble

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/fw-serve/fw/batcher"
	"github.com/fw-serve/fw/engine"
	"github.com/fw-serve/fw/serving"
)

// MaxSteps bounds the steps of one ensemble (Triton's examples use a few).
const MaxSteps = 256

// maxNesting bounds how deep a request runs ensembles within ensembles.
const maxNesting = 16

// runningKey is the context key of the ensembles a request is running
// through, outermost first.
type runningKey struct{}

// Config is an ensemble as its configuration describes it.
type Config struct {
	// Name is the ensemble's model name, for messages.
	Name string
	// Inputs and Outputs are the ensemble's own tensors, with the batch
	// axis (-1) first when Batched.
	Inputs, Outputs []engine.TensorSpec
	Batched         bool
	// MaxBatchSize is the ensemble's max_batch_size (0: no batch axis).
	MaxBatchSize int
	Steps        []Step
	// Log is told, once per tensor, when a step's model left out an
	// output the pipeline maps (a Python model's response may); nil
	// discards.
	Log *slog.Logger
}

// Step is one model run by the pipeline.
type Step struct {
	// Model names the model; Version its version, "" for its newest.
	Model, Version string
	// InputMap maps each input of the model to the ensemble tensor that
	// feeds it; OutputMap each output of the model the pipeline keeps to
	// the ensemble tensor it becomes (Triton's input_map and output_map).
	InputMap, OutputMap map[string]string
}

// Pipeline is a checked ensemble, ready to run requests. It is safe for
// concurrent use and implements engine.Backend, so an engine.Model made by
// engine.Compose serves it behind a batcher like any model.
type Pipeline struct {
	cfg    Config
	models serving.Models
	// levels are the steps' indexes by dependency depth: the steps of one
	// level need only tensors that the ensemble's inputs and earlier
	// levels produce.
	levels [][]int
	// labels are the outputs' inherited class labels (Labels).
	labels map[string][]string
	// stateful: a step's model has sequence batching (Stateful).
	stateful bool
	// told are the tensors a step left out that Log was told of.
	told sync.Map
}

// leftOut logs, once per tensor, that a step's model left it out.
func (p *Pipeline) leftOut(tensor string) {
	if _, seen := p.told.LoadOrStore(tensor, true); seen || p.cfg.Log == nil {
		return
	}
	// Triton's sentence first: its tests and users look for it.
	p.cfg.Log.Info(fmt.Sprintf("Composing models did not output tensor %s; ensemble %q answers without it, and a step that takes it fails", tensor, p.cfg.Name))
}

// Error is a pipeline that does not hold together, found when it loads.
type Error struct{ Msg string }

func (e *Error) Error() string { return e.Msg }

// New checks cfg against the models it names, as models serves them now
// (each is looked up by name and version; an on-demand repository loads
// it), and returns the pipeline.
func New(cfg Config, models serving.Models) (*Pipeline, error) {
	bad := func(format string, args ...any) error {
		return &Error{Msg: fmt.Sprintf("ensemble %q: ", cfg.Name) + fmt.Sprintf(format, args...)}
	}
	if len(cfg.Steps) == 0 {
		return nil, bad("ensemble_scheduling has no step; list the models it runs")
	}
	if len(cfg.Steps) > MaxSteps {
		return nil, bad("%d steps; at most %d", len(cfg.Steps), MaxSteps)
	}
	if len(cfg.Inputs) == 0 || len(cfg.Outputs) == 0 {
		return nil, bad("an ensemble lists its inputs and outputs (name, data_type, dims) in its configuration")
	}
	// producer of each ensemble tensor: -1 an input of the ensemble, else
	// the step's index; spec the datatype it has.
	producer := map[string]int{}
	dtype := map[string]engine.DType{}
	for _, in := range cfg.Inputs {
		if _, dup := producer[in.Name]; dup {
			return nil, bad("input %q is listed twice", in.Name)
		}
		producer[in.Name], dtype[in.Name] = -1, in.DType
	}
	seenOut := map[string]bool{}
	for _, out := range cfg.Outputs {
		if _, isIn := producer[out.Name]; isIn {
			return nil, bad("%q is both an input and an output of the ensemble; an output is produced by a step", out.Name)
		}
		if seenOut[out.Name] {
			return nil, bad("output %q is listed twice", out.Name)
		}
		seenOut[out.Name] = true
	}
	insts := make([]*serving.Instance, len(cfg.Steps))
	for i, st := range cfg.Steps {
		where := fmt.Sprintf("step %d (model %q)", i+1, st.Model)
		if st.Model == "" {
			return nil, bad("step %d names no model_name", i+1)
		}
		if st.Model == cfg.Name {
			return nil, bad("%s is the ensemble itself", where)
		}
		inst, err := models.Get(st.Model, st.Version)
		if err != nil {
			return nil, bad("%s: %v", where, err)
		}
		insts[i] = inst
		// Triton's rule: a step model that batches takes at least the
		// ensemble's batches (one without a batch axis takes them whole).
		if mbs := inst.Config.MaxBatchSize; cfg.MaxBatchSize > 0 && inst.Batched() && mbs > 0 && mbs < cfg.MaxBatchSize {
			return nil, bad("%s allows batches of at most %d rows (max_batch_size), less than the ensemble's %d; lower the ensemble's max_batch_size or raise the model's", where, mbs, cfg.MaxBatchSize)
		}
		if len(st.OutputMap) == 0 {
			return nil, bad("%s has no output_map; map the outputs the pipeline uses to ensemble tensors", where)
		}
		outs := specsByName(inst.Outputs())
		for _, name := range sortedKeys(st.OutputMap) {
			sp, ok := outs[name]
			if !ok {
				return nil, bad("%s: output_map names %q, which the model does not have; its outputs are %s", where, name, serving.Describe(inst.Outputs()))
			}
			t := st.OutputMap[name]
			if p, dup := producer[t]; dup {
				if p < 0 {
					return nil, bad("%s: output_map writes %q, an input of the ensemble; give it another name", where, t)
				}
				return nil, bad("%s: output_map writes %q, which step %d writes too; each ensemble tensor has one producer", where, t, p+1)
			}
			producer[t], dtype[t] = i, sp.DType
		}
	}
	for _, out := range cfg.Outputs {
		p, ok := producer[out.Name]
		if !ok {
			return nil, bad("output %q is not written by any step's output_map", out.Name)
		}
		if out.DType != engine.Invalid && dtype[out.Name] != engine.Invalid && out.DType != dtype[out.Name] {
			return nil, bad("output %q is %s in the configuration but step %d (model %q) produces %s", out.Name, serving.DatatypeName(out.DType), p+1, cfg.Steps[p].Model, serving.DatatypeName(dtype[out.Name]))
		}
	}
	deps := make([][]int, len(cfg.Steps))
	for i, st := range cfg.Steps {
		where := fmt.Sprintf("step %d (model %q)", i+1, st.Model)
		ins := specsByName(insts[i].Inputs())
		for _, name := range sortedKeys(st.InputMap) {
			sp, ok := ins[name]
			if !ok {
				return nil, bad("%s: input_map names %q, which the model does not take; its inputs are %s", where, name, serving.Describe(insts[i].Inputs()))
			}
			t := st.InputMap[name]
			p, ok := producer[t]
			if !ok {
				return nil, bad("%s: input %q reads %q, which is neither an input of the ensemble nor written by a step's output_map", where, name, t)
			}
			if dt := dtype[t]; dt != engine.Invalid && sp.DType != engine.Invalid && dt != sp.DType {
				return nil, bad("%s: input %q takes %s but %q is %s", where, name, serving.DatatypeName(sp.DType), t, serving.DatatypeName(dt))
			}
			if p >= 0 && !slices.Contains(deps[i], p) {
				deps[i] = append(deps[i], p)
			}
		}
		for _, sp := range insts[i].Inputs() {
			if _, ok := st.InputMap[sp.Name]; !ok && !sp.Optional { // an optional one left out of input_map is never given
				return nil, bad("%s: the model's input %q is not in input_map; map every input of the model", where, sp.Name)
			}
		}
	}
	levels, err := order(deps)
	if err != nil {
		return nil, bad("%v", err)
	}
	labels := map[string][]string{}
	for _, out := range cfg.Outputs {
		i := producer[out.Name]
		for name, t := range cfg.Steps[i].OutputMap {
			if t == out.Name {
				labels[out.Name] = insts[i].Labels(name)
			}
		}
	}
	stateful := slices.ContainsFunc(insts, func(inst *serving.Instance) bool { return inst.Sequences != nil || inst.StatefulSteps })
	return &Pipeline{cfg: cfg, models: models, levels: levels, labels: labels, stateful: stateful}, nil
}

// Stateful reports whether a step's model was stateful (sequence
// batching), itself or in an ensemble it runs, when the ensemble loaded:
// each request then runs the pipeline on its own, with its sequence
// (serving.WithSequence).
func (p *Pipeline) Stateful() bool { return p.stateful }

// Labels are the class labels of the ensemble's output named name: those
// of the step model's output that produces it, as that model served them
// when the ensemble loaded (an ensemble's own label_filename overrides
// them); nil when it has none.
func (p *Pipeline) Labels(name string) []string { return p.labels[name] }

// order groups the steps by dependency depth, refusing a cycle.
func order(deps [][]int) ([][]int, error) {
	depth := make([]int, len(deps))
	state := make([]int8, len(deps)) // 0 unvisited, 1 visiting, 2 done
	var visit func(i int, path []int) error
	visit = func(i int, path []int) error {
		switch state[i] {
		case 2:
			return nil
		case 1:
			names := make([]string, 0, len(path)+1)
			for _, p := range append(path, i) {
				names = append(names, fmt.Sprint(p+1))
			}
			return fmt.Errorf("the steps form a cycle (%s): a step cannot need what it or a later step of the cycle produces", strings.Join(names, " -> "))
		}
		state[i] = 1
		for _, d := range deps[i] {
			if err := visit(d, append(path, i)); err != nil {
				return err
			}
			depth[i] = max(depth[i], depth[d]+1)
		}
		state[i] = 2
		return nil
	}
	top := 0
	for i := range deps {
		if err := visit(i, nil); err != nil {
			return nil, err
		}
		top = max(top, depth[i])
	}
	levels := make([][]int, top+1)
	for i, d := range depth {
		levels[d] = append(levels[d], i)
	}
	return levels, nil
}

// Inputs are the ensemble's inputs (engine.Backend).
func (p *Pipeline) Inputs() []engine.TensorSpec { return p.cfg.Inputs }

// Outputs are the ensemble's outputs (engine.Backend).
func (p *Pipeline) Outputs() []engine.TensorSpec { return p.cfg.Outputs }

// Close does nothing: the pipeline holds no model of its own.
func (p *Pipeline) Close() error { return nil }

// Run runs one request through the steps (engine.Backend): inputs in the
// order of Inputs, outputs in the order of Outputs. Each step's model is
// looked up when the step runs, so a model reloaded since the ensemble
// loaded serves its new version. A step's failure fails the request, with
// its error wrapped in a *StepError (its kind, an *engine.InputError or a
// batcher's, is kept for the transport).
func (p *Pipeline) Run(ctx context.Context, inputs []engine.Tensor) ([]engine.Tensor, error) {
	if len(inputs) != len(p.cfg.Inputs) {
		return nil, &engine.InputError{Msg: "wrong number of inputs", Expected: fmt.Sprint(len(p.cfg.Inputs)), Received: fmt.Sprint(len(inputs))}
	}
	// Ensembles that came to contain each other (configurations loaded
	// side by side, each checked before the other was served) fail the
	// request instead of running forever.
	chain, _ := ctx.Value(runningKey{}).([]string)
	if slices.Contains(chain, p.cfg.Name) {
		return nil, fmt.Errorf("ensembles contain each other (%s -> %s); reload them with configurations that do not", strings.Join(chain, " -> "), p.cfg.Name)
	}
	if len(chain) >= maxNesting {
		return nil, fmt.Errorf("ensembles nest more than %d deep (%s)", maxNesting, strings.Join(chain, " -> "))
	}
	ctx = context.WithValue(ctx, runningKey{}, append(slices.Clone(chain), p.cfg.Name))
	ctx = engine.WithoutResponseSink(ctx) // a step's response parameters are not the ensemble's answer's, as in Triton
	vals := make(map[string]engine.Tensor, len(inputs)+4*len(p.cfg.Steps))
	for i, sp := range p.cfg.Inputs {
		vals[sp.Name] = inputs[i]
	}
	var skip []bool // steps whose outputs no requested output needs
	if idx, ok := serving.RequestedOutputs(ctx); ok {
		skip = p.unneeded(idx)
	}
	// The first steps queue in their models in the order of the source
	// the request came from (a gRPC stream's turn, which the ensemble's
	// batcher passes on): each part of the turn ends once its step has
	// queued or run, and the source's next request may then queue.
	first := true
	for _, level := range p.levels {
		if skip != nil {
			level = slices.DeleteFunc(slices.Clone(level), func(i int) bool { return skip[i] })
			if len(level) == 0 {
				continue
			}
		}
		var turns []context.Context // the first level's parts of the turn; nil after it
		if first {
			turns, first = batcher.SplitTurn(ctx, len(level)), false
		}
		if len(level) == 1 {
			outs, err := p.step(stepContext(ctx, turns, 0), level[0], vals)
			if err != nil {
				return nil, err
			}
			for k, v := range outs {
				vals[k] = v
			}
			continue
		}
		results := make([]map[string]engine.Tensor, len(level))
		errs := make([]error, len(level))
		var wg sync.WaitGroup
		for j, i := range level {
			wg.Go(func() { results[j], errs[j] = p.step(stepContext(ctx, turns, j), i, vals) })
		}
		wg.Wait()
		for _, e := range errs {
			if e != nil {
				return nil, e // the first failed step's error, with its kind
			}
		}
		for _, outs := range results {
			for k, v := range outs {
				vals[k] = v
			}
		}
	}
	out := make([]engine.Tensor, len(p.cfg.Outputs))
	for i, sp := range p.cfg.Outputs {
		t, ok := vals[sp.Name]
		if !ok { // not asked for, its steps skipped: an empty tensor with the rows
			t = engine.Tensor{DType: sp.DType, Shape: []int64{0}}
			if p.cfg.Batched && len(inputs) > 0 && len(inputs[0].Shape) > 0 {
				t.Shape = []int64{inputs[0].Shape[0], 0}
			}
		}
		out[i] = t
	}
	return out, nil
}

// stepContext is the context of a level's j-th step: its part of the
// request's turn on the first level (turns), ctx on the others.
func stepContext(ctx context.Context, turns []context.Context, j int) context.Context {
	if turns != nil {
		return turns[j]
	}
	return ctx
}

// unneeded marks the steps that none of the requested outputs (indexes
// into Outputs) depends on.
func (p *Pipeline) unneeded(requested []int) []bool {
	need := map[string]bool{}
	for _, i := range requested {
		if i >= 0 && i < len(p.cfg.Outputs) {
			need[p.cfg.Outputs[i].Name] = true
		}
	}
	skip := make([]bool, len(p.cfg.Steps))
	for l := len(p.levels) - 1; l >= 0; l-- {
		for _, i := range p.levels[l] {
			st := p.cfg.Steps[i]
			skip[i] = true
			for _, t := range st.OutputMap {
				if need[t] {
					skip[i] = false
				}
			}
			if !skip[i] {
				for _, t := range st.InputMap {
					need[t] = true
				}
			}
		}
	}
	return skip
}

// step runs step i on the tensors produced so far (read only) and returns
// the ensemble tensors it writes.
func (p *Pipeline) step(ctx context.Context, i int, vals map[string]engine.Tensor) (map[string]engine.Tensor, error) {
	defer batcher.ReleaseTurn(ctx) // queued and answered, or never to queue: the source's next may go
	st := p.cfg.Steps[i]
	inst, err := p.models.Get(st.Model, st.Version)
	if err != nil {
		return nil, &StepError{Ensemble: p.cfg.Name, Step: i + 1, Model: st.Model, Err: err}
	}
	specs := inst.Inputs()
	ins := make([]engine.Tensor, len(specs))
	// A model that batches, given tensors one axis short of its inputs (an
	// ensemble without a batch axis feeding it), takes them as one row and
	// its outputs lose that row's axis: Triton's conversion between
	// ensembles and models with and without batching.
	row := inst.Batched()
	for j, sp := range specs {
		t, ok := st.InputMap[sp.Name]
		if !ok && sp.Optional {
			continue // not mapped: the step never gives it
		}
		if !ok { // the model changed since the ensemble loaded
			return nil, &StepError{Ensemble: p.cfg.Name, Step: i + 1, Model: st.Model, Err: fmt.Errorf("the model's input %q is not in the step's input_map (the model was reloaded with other inputs; reload the ensemble)", sp.Name)}
		}
		ins[j] = vals[t] // absent when an optional input was not given or a step left it out
		if !ins[j].Absent() {
			row = row && len(sp.Shape) > 0 && len(ins[j].Shape) == len(sp.Shape)-1
		}
	}
	if row {
		for j := range ins {
			if !ins[j].Absent() {
				ins[j].Shape = append([]int64{1}, ins[j].Shape...)
			}
		}
	}
	// The request's output marking is the ensemble's own: a step model
	// that skips work gets the outputs its step keeps, any other none.
	if _, marked := serving.RequestedOutputs(ctx); marked || inst.SkipsOutputs() {
		var keep []int
		if inst.SkipsOutputs() && len(st.OutputMap) < len(inst.Outputs()) {
			for j, sp := range inst.Outputs() {
				if _, ok := st.OutputMap[sp.Name]; ok {
					keep = append(keep, j)
				}
			}
		}
		ctx = serving.WithOutputs(ctx, keep)
	}
	began := time.Now()
	outs, timing, err := p.infer(ctx, inst, ins)
	// The step is a request to its model, in that model's statistics as
	// a client's request is (Triton counts them so).
	inst.Stats.Record(serving.Request{Began: began, Submitted: began, Encoded: time.Now(), Timing: timing, OK: err == nil, Err: err})
	if err != nil {
		return nil, &StepError{Ensemble: p.cfg.Name, Step: i + 1, Model: st.Model, Err: err}
	}
	res := make(map[string]engine.Tensor, len(st.OutputMap))
	for j, sp := range inst.Outputs() {
		if t, ok := st.OutputMap[sp.Name]; ok && j < len(outs) {
			o := outs[j]
			if o.Absent() { // left out by the step's model: so by the ensemble, or an error for a step that needs it
				p.leftOut(t)
			}
			if row && len(o.Shape) > 0 && o.Shape[0] == 1 {
				o.Shape = o.Shape[1:]
			}
			res[t] = o
		}
	}
	if len(res) != len(st.OutputMap) {
		return nil, &StepError{Ensemble: p.cfg.Name, Step: i + 1, Model: st.Model, Err: errors.New("the model no longer has every output the step's output_map names (it was reloaded; reload the ensemble)")}
	}
	return res, nil
}

// infer runs a step's request on its model: a stateful model's in the
// sequence of the ensemble's request (the ensemble's order has made the
// requests of one sequence reach here one after another, in the order
// the client sent them), as Triton's ensembles pass a request's
// correlation ID and flags to each step.
func (p *Pipeline) infer(ctx context.Context, inst *serving.Instance, ins []engine.Tensor) ([]engine.Tensor, batcher.Timing, error) {
	if inst.Sequences == nil {
		return serving.Infer(ctx, p.models, inst, ins)
	}
	sp, ok := serving.SequenceFrom(ctx)
	if !ok {
		return nil, batcher.Timing{}, fmt.Errorf("%w; send the ensemble's requests with the parameters sequence_id, sequence_start and sequence_end", serving.Stateless(inst))
	}
	if err := ctx.Err(); err != nil { // the request ended while its earlier steps ran: its sequence must not move
		return nil, batcher.Timing{}, err
	}
	t, err := serving.EnterSequence(inst, sp, ins)
	if err != nil {
		return nil, batcher.Timing{}, err
	}
	defer t.Release()
	return serving.InferSequence(ctx, p.models, inst, ins, t)
}

// StepError is a failure of one step of a request.
type StepError struct {
	Ensemble string // the ensemble's name
	Step     int
	Model    string
	Err      error
}

func (e *StepError) Error() string {
	return fmt.Sprintf("ensemble step %d (model %q): %v", e.Step, e.Model, e.Err)
}

func (e *StepError) Unwrap() error { return e.Err }

// EnsembleStep is the step that failed (serving.StepFailure).
func (e *StepError) EnsembleStep() int { return e.Step }

// EnsembleName is the ensemble whose step failed (serving.StepFailure).
func (e *StepError) EnsembleName() string { return e.Ensemble }

func specsByName(specs []engine.TensorSpec) map[string]engine.TensorSpec {
	m := make(map[string]engine.TensorSpec, len(specs))
	for _, s := range specs {
		m[s.Name] = s
	}
	return m
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
