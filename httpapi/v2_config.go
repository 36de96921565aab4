package httpapi

// Triton's model configuration and statistics extensions over HTTP:
// GET /v2/models/{m}/config and /stats, GET /v2/models/stats. Field names
// and JSON shapes are Triton's (perf_analyzer and tritonclient read them
// strictly): every statistic is present as a number, int64 dims as numbers.

import (
	"github.com/fw-serve/fw/serving"
	"github.com/valyala/fasthttp"
)

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
			"cache_hit": snap.CacheHit, "cache_miss": snap.CacheMiss,
		},
		"batch_stats":  batches,
		"memory_usage": []any{},
	}
}
