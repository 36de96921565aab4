package httpapi

// Triton's model configuration and statistics extensions over HTTP:
// GET /v2/models/{m}/config and /stats, GET /v2/models/stats. Field names
// and JSON shapes are Triton's (perf_analyzer and tritonclient read them
// strictly): every statistic is present as a number, int64 dims as numbers.

import (
	"github.com/fw-serve/fw/serving"
	"github.com/valyala/fasthttp"
)

// v2ConfigJSON renders a model configuration as Triton's JSON.
func v2ConfigJSON(c serving.ModelConfig) map[string]any {
	tensors := func(ts []serving.TensorConfig, input bool) []map[string]any {
		out := make([]map[string]any, len(ts))
		for i, t := range ts {
			m := map[string]any{"name": t.Name, "data_type": t.DataType, "dims": t.Dims, "is_shape_tensor": false}
			if t.Reshape != nil {
				m["reshape"] = map[string]any{"shape": t.Reshape}
			}
			if input {
				format := t.Format
				if format == "" {
					format = "FORMAT_NONE"
				}
				m["format"], m["allow_ragged_batch"], m["optional"] = format, false, false
			} else {
				m["label_filename"] = t.LabelFilename
			}
			out[i] = m
		}
		return out
	}
	kind, gpus := c.InstanceKind, c.GPUs
	if kind == "" {
		kind = "KIND_CPU"
	}
	if gpus == nil {
		gpus = []int{}
	}
	preferred := c.PreferredBatchSizes
	if preferred == nil {
		preferred = []int64{}
	}
	policy := c.VersionPolicy
	if policy == nil {
		policy = map[string]any{"latest": map[string]any{"num_versions": 1}}
	}
	params := map[string]any{}
	for k, v := range c.Parameters {
		params[k] = map[string]any{"string_value": v}
	}
	out := map[string]any{
		"name":                   c.Name,
		"platform":               c.Platform,
		"backend":                c.Backend,
		"version_policy":         policy,
		"max_batch_size":         c.MaxBatchSize,
		"input":                  tensors(c.Inputs, true),
		"output":                 tensors(c.Outputs, false),
		"instance_group":         []map[string]any{{"name": c.Name, "kind": kind, "count": c.Instances, "gpus": gpus}},
		"default_model_filename": c.DefaultModelFilename,
		"parameters":             params,
	}
	if c.Ensemble != nil {
		steps := make([]map[string]any, len(c.Ensemble))
		for i, st := range c.Ensemble {
			steps[i] = map[string]any{"model_name": st.Model, "model_version": st.Version, "input_map": st.InputMap, "output_map": st.OutputMap, "model_namespace": ""}
		}
		out["ensemble_scheduling"] = map[string]any{"step": steps}
		out["instance_group"] = []map[string]any{} // no engine instances of its own
	} else if c.SequenceBatching != nil {
		out["sequence_batching"] = c.SequenceBatching
	} else if c.MaxBatchSize > 0 { // max_batch_size 0 turns dynamic batching off, as in Triton
		out["dynamic_batching"] = map[string]any{
			"preferred_batch_size": preferred, "max_queue_delay_microseconds": c.MaxQueueDelay, "preserve_ordering": false,
		}
	}
	return out
}

// v2Stats writes the statistics of the instances' models, Triton's shape
// (serving's Duration and BatchStat carry Triton's JSON names).
func (s *Server) v2Stats(ctx *fasthttp.RequestCtx, insts ...*serving.Instance) {
	stats := make([]any, len(insts))
	for i, inst := range insts {
		stats[i] = v2ModelStats(inst)
	}
	writeJSON(ctx, 200, map[string]any{"model_stats": stats})
}

// v2ModelStats is one model version's entry of model_stats.
func v2ModelStats(inst *serving.Instance) map[string]any {
	snap := inst.Stats.Snapshot()
	batches := snap.Batches
	if batches == nil {
		batches = []serving.BatchStat{}
	}
	return map[string]any{
		"name":            inst.Name(),
		"version":         inst.Version(),
		"last_inference":  snap.LastInference,
		"inference_count": snap.InferenceCount,
		"execution_count": snap.ExecutionCount,
		"inference_stats": map[string]serving.Duration{
			"success": snap.Success, "fail": snap.Fail, "queue": snap.Queue,
			"compute_input": snap.ComputeInput, "compute_infer": snap.ComputeInfer, "compute_output": snap.ComputeOutput,
			"cache_hit": {}, "cache_miss": {},
		},
		"batch_stats":  batches,
		"memory_usage": []any{},
	}
}
