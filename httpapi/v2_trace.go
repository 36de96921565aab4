package httpapi

import (
	"encoding/json"
	"errors"
	"fmt"

	"github.com/fw-serve/fw/reqtrace"
	"github.com/valyala/fasthttp"
)

// v2Trace serves GET and POST /v2[/models/{m}]/trace/setting, Triton's
// trace extension: the settings of model ("" for the server's), changed by
// a POST's JSON object of settings, each a string, an array of strings
// (trace_level) or null (cleared: the model follows the server's).
func (s *Server) v2Trace(ctx *fasthttp.RequestCtx, model string) {
	if s.cfg.Tracer == nil {
		writeError(ctx, newError(400, CodeBadRequest, "the server does not support tracing (this fw serve was started without a tracer)", nil))
		return
	}
	if model != "" {
		if err := s.models.Ready(model, ""); err != nil {
			writeError(ctx, modelError(err))
			return
		}
	}
	if string(ctx.Method()) == "GET" {
		writeJSON(ctx, 200, traceJSON(s.cfg.Tracer.Get(model)))
		return
	}
	body, ok := s.repositoryBody(ctx)
	if !ok {
		return
	}
	u := reqtrace.Update{}
	if len(body) > 0 {
		var in map[string]json.RawMessage
		err := json.Unmarshal(body, &in)
		if err == nil && in == nil {
			err = errors.New("got null")
		}
		if err != nil {
			writeError(ctx, newError(400, CodeInvalidJSON, `the body must be a JSON object of trace settings such as {"trace_level": ["TIMESTAMPS"], "trace_rate": "100"}: `+err.Error(), nil))
			return
		}
		for name, raw := range in {
			vals, err := traceValues(raw)
			if err != nil {
				writeError(ctx, newError(400, CodeBadRequest, fmt.Sprintf("trace setting %q: %v", name, err), nil))
				return
			}
			u[name] = vals
		}
	}
	out, err := s.cfg.Tracer.Set(model, u)
	if err != nil {
		writeError(ctx, newError(400, CodeBadRequest, err.Error(), nil))
		return
	}
	writeJSON(ctx, 200, traceJSON(out))
}

// traceValues reads one setting's JSON value: null (none), a string (one)
// or an array of strings, as Triton's clients send them.
func traceValues(raw json.RawMessage) ([]string, error) {
	if string(raw) == "null" {
		return nil, nil
	}
	var one string
	if json.Unmarshal(raw, &one) == nil {
		return []string{one}, nil
	}
	var many []string
	if json.Unmarshal(raw, &many) == nil {
		if len(many) == 0 { // not null: an empty list clears nothing
			return nil, errors.New("an empty array: give at least one value, or null to clear the setting")
		}
		return many, nil
	}
	return nil, errors.New("attempt to access JSON non-string as string: give a string, an array of strings or null")
}

// traceJSON is the settings as Triton answers them: trace_level an array,
// the others strings.
func traceJSON(m map[string][]string) map[string]any {
	out := make(map[string]any, len(m))
	for k, v := range m {
		if k == "trace_level" {
			out[k] = v
		} else if len(v) > 0 {
			out[k] = v[0]
		}
	}
	return out
}
