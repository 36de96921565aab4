package modelrepo

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/fw-serve/fw/batcher"
	"github.com/fw-serve/fw/engine"
	"github.com/fw-serve/fw/ensemble"
	pb "github.com/fw-serve/fw/grpcapi/inferencepb"
	"github.com/fw-serve/fw/modelhost"
	"github.com/fw-serve/fw/sequence"
	"github.com/fw-serve/fw/serving"
)

// platformEnsemble is Triton's platform name of an ensemble.
const platformEnsemble = "ensemble"

// ensembleWorkers is how many requests of one ensemble run at once; more
// wait in its queue. Its steps are batched by their own models.
const ensembleWorkers = 64

// isEnsemble reports whether cfg configures an ensemble.
func isEnsemble(cfg *pb.ModelConfig) bool { return cfg.GetPlatform() == platformEnsemble }

// checkEnsemble checks what an ensemble's configuration may set: its
// inputs and outputs with their datatypes and dims, max_batch_size, its
// steps, version_policy, parameters, labels. Fields that configure an
// engine or a scheduler of its own are refused, naming them.
func checkEnsemble(cfg *pb.ModelConfig) error {
	es := cfg.GetEnsembleScheduling()
	if !isEnsemble(cfg) {
		if es != nil {
			return fmt.Errorf("ensemble_scheduling needs platform: \"ensemble\"")
		}
		return nil
	}
	if es == nil || len(es.GetStep()) == 0 {
		return fmt.Errorf("platform \"ensemble\" needs ensemble_scheduling with at least one step")
	}
	if len(es.GetStep()) > ensemble.MaxSteps {
		return fmt.Errorf("ensemble_scheduling has %d steps; at most %d", len(es.GetStep()), ensemble.MaxSteps)
	}
	switch {
	case cfg.GetBackend() != "":
		return fmt.Errorf("an ensemble has no backend (backend %q); remove it", cfg.GetBackend())
	case len(cfg.GetInstanceGroup()) > 0:
		return fmt.Errorf("an ensemble runs no engine instances (remove instance_group); its steps' models have their own")
	case cfg.GetDefaultModelFilename() != "":
		return fmt.Errorf("an ensemble has no model file (remove default_model_filename)")
	case len(cfg.GetInput()) == 0 || len(cfg.GetOutput()) == 0:
		return fmt.Errorf("an ensemble lists its inputs and outputs (name, data_type, dims); auto-complete cannot read them from a file")
	}
	check := func(kind, name string, dt pb.DataType, dims []int64, reshape *pb.ModelTensorReshape) error {
		if name == "" {
			return fmt.Errorf("an ensemble %s has no name", kind)
		}
		if d := dtypeOf(dt); d == engine.Invalid {
			return fmt.Errorf("ensemble %s %q: data_type %s is not one fw serves", kind, name, dt)
		}
		if reshape != nil {
			if len(reshape.GetShape()) > maxDims {
				return fmt.Errorf("ensemble %s %q: at most %d dims", kind, name, maxDims)
			}
			if err := serving.ReshapeFits(dims, reshape.GetShape()); err != nil {
				return fmt.Errorf("ensemble %s %q: %w", kind, name, err)
			}
		}
		if len(dims) > maxDims {
			return fmt.Errorf("ensemble %s %q: at most %d dims", kind, name, maxDims)
		}
		for _, d := range dims {
			if d == 0 || d < -1 {
				return fmt.Errorf("ensemble %s %q: dim %d; use a positive size or -1", kind, name, d)
			}
		}
		return nil
	}
	for _, in := range cfg.GetInput() {
		if err := check("input", in.GetName(), in.GetDataType(), in.GetDims(), in.GetReshape()); err != nil {
			return err
		}
	}
	for _, out := range cfg.GetOutput() {
		if err := check("output", out.GetName(), out.GetDataType(), out.GetDims(), out.GetReshape()); err != nil {
			return err
		}
	}
	for i, st := range es.GetStep() {
		if err := validName(st.GetModelName()); err != nil {
			return fmt.Errorf("ensemble_scheduling step %d: model_name %q: %v", i+1, st.GetModelName(), err)
		}
		if v := st.GetModelVersion(); v < -1 {
			return fmt.Errorf("ensemble_scheduling step %d: model_version %d; use -1 for the newest version or a version number", i+1, v)
		}
	}
	return nil
}

// ensembleConfig is the ensemble package's view of cfg.
func ensembleConfig(name string, cfg *pb.ModelConfig) ensemble.Config {
	batched := cfg.GetMaxBatchSize() > 0
	// Inside the pipeline a tensor has its reshape, when it has one.
	spec := func(n string, dt pb.DataType, dims []int64, reshape *pb.ModelTensorReshape) engine.TensorSpec {
		shape := slices.Clone(dims)
		if reshape != nil {
			shape = slices.Clone(reshape.GetShape())
		}
		if batched {
			shape = append([]int64{-1}, shape...)
		}
		return engine.TensorSpec{Name: n, DType: dtypeOf(dt), Shape: shape}
	}
	ec := ensemble.Config{Name: name, Batched: batched, MaxBatchSize: int(cfg.GetMaxBatchSize())}
	for _, in := range cfg.GetInput() {
		s := spec(in.GetName(), in.GetDataType(), in.GetDims(), in.GetReshape())
		s.Optional = in.GetOptional()
		ec.Inputs = append(ec.Inputs, s)
	}
	for _, out := range cfg.GetOutput() {
		ec.Outputs = append(ec.Outputs, spec(out.GetName(), out.GetDataType(), out.GetDims(), out.GetReshape()))
	}
	for _, st := range cfg.GetEnsembleScheduling().GetStep() {
		s := ensemble.Step{Model: st.GetModelName(), InputMap: maps.Clone(st.GetInputMap()), OutputMap: maps.Clone(st.GetOutputMap())}
		if v := st.GetModelVersion(); v > 0 {
			s.Version = strconv.FormatInt(v, 10)
		}
		ec.Steps = append(ec.Steps, s)
	}
	return ec
}

// maxNesting bounds how deep ensembles may contain ensembles.
const maxNesting = 16

// loadingKey is the context key of the ensembles whose loads are in
// progress on this call chain: an ensemble's load loads its models, which
// may be ensembles, and a name met again is refused instead of loaded
// again and again.
type loadingKey struct{}

// stepsOf are the step models of the model name as it would run now: its
// loaded configuration's when it is loaded, else its config.pbtxt's; nil
// for a model that is no ensemble (or cannot be read: its load says why).
func (r *Repository) stepsOf(name string) []string {
	for _, inst := range r.Loaded() {
		if inst.Name() == name {
			var out []string
			for _, st := range inst.Config.Ensemble {
				out = append(out, st.Model)
			}
			return out
		}
	}
	dir, err := r.dir(name)
	if err != nil {
		return nil
	}
	data, err := readBounded(r.configPath(dir))
	if err != nil {
		return nil
	}
	cfg, err := parseConfig(data, false)
	if err != nil || !isEnsemble(cfg) {
		return nil
	}
	var out []string
	for _, st := range cfg.GetEnsembleScheduling().GetStep() {
		out = append(out, st.GetModelName())
	}
	return out
}

// checkNesting follows the ensemble's steps, and theirs (as loaded, else
// as configured), refusing ensembles that contain each other and nesting
// deeper than maxNesting; each model is looked at once.
func (r *Repository) checkNesting(name string, cfg *pb.ModelConfig) error {
	var steps []string
	for _, st := range cfg.GetEnsembleScheduling().GetStep() {
		steps = append(steps, st.GetModelName())
	}
	done := map[string]bool{}
	var walk func(path []string, steps []string) error
	walk = func(path []string, steps []string) error {
		if len(path) > maxNesting {
			return fmt.Errorf("ensembles nest more than %d deep (%s)", maxNesting, strings.Join(path, " -> "))
		}
		for _, m := range steps {
			if slices.Contains(path, m) {
				return fmt.Errorf("ensembles contain each other (%s -> %s); an ensemble cannot run itself", strings.Join(path, " -> "), m)
			}
			if done[m] {
				continue
			}
			if err := walk(append(path, m), r.stepsOf(m)); err != nil {
				return err
			}
			done[m] = true
		}
		return nil
	}
	return walk([]string{name}, steps)
}

// loadSteps makes sure every model the ensemble's steps name is loaded
// (as Triton loads an ensemble's models with it): a model not loaded is
// loaded now, in any control mode (with a resident limit too).
func (r *Repository) loadSteps(ctx context.Context, name string, cfg *pb.ModelConfig) error {
	chain, _ := ctx.Value(loadingKey{}).([]string)
	if slices.Contains(chain, name) {
		return fmt.Errorf("ensembles contain each other (%s -> %s); an ensemble cannot run itself", strings.Join(chain, " -> "), name)
	}
	if err := r.checkNesting(name, cfg); err != nil {
		return err
	}
	ctx = context.WithValue(ctx, loadingKey{}, append(slices.Clone(chain), name))
	seen := map[string]bool{}
	for _, st := range cfg.GetEnsembleScheduling().GetStep() {
		m := st.GetModelName()
		if seen[m] {
			continue
		}
		seen[m] = true
		version := ""
		if v := st.GetModelVersion(); v > 0 {
			version = strconv.FormatInt(v, 10)
		}
		if r.loaded(m, version) {
			continue
		}
		if err := r.load(ctx, m, serving.LoadOptions{}); err != nil {
			return fmt.Errorf("its step model %q: %w", m, err)
		}
	}
	return nil
}

// loaded reports whether version ("" any) of the model name is loaded now.
func (r *Repository) loaded(name, version string) bool {
	sm := (*r.served.Load())[name]
	if sm == nil {
		return false
	}
	for _, v := range sm.versions {
		if version == "" || v.version == version {
			return true
		}
	}
	return false
}

// loadEnsemble loads one version of an ensemble into a host of its own:
// its pipeline, checked against the step models served now, behind a
// batcher whose workers each run one request's steps with that request's
// context (its deadline and trace reach the steps).
func (r *Repository) loadEnsemble(ctx context.Context, name, vs, vdir string, cfg *pb.ModelConfig, labels map[string]string) (*modelhost.Host, error) {
	if usesRagged(cfg) {
		return nil, fmt.Errorf("an ensemble does not batch its requests itself, so allow_ragged_batch, batch_input and batch_output do not apply to it; set them on the models its steps run")
	}
	ec := ensembleConfig(name, cfg)
	ec.Log = r.log
	p, err := ensemble.New(ec, r)
	if err != nil {
		return nil, err
	}
	described, err := describeEnsemble(name, cfg, labels)
	if err != nil {
		return nil, err
	}
	h := modelhost.New(modelhost.Config{
		Path: vdir, Batcher: r.ensembleBatcher(cfg, p.Stateful()), SkipWarmup: true, Name: name, Version: vs, Tracer: r.cfg.Tracer,
		Open: func(context.Context) (*engine.Model, error) {
			return engine.Compose(vdir, name, vs, ec.Inputs, ec.Outputs, ec.Batched, p), nil
		},
		Prepare: func(inst *serving.Instance) error {
			var rin, rout []serving.ReshapeTensor
			for i, in := range cfg.GetInput() {
				if in.GetReshape() != nil {
					rin = append(rin, serving.ReshapeTensor{Index: i, Dims: in.GetDims(), Model: in.GetReshape().GetShape()})
				}
			}
			for i, out := range cfg.GetOutput() {
				if out.GetReshape() != nil {
					rout = append(rout, serving.ReshapeTensor{Index: i, Dims: out.GetDims(), Model: out.GetReshape().GetShape()})
				}
			}
			if len(rin)+len(rout) > 0 {
				r, err := serving.NewReshape(inst.Model, ec.Batched, rin, rout)
				if err != nil {
					return err
				}
				inst.Reshape = r
			}
			inst.Order = sequence.NewOrder()
			inst.StatefulSteps = p.Stateful()
			inst.Config = described
			inst.Config.Outputs = slices.Clone(described.Outputs)
			for i, out := range inst.Config.Outputs {
				if out.Labels == nil { // no label_filename of its own: its producer's
					inst.Config.Outputs[i].Labels = p.Labels(out.Name)
				}
			}
			return r.setCache(inst, cfg)
		},
	}, hostMetrics{r.metrics}, r.log)
	if err := h.Start(ctx); err != nil {
		_ = h.Shutdown(context.Background(), 30*time.Second)
		return nil, err
	}
	return h, nil
}

// ensembleBatcher is the batching of an ensemble: no waiting, each request
// its own run unless all ensembleWorkers are busy, and always when a step
// is stateful (each request carries its own sequence to it).
func (r *Repository) ensembleBatcher(cfg *pb.ModelConfig, stateful bool) batcher.Config {
	bc := r.cfg.Batcher
	bc.Instances = ensembleWorkers
	bc.MaxDelay = 0 // the steps' models wait for batches; the ensemble never does
	bc.PreferredSizes = nil
	bc.Queues = batcher.Queues{} // the steps' models queue by their own policies
	bc.RequestContext = true
	bc.PassTurn = true // a stream's requests reach the first steps' models in stream order
	if stateful {
		// A request of a stateful step may wait in the pipeline for its
		// sequence's turn or a free sequence slot: with a bounded pool of
		// workers, waiting requests of new sequences could hold every
		// worker while the requests that would end the sequences holding
		// the slots wait in the queue behind them. Every request the queue
		// admits gets a worker; past the queue, the batcher refuses.
		bc.Instances = max(ensembleWorkers, bc.MaxQueue, batcher.DefaultMaxQueue)
	}
	if mbs := int(cfg.GetMaxBatchSize()); mbs > 0 {
		bc.MaxBatchRows = mbs
		if stateful {
			bc.MaxBatchRows = 1 // a request is never joined with another, however many rows it has
		}
	} else {
		bc.Unbatched = true
	}
	return bc
}

// describeEnsemble is the configuration an ensemble is served under.
func describeEnsemble(name string, cfg *pb.ModelConfig, labels map[string]string) (serving.ModelConfig, error) {
	c := serving.ModelConfig{Name: name, Platform: platformEnsemble, MaxBatchSize: int(cfg.GetMaxBatchSize()),
		VersionPolicy: versionPolicyJSON(cfg)}
	for _, in := range cfg.GetInput() {
		c.Inputs = append(c.Inputs, serving.TensorConfig{Name: in.GetName(), DataType: in.GetDataType().String(),
			Dims: slices.Clone(in.GetDims()), Format: in.GetFormat().String(), Optional: in.GetOptional(), Reshape: reshapeOf(in.GetReshape())})
	}
	for _, out := range cfg.GetOutput() {
		tc := serving.TensorConfig{Name: out.GetName(), DataType: out.GetDataType().String(), Dims: slices.Clone(out.GetDims()),
			Reshape: reshapeOf(out.GetReshape())}
		if l := out.GetLabelFilename(); l != "" {
			doc, ok := labels[l]
			if !ok {
				return c, fmt.Errorf("output %q: label_filename %q is not a file in the model's directory", out.GetName(), l)
			}
			tc.LabelFilename, tc.Labels = l, splitLabels(doc)
		}
		c.Outputs = append(c.Outputs, tc)
	}
	for _, st := range cfg.GetEnsembleScheduling().GetStep() {
		c.Ensemble = append(c.Ensemble, serving.EnsembleStep{Model: st.GetModelName(), Version: st.GetModelVersion(),
			InputMap: maps.Clone(st.GetInputMap()), OutputMap: maps.Clone(st.GetOutputMap())})
	}
	c.Parameters = parametersJSON(cfg)
	return c, nil
}

// stepModels are the models the loaded ensemble name runs (none when it
// is not a loaded ensemble).
func (r *Repository) stepModels(name string) []string {
	var out []string
	for _, inst := range r.Loaded() {
		if inst.Name() != name {
			continue
		}
		for _, st := range inst.Config.Ensemble {
			if !slices.Contains(out, st.Model) {
				out = append(out, st.Model)
			}
		}
	}
	return out
}

// usedByEnsemble reports whether a loaded ensemble runs the model name.
func (r *Repository) usedByEnsemble(name string) bool { return len(r.ensemblesUsing(name)) > 0 }

// ensemblesUsing are the loaded ensembles that run the model name.
func (r *Repository) ensemblesUsing(name string) []string {
	var out []string
	for _, inst := range r.Loaded() {
		for _, st := range inst.Config.Ensemble {
			if st.Model == name && !slices.Contains(out, inst.Name()) {
				out = append(out, inst.Name())
			}
		}
	}
	return out
}
