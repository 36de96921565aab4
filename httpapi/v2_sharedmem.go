package httpapi

// Triton's shared memory extensions over HTTP: system shared memory
// (/v2/systemsharedmemory/...: status, register, unregister; inputs and
// outputs name registered regions in their parameters) and CUDA shared
// memory (/v2/cudasharedmemory/...: its status answers, registering is
// refused with the reason on a server without CUDA IPC).

import (
	"encoding/json"
	"errors"
	"strings"

	"github.com/fw-serve/fw/sharedmem"
	"github.com/valyala/fasthttp"
)

// routeSharedMemory serves the paths under /v2/systemsharedmemory and
// /v2/cudasharedmemory; rest follows the prefix.
func (s *Server) routeSharedMemory(ctx *fasthttp.RequestCtx, cuda bool, rest string) string {
	// [/region/{name}]/(status|register|unregister)
	name, action := "", strings.TrimPrefix(rest, "/")
	if r, ok := strings.CutPrefix(rest, "/region/"); ok {
		i := strings.LastIndexByte(r, '/')
		if i <= 0 {
			v2NoRoute(ctx)
			return "v2"
		}
		name, action = r[:i], r[i+1:]
	}
	method := "POST"
	switch action {
	case "status":
		method = "GET"
	case "register":
		if name == "" {
			v2NoRoute(ctx)
			return "v2"
		}
	case "unregister":
	default:
		v2NoRoute(ctx)
		return "v2"
	}
	if !s.allow(ctx, method) || !s.authorized(ctx) {
		return "v2"
	}
	if len(name) > 255 {
		writeError(ctx, newError(400, CodeBadRequest, "a shared memory region's name is at most 255 bytes", nil))
		return "v2"
	}
	if cuda {
		if action != "status" && s.cfg.SharedMemory != nil && !s.cfg.SharedMemory.ClientsAllowed() {
			writeError(ctx, newError(501, CodeNotImplemented, sharedmem.DisabledMessage, nil))
			return "v2"
		}
		s.cudaSharedMemory(ctx, name, action)
		return "v2"
	}
	reg := s.cfg.SharedMemory
	if reg == nil {
		writeError(ctx, newError(400, CodeBadRequest, "system shared memory is turned off on this server (fw serve --shared-memory none)", nil))
		return "v2"
	}
	switch action {
	case "status":
		st, err := reg.Status(name)
		if err != nil {
			writeError(ctx, sharedMemoryError(err))
			return "v2"
		}
		writeJSON(ctx, 200, st)
	case "register":
		body, ok := s.repositoryBody(ctx)
		if !ok {
			return "v2"
		}
		var req struct {
			Key      *string `json:"key"`
			Offset   uint64  `json:"offset"`
			ByteSize *uint64 `json:"byte_size"`
		}
		if err := json.Unmarshal(body, &req); err != nil || req.Key == nil || req.ByteSize == nil {
			msg := `the body must be {"key": "/shm_key", "offset": 0, "byte_size": N}`
			if err != nil {
				msg += ": " + err.Error()
			}
			writeError(ctx, newError(400, CodeBadRequest, msg, nil))
			return "v2"
		}
		if err := reg.Register(name, *req.Key, req.Offset, *req.ByteSize); err != nil {
			writeError(ctx, sharedMemoryError(err))
			return "v2"
		}
		writeJSON(ctx, 200, map[string]any{})
	case "unregister":
		if err := reg.Unregister(name); err != nil {
			writeError(ctx, sharedMemoryError(err))
			return "v2"
		}
		writeJSON(ctx, 200, map[string]any{})
	}
	return "v2"
}

// cudaSharedMemory answers the CUDA shared memory extension: no region is
// ever registered, since this server cannot open CUDA IPC handles.
func (s *Server) cudaSharedMemory(ctx *fasthttp.RequestCtx, name, action string) {
	switch action {
	case "status":
		if name != "" {
			writeError(ctx, newError(404, CodeNotFound, "Unable to find cuda shared memory region: '"+name+"'", map[string]any{"region": name}))
			return
		}
		writeJSON(ctx, 200, []any{})
	case "register":
		writeError(ctx, newError(400, CodeBadRequest, cudaRegisterRefusal(name)+"; use system shared memory (/v2/systemsharedmemory) or send the data in the request", map[string]any{"region": name}))
	case "unregister":
		writeJSON(ctx, 200, map[string]any{})
	}
}

// sharedMemoryError maps a sharedmem error to the API error shape, with
// Triton's statuses: 404 for a region not registered, 500 for a key that
// opens no object (Triton's INTERNAL), 501 when clients may not register
// regions (Triton's UNSUPPORTED), 400 otherwise.
func sharedMemoryError(err error) *APIError {
	switch {
	case errors.Is(err, sharedmem.ErrNotFound):
		return newError(404, CodeNotFound, sharedmem.Message(err), nil)
	case errors.Is(err, sharedmem.ErrOpen):
		return newError(500, CodeBadRequest, sharedmem.Message(err), nil)
	case errors.Is(err, sharedmem.ErrDisabled):
		return newError(501, CodeNotImplemented, sharedmem.Message(err), nil)
	}
	return newError(400, CodeBadRequest, sharedmem.Message(err), nil)
}

// v2Logging serves Triton's logging extension: GET /v2/logging reads the
// settings, POST changes them (serving.LogSettings says which can change).
func (s *Server) v2Logging(ctx *fasthttp.RequestCtx) {
	if s.cfg.Logging == nil {
		writeError(ctx, newError(404, CodeNotFound, "the logging extension is not served by this server", nil))
		return
	}
	if string(ctx.Method()) == "POST" {
		body, ok := s.repositoryBody(ctx)
		if !ok {
			return
		}
		var in map[string]any
		if err := json.Unmarshal(body, &in); err != nil || in == nil {
			if err == nil {
				err = errors.New("got null")
			}
			writeError(ctx, newError(400, CodeInvalidJSON, `the body must be a JSON object of settings such as {"log_verbose_level": 1}: `+err.Error(), nil))
			return
		}
		if err := s.cfg.Logging.Set(in); err != nil {
			writeError(ctx, newError(400, CodeBadRequest, err.Error(), nil))
			return
		}
	}
	writeJSON(ctx, 200, s.cfg.Logging.Get())
}

// cudaRegisterRefusal is the refusal to register a CUDA shared memory
// region: Triton's sentence for a CUDA IPC handle it cannot open, then why.
func cudaRegisterRefusal(name string) string {
	return "failed to register shared memory region '" + name + "': invalid args: CUDA shared memory is not available on this server (fw does not import CUDA IPC handles, with or without a GPU)"
}
