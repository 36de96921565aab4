package httpapi

import (
	"path/filepath"
	"time"

	"github.com/fw-serve/fw/engine"
	"github.com/fw-serve/fw/internal/apierror"
	"github.com/fw-serve/fw/serving"
	"github.com/valyala/fasthttp"
)

// writeJSON encodes v with encoding/json (for small, cold responses).
func writeJSON(ctx *fasthttp.RequestCtx, status int, v any) { apierror.WriteJSON(ctx, status, v) }

func modelRef(inst *serving.Instance) map[string]any {
	return map[string]any{"name": inst.Name(), "version": inst.Version(), "format": string(inst.Model.Format)}
}

// handleReady serves GET /health and /health/ready: 200 once the model is
// loaded and warmed up, else 503 with the reason.
func (s *Server) handleReady(ctx *fasthttp.RequestCtx) {
	if st, reason := s.State(); st == serving.StateDraining {
		e := newError(503, CodeNotReady, "the server is not ready: "+reason, map[string]any{"status": st.String()})
		e.RetryAfter = 1
		writeError(ctx, e)
		return
	}
	if !s.serving(ctx) {
		return
	}
	inst, err := s.models.Default()
	if err != nil {
		if me, ok := serving.AsModelError(err); ok && (me.Kind == serving.ModelAmbiguous || me.Kind == serving.ModelUnknown) {
			// Several models, or none loaded yet in a repository: the server
			// is ready when the ones it must serve are.
			writeJSON(ctx, 200, map[string]any{"status": "ok", "models": len(s.models.Loaded()), "uptime_s": time.Since(s.started).Seconds()})
			return
		}
		writeError(ctx, modelError(err))
		return
	}
	writeJSON(ctx, 200, map[string]any{
		"status":   "ok",
		"model":    modelRef(inst),
		"device":   string(inst.Model.Device),
		"uptime_s": time.Since(s.started).Seconds(),
		"queue":    inst.Batcher.QueueDepth(),
	})
}

// SpecView is a tensor spec as the API shows it.
type SpecView struct {
	Name  string  `json:"name"`
	DType string  `json:"dtype"`
	Shape []int64 `json:"shape"`
}

func specViews(specs []engine.TensorSpec) []SpecView {
	out := make([]SpecView, len(specs))
	for i, s := range specs {
		dt := s.DType.String()
		if s.DType == engine.Invalid {
			dt = "unknown"
		}
		shape := s.Shape
		if shape == nil {
			shape = []int64{}
		}
		out[i] = SpecView{Name: s.Name, DType: dt, Shape: shape}
	}
	return out
}

// handleModel serves GET /model: the metadata of the model the query's
// `model` (and `version`) names, or of the one model served.
func (s *Server) handleModel(ctx *fasthttp.RequestCtx) {
	inst := s.ready(ctx)
	if inst == nil {
		return
	}
	m := inst.Model
	cfg := inst.Batcher.Config()
	if cfg.Unbatched {
		cfg.MaxBatchRows = 0 // no batch axis: each request is one engine call, as the V2 config says
	}
	resp := map[string]any{
		"name":         inst.Name(),
		"version":      inst.Version(),
		"format":       string(m.Format),
		"device":       string(m.Device),
		"file":         filepath.Base(m.Path),
		"size_bytes":   m.Size,
		"load_time_ms": float64(m.LoadTime.Microseconds()) / 1000,
		"threads":      m.Threads(),
		"inputs":       specViews(inst.Inputs()),
		"outputs":      specViews(inst.Outputs()),
		"labels":       m.Labels(),
		"batching": map[string]any{
			"max_batch_size": cfg.MaxBatchRows, "max_delay_ms": float64(cfg.MaxDelay.Microseconds()) / 1000,
			"instances": cfg.Instances, "max_queue": cfg.MaxQueue,
		},
	}
	if m.Meta != nil {
		resp["metadata"] = m.Meta.Raw()
		if m.Meta.Preprocessing != nil {
			resp["preprocessing"] = m.Meta.Preprocessing
		}
		if m.Meta.Task != "" {
			resp["task"] = m.Meta.Task
		}
	}
	writeJSON(ctx, 200, resp)
}
