package modelrepo

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"time"

	"github.com/fw-serve/fw/engine"
	pb "github.com/fw-serve/fw/grpcapi/inferencepb"
	"github.com/fw-serve/fw/sequence"
	"github.com/fw-serve/fw/serving"
)

// defaultSequenceIdle is Triton's max_sequence_idle_microseconds when the
// configuration gives none.
const defaultSequenceIdle = time.Second

// maxInitialStateBytes bounds an initial state file.
const maxInitialStateBytes = 64 << 20

// maxCandidateSequences bounds oldest.max_candidate_sequences.
const maxCandidateSequences = 1 << 20

// sequenceConfig reads config.pbtxt's sequence_batching (nil when absent)
// into the sequence batcher's configuration, checked as Triton checks it.
// dir is the model's directory (for initial_state data_file); the slots are
// per engine instance, multiplied when the instance count is known.
func sequenceConfig(name, dir string, cfg *pb.ModelConfig) (*sequence.Config, error) {
	sb := cfg.GetSequenceBatching()
	if sb == nil {
		return nil, nil
	}
	if sb.GetIterativeSequence() {
		switch {
		case cfg.GetBackend() != backendPython:
			return nil, fmt.Errorf("sequence_batching iterative_sequence is served for Python models, which reschedule requests (request.set_release_flags); remove it")
		case !iterativeOnly(cfg):
			return nil, fmt.Errorf("sequence_batching iterative_sequence is served alone: each request is its own sequence, with no control_input, state, direct or oldest; remove those or iterative_sequence")
		}
		return nil, nil // no sequence batcher: each request runs, and reruns, on its own
	}
	mbs := int(cfg.GetMaxBatchSize())
	out := &sequence.Config{Model: name, Strategy: sequence.Direct, Slots: max(1, mbs), MaxIdle: defaultSequenceIdle}
	if us := sb.GetMaxSequenceIdleMicroseconds(); us > 0 {
		if us > uint64(math.MaxInt64/int64(time.Microsecond)) {
			return nil, fmt.Errorf("sequence_batching max_sequence_idle_microseconds %d is too large", us)
		}
		out.MaxIdle = time.Duration(us) * time.Microsecond
	}
	if o := sb.GetOldest(); o != nil {
		out.Strategy = sequence.Oldest
		if n := o.GetMaxCandidateSequences(); n < 0 || n > maxCandidateSequences {
			return nil, fmt.Errorf("sequence_batching oldest max_candidate_sequences %d is out of range 0..%d", n, maxCandidateSequences)
		} else if n > 0 {
			out.Slots = int(n)
		}
		for _, p := range o.GetPreferredBatchSize() {
			if p <= 0 {
				return nil, fmt.Errorf("sequence batching preferred batch size must be positive for %s", name)
			}
			if int(p) > mbs {
				return nil, fmt.Errorf("sequence batching preferred batch size must be <= max batch size for %s", name)
			}
		}
	}
	if u := sb.GetDirect().GetMinimumSlotUtilization(); !(u >= 0 && u <= 1) { // NaN too
		return nil, fmt.Errorf("sequence batching minimum slot utilization must be in range (0.0, 1.0] for %s", name)
	}
	if d := queueDelay(sb); d > uint64(time.Minute/time.Microsecond) {
		return nil, fmt.Errorf("sequence_batching max_queue_delay_microseconds %d is over a minute", d)
	}
	seen := map[pb.ModelSequenceBatching_Control_Kind]string{}
	names := map[string]bool{}
	for _, ci := range sb.GetControlInput() {
		if ci.GetName() == "" {
			return nil, fmt.Errorf("sequence batching control tensor must have a name for %s", name)
		}
		if names[ci.GetName()] {
			return nil, fmt.Errorf("sequence batching control tensor '%s' is specified for multiple control kinds for %s", ci.GetName(), name)
		}
		names[ci.GetName()] = true
		if n := len(ci.GetControl()); n != 1 {
			return nil, fmt.Errorf("sequence_batching control_input %q lists %d controls; give it exactly one", ci.GetName(), n)
		}
		c, err := control(name, ci.GetName(), ci.GetControl()[0])
		if err != nil {
			return nil, err
		}
		k := ci.GetControl()[0].GetKind()
		if _, dup := seen[k]; dup {
			return nil, fmt.Errorf("sequence batching specifies multiple %s tensors for %s", k, name)
		}
		seen[k] = ci.GetName()
		out.Controls = append(out.Controls, c)
	}
	listed := map[string]bool{}
	for _, o := range cfg.GetOutput() {
		listed[o.GetName()] = true
	}
	for _, st := range sb.GetState() {
		s, err := state(dir, st)
		if err != nil {
			return nil, err
		}
		out.States = append(out.States, s)
		if listed[s.Output] {
			out.VisibleStates = append(out.VisibleStates, s.Output)
		}
	}
	return out, nil
}

// checkEngineTakes refuses, at load, a control or a state of a datatype
// the model's engine cannot take (a libtorch model has no unsigned 16-,
// 32- or 64-bit, no 16-bit integer and no string tensors): every request
// would fail otherwise. It names the control or state and its type.
func checkEngineTakes(sc *sequence.Config, m *engine.Model) error {
	for _, c := range sc.Controls {
		if err := m.Takes(c.DType); err != nil {
			fix := "use int32_false_true, fp32_false_true or bool_false_true"
			if c.Kind == sequence.CorrID {
				fix = "declare it TYPE_INT64 or TYPE_INT32, in the configuration and the model's input alike"
			}
			return fmt.Errorf("sequence_batching control %s (input %q) has data_type %s: %w; %s, or serve the model's ONNX export",
				c.Kind, c.Input, serving.ConfigDataType(c.DType), err, fix)
		}
	}
	for _, s := range sc.States {
		if err := m.Takes(s.DType); err != nil {
			return fmt.Errorf("sequence_batching state %q has data_type %s: %w; give the state one of those types, in the configuration and the model alike, or serve the model's ONNX export",
				s.Input, serving.ConfigDataType(s.DType), err)
		}
	}
	return nil
}

// queueDelay is the strategy's max_queue_delay_microseconds.
func queueDelay(sb *pb.ModelSequenceBatching) uint64 {
	if o := sb.GetOldest(); o != nil {
		return o.GetMaxQueueDelayMicroseconds()
	}
	return sb.GetDirect().GetMaxQueueDelayMicroseconds()
}

// slotted reports whether a model's sequence batcher forms its batches
// slot by slot (sequence.DirectConfig): the direct strategy on a model
// with a batch axis, served by an engine (a Python model's requests go to
// its batcher one by one, each with its correlation ID).
func slotted(cfg *pb.ModelConfig) bool {
	sb := cfg.GetSequenceBatching()
	return sb != nil && sb.GetOldest() == nil && !sb.GetIterativeSequence() && cfg.GetMaxBatchSize() > 0 && cfg.GetBackend() != backendPython
}

// directConfig is the slot scheduler of a slotted model with groups
// instances.
func (r *Repository) directConfig(cfg *pb.ModelConfig, groups int) *sequence.DirectConfig {
	d := cfg.GetSequenceBatching().GetDirect()
	return &sequence.DirectConfig{
		Groups: groups, Size: int(cfg.GetMaxBatchSize()),
		MaxDelay:       time.Duration(d.GetMaxQueueDelayMicroseconds()) * time.Microsecond,
		MinUtilization: d.GetMinimumSlotUtilization(),
		DelayScheduler: r.cfg.DelayScheduler, BacklogDelay: r.cfg.BacklogDelay,
	}
}

// minSlotRows is the rows a direct sequence batch waits for, up to its
// max_queue_delay_microseconds, before it runs (batcher.Config.MinRows):
// the fewest ready rows k whose share of max_batch_size reaches
// minimum_slot_utilization, compared in float32 as Triton's direct
// strategy compares them (k / max_batch_size >= u). 0 when there is no
// such wait (no utilization or no delay, as Triton).
func minSlotRows(cfg *pb.ModelConfig) int {
	d := cfg.GetSequenceBatching().GetDirect()
	u, mbs := d.GetMinimumSlotUtilization(), cfg.GetMaxBatchSize()
	if d == nil || !(u > 0 && u <= 1) || d.GetMaxQueueDelayMicroseconds() == 0 || mbs <= 0 {
		return 0
	}
	for k := int32(1); k < mbs; k++ {
		if float32(k)/float32(mbs) >= u {
			return int(k)
		}
	}
	return int(mbs)
}

// control reads one control input.
func control(model, input string, c *pb.ModelSequenceBatching_Control) (sequence.Control, error) {
	k := c.GetKind()
	out := sequence.Control{Input: input, Kind: sequence.Kind(k)}
	i32, f32, b := c.GetInt32FalseTrue(), c.GetFp32FalseTrue(), c.GetBoolFalseTrue()
	given := 0
	for _, n := range []int{len(i32), len(f32), len(b)} {
		if n > 0 {
			given++
		}
	}
	if k == pb.ModelSequenceBatching_Control_CONTROL_SEQUENCE_CORRID {
		if given > 0 {
			return out, fmt.Errorf("sequence batching must not specify either 'int32_false_true', 'fp32_false_true' or 'bool_false_true' for %s for %s", k, model)
		}
		switch dt := c.GetDataType(); dt {
		case pb.DataType_TYPE_UINT64, pb.DataType_TYPE_INT64, pb.DataType_TYPE_UINT32, pb.DataType_TYPE_INT32, pb.DataType_TYPE_STRING:
			out.DType = dtypeOf(dt)
		default:
			return out, fmt.Errorf("unexpected data type for control %s for %s. Allowed data types are TYPE_UINT64, TYPE_INT64, TYPE_UINT32, TYPE_INT32 and TYPE_STRING", k, model)
		}
		return out, nil
	}
	if c.GetDataType() != pb.DataType_TYPE_INVALID {
		return out, fmt.Errorf("control %s of %s sets data_type, which only CONTROL_SEQUENCE_CORRID takes; the values' field (int32_false_true, fp32_false_true or bool_false_true) gives the datatype", k, model)
	}
	switch {
	case given == 0:
		return out, fmt.Errorf("sequence batching must specify either 'int32_false_true', 'fp32_false_true' or 'bool_false_true' for %s for %s", k, model)
	case given > 1:
		return out, fmt.Errorf("sequence batching specifies more than one from 'int32_false_true', 'fp32_false_true' and 'bool_false_true' for %s for %s", k, model)
	case len(i32) > 0:
		if len(i32) != 2 {
			return out, fmt.Errorf("sequence batching control 'int32_false_true' must have exactly 2 entries for %s for %s", k, model)
		}
		out.DType, out.False, out.True = engine.Int32, float64(i32[0]), float64(i32[1])
	case len(f32) > 0:
		if len(f32) != 2 {
			return out, fmt.Errorf("sequence batching control 'fp32_false_true' must have exactly 2 entries for %s for %s", k, model)
		}
		out.DType, out.False, out.True = engine.Float32, float64(f32[0]), float64(f32[1])
	default:
		if len(b) != 2 {
			return out, fmt.Errorf("sequence batching control 'bool_false_true' must have exactly 2 entries for %s for %s", k, model)
		}
		out.DType = engine.Bool
		if b[0] {
			out.False = 1
		}
		if b[1] {
			out.True = 1
		}
	}
	return out, nil
}

// dtypeOf maps a configuration's datatype to fw's.
func dtypeOf(dt pb.DataType) engine.DType {
	return serving.ParseConfigDataType(dt.String())
}

// state reads one implicit state and its initial value.
func state(dir string, st *pb.ModelSequenceBatching_State) (sequence.State, error) {
	in, outName := st.GetInputName(), st.GetOutputName()
	s := sequence.State{Input: in, Output: outName, Dims: st.GetDims(), Growable: st.GetUseGrowableMemory()}
	if in == "" || outName == "" {
		return s, fmt.Errorf("sequence_batching state needs input_name and output_name")
	}
	if s.DType = dtypeOf(st.GetDataType()); s.DType == engine.Invalid {
		return s, fmt.Errorf("sequence_batching state %q: data_type %s is not one fw keeps as implicit state", in, st.GetDataType())
	}
	if len(s.Dims) == 0 || len(s.Dims) > maxDims {
		return s, fmt.Errorf("sequence_batching state %q: dims must list 1 to %d dimensions", in, maxDims)
	}
	for _, d := range s.Dims {
		if d == 0 || d < -1 {
			return s, fmt.Errorf("sequence_batching state %q: dim %d; use a positive size or -1", in, d)
		}
	}
	inits := st.GetInitialState()
	if len(inits) > 1 {
		return s, fmt.Errorf("initial_state field for state input '%s' must contain exactly one or zero element. Found '%d' elements. (give one initial_state per state)", in, len(inits))
	}
	if len(inits) == 0 {
		// Triton sends uninitialised data, 1 for each variable dim; fw zeros.
		for _, d := range s.Dims {
			s.InitialDims = append(s.InitialDims, max(d, 1))
		}
		return s, nil
	}
	init := inits[0]
	if init.GetDataType() != st.GetDataType() {
		return s, fmt.Errorf("sequence_batching state %q: initial_state data_type %s differs from the state's %s", in, init.GetDataType(), st.GetDataType())
	}
	s.InitialDims = init.GetDims()
	ok := len(s.InitialDims) == len(s.Dims)
	for i := 0; ok && i < len(s.Dims); i++ {
		d := s.InitialDims[i]
		ok = d > 0 && (s.Dims[i] < 0 || s.Dims[i] == d)
	}
	if !ok {
		return s, fmt.Errorf("sequence_batching state %q: initial_state dims %s must be fixed sizes that fit the state's dims %s", in, serving.ShapeString(s.InitialDims), serving.ShapeString(s.Dims))
	}
	size := engine.NumElements(s.InitialDims) * int64(s.DType.Size())
	if s.DType == engine.String {
		size = engine.NumElements(s.InitialDims) * engine.StringHeader // zero_data: empty strings
	}
	if size > maxInitialStateBytes {
		return s, fmt.Errorf("sequence_batching state %q: the initial state is %d bytes; at most %d", in, size, maxInitialStateBytes)
	}
	switch {
	case init.GetDataFile() != "" && s.DType == engine.String:
		return s, fmt.Errorf("sequence_batching state %q: a TYPE_STRING initial_state takes zero_data (empty strings), not a data_file", in)
	case init.GetDataFile() != "":
		name := init.GetDataFile()
		if !filepath.IsLocal(name) {
			return s, fmt.Errorf("sequence_batching state %q: initial_state data_file %q must name a file inside the model's initial_state directory", in, name)
		}
		p := filepath.Join(dir, "initial_state", name)
		fi, err := os.Stat(p)
		if err != nil {
			return s, fmt.Errorf("sequence_batching state %q: initial_state data_file: %w", in, err)
		}
		if fi.Size() != size {
			return s, fmt.Errorf("sequence_batching state %q: initial_state data_file %s holds %d bytes; dims %s of %s need %d",
				in, p, fi.Size(), serving.ShapeString(s.InitialDims), st.GetDataType(), size)
		}
		if s.Initial, err = os.ReadFile(p); err != nil {
			return s, err
		}
	case init.GetZeroData():
	default:
		return s, fmt.Errorf("sequence_batching state %q: initial_state must set zero_data: true or data_file", in)
	}
	return s, nil
}

// iterativeOnly reports a sequence_batching that asks for Triton's
// iterative scheduling alone (iterative_sequence, no controls, states or
// strategy): each request is its own sequence, which a Python model may
// reschedule (set_release_flags). fw serves it without a sequence batcher.
func iterativeOnly(cfg *pb.ModelConfig) bool {
	sb := cfg.GetSequenceBatching()
	return sb.GetIterativeSequence() && len(sb.GetControlInput()) == 0 && len(sb.GetState()) == 0 &&
		sb.GetDirect() == nil && sb.GetOldest() == nil
}

// sequenceJSON renders sequence_batching as Triton's configuration
// extension reports it: as configured, with the defaults Triton fills in
// (the idle time, the strategy, oldest's preferred batch size).
func sequenceJSON(cfg *pb.ModelConfig, sc *sequence.Config) map[string]any {
	sb := cfg.GetSequenceBatching()
	out := map[string]any{"max_sequence_idle_microseconds": sc.MaxIdle.Microseconds(), "iterative_sequence": false}
	if o := sb.GetOldest(); o != nil {
		preferred := []int64{}
		for _, p := range o.GetPreferredBatchSize() {
			preferred = append(preferred, int64(p))
		}
		if len(preferred) == 0 && cfg.GetMaxBatchSize() > 0 {
			preferred = []int64{int64(cfg.GetMaxBatchSize())}
		}
		out["oldest"] = map[string]any{"max_candidate_sequences": o.GetMaxCandidateSequences(), "preferred_batch_size": preferred,
			"max_queue_delay_microseconds": o.GetMaxQueueDelayMicroseconds(), "preserve_ordering": false}
	} else {
		out["direct"] = map[string]any{"max_queue_delay_microseconds": sb.GetDirect().GetMaxQueueDelayMicroseconds(), "minimum_slot_utilization": sb.GetDirect().GetMinimumSlotUtilization()}
	}
	controls := []any{}
	for _, ci := range sb.GetControlInput() {
		var cs []any
		for _, c := range ci.GetControl() {
			cs = append(cs, map[string]any{"kind": c.GetKind().String(), "int32_false_true": orEmpty(c.GetInt32FalseTrue()),
				"fp32_false_true": orEmpty(c.GetFp32FalseTrue()), "bool_false_true": orEmpty(c.GetBoolFalseTrue()), "data_type": c.GetDataType().String()})
		}
		controls = append(controls, map[string]any{"name": ci.GetName(), "control": cs})
	}
	out["control_input"] = controls
	states := []any{}
	for _, st := range sb.GetState() {
		inits := []any{}
		for _, init := range st.GetInitialState() {
			m := map[string]any{"data_type": init.GetDataType().String(), "dims": orEmpty(init.GetDims()), "name": init.GetName()}
			if f := init.GetDataFile(); f != "" {
				m["data_file"] = f
			} else {
				m["zero_data"] = init.GetZeroData()
			}
			inits = append(inits, m)
		}
		states = append(states, map[string]any{"input_name": st.GetInputName(), "output_name": st.GetOutputName(),
			"data_type": st.GetDataType().String(), "dims": orEmpty(st.GetDims()), "initial_state": inits,
			"use_same_buffer_for_input_output": st.GetUseSameBufferForInputOutput(), "use_growable_memory": st.GetUseGrowableMemory()})
	}
	out["state"] = states
	return out
}

func orEmpty[T any](v []T) []T {
	if v == nil {
		return []T{}
	}
	return v
}
