package httpapi

// Triton's model repository extension over HTTP: POST /v2/repository/index,
// /v2/repository/models/{m}/load and /unload (Triton's
// docs/protocol/extension_model_repository.md). Errors take V2's shape, with
// Triton's sentence first ("failed to load '...'"), as its clients match it.

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"

	"github.com/fw-serve/fw/serving"
	"github.com/valyala/fasthttp"
)

// maxRepositoryBody bounds a repository request's body: a load's config
// override is a model configuration, kilobytes at most.
const maxRepositoryBody = 1 << 20

// routeRepository serves the paths under /v2/repository (rest is what
// follows it).
func (s *Server) routeRepository(ctx *fasthttp.RequestCtx, rest string) string {
	if rest == "/index" {
		if s.allow(ctx, "POST") && s.authorized(ctx) {
			s.repositoryIndex(ctx)
		}
		return "v2"
	}
	tail, ok := strings.CutPrefix(rest, "/models/")
	name, action, ok2 := strings.Cut(tail, "/")
	if !ok || !ok2 || name == "" || (action != "load" && action != "unload") {
		v2NoRoute(ctx)
		return "v2"
	}
	if !s.allow(ctx, "POST") || !s.authorized(ctx) {
		return "v2"
	}
	body, ok := s.repositoryBody(ctx)
	if !ok {
		return "v2"
	}
	params, aerr := repositoryParams(body)
	if aerr == nil && action == "load" && isNull(params["config"]) {
		aerr = newError(400, CodeInvalidJSON, "the parameter config must be a model configuration (a JSON string or an object), not null", nil)
	}
	if aerr != nil {
		writeError(ctx, aerr)
		return "v2"
	}
	rctx, cancel := s.requestContext(ctx)
	defer cancel()
	var err error
	if action == "load" {
		var opts serving.LoadOptions
		if opts, err = loadOptions(name, params); err == nil {
			err = s.models.Load(rctx, name, opts)
		}
	} else {
		opts, aerr := unloadOptions(params)
		if aerr != nil {
			writeError(ctx, aerr)
			return "v2"
		}
		err = s.models.Unload(rctx, name, opts)
	}
	if err != nil {
		writeError(ctx, modelError(err))
		return "v2"
	}
	ctx.Response.Header.SetContentType("application/json")
	ctx.SetBodyString("{}")
	return "v2"
}

// repositoryParams reads a load or unload request's body: empty, or an
// object whose "parameters", when present, is an object. null is refused
// where the protocol has an object (the body, "parameters"), as Triton
// refuses it and as the document's schemas say.
func repositoryParams(body []byte) (map[string]json.RawMessage, *APIError) {
	if len(body) == 0 {
		return nil, nil
	}
	notObject := func(detail string) *APIError {
		return newError(400, CodeInvalidJSON, "the body is not a JSON object like {\"parameters\": {...}}: "+detail, nil)
	}
	var req map[string]json.RawMessage
	if err := json.Unmarshal(body, &req); err != nil {
		return nil, notObject(err.Error())
	}
	if req == nil {
		return nil, notObject("it is null")
	}
	raw, ok := req["parameters"]
	if !ok {
		return nil, nil
	}
	var params map[string]json.RawMessage
	if err := json.Unmarshal(raw, &params); err != nil || params == nil {
		return nil, notObject("\"parameters\" is not an object")
	}
	return params, nil
}

// isNull is whether a JSON value is null (false for an absent one).
func isNull(v json.RawMessage) bool { return string(bytes.TrimSpace(v)) == "null" }

// loadOptions reads a load request's parameters: "config", a model
// configuration in JSON given as a string (Triton's form) or an object.
// File overrides ("file:<path>") are refused: fw loads model files from the
// repository only.
func loadOptions(name string, params map[string]json.RawMessage) (serving.LoadOptions, error) {
	var opts serving.LoadOptions
	for k, v := range params {
		switch {
		case k == "config":
			var str string
			if err := json.Unmarshal(v, &str); err == nil {
				opts.Config = []byte(str)
			} else {
				opts.Config = v
			}
		case strings.HasPrefix(k, "file:"):
			return opts, serving.FileOverride(name, k)
		}
	}
	return opts, nil
}

// unloadOptions reads an unload request's parameters: "unload_dependents"
// (a boolean; tritonclient sends it on every unload).
func unloadOptions(params map[string]json.RawMessage) (serving.UnloadOptions, *APIError) {
	var opts serving.UnloadOptions
	if v, ok := params["unload_dependents"]; ok {
		if err := json.Unmarshal(v, &opts.Dependents); err != nil || isNull(v) {
			return opts, newError(400, CodeInvalidJSON, "the parameter unload_dependents must be true or false", nil)
		}
	}
	return opts, nil
}

// repositoryBody reads a repository request's body, bounded.
func (s *Server) repositoryBody(ctx *fasthttp.RequestCtx) ([]byte, bool) {
	return s.readBodyLimit(ctx, min(s.cfg.MaxBodyBytes, maxRepositoryBody))
}

// repositoryIndex serves POST /v2/repository/index: every model of the
// repository with its versions' states; {"ready": true} keeps the ready ones.
func (s *Server) repositoryIndex(ctx *fasthttp.RequestCtx) {
	body, ok := s.repositoryBody(ctx)
	if !ok {
		return
	}
	ready, aerr := indexReady(body)
	if aerr != nil {
		writeError(ctx, aerr)
		return
	}
	out := []serving.ModelStatus{}
	for _, m := range s.models.Index() {
		if !ready || m.State == serving.ModelReady {
			out = append(out, m)
		}
	}
	writeJSON(ctx, 200, out)
}

// indexReady reads an index request's body: {} or {"ready": BOOL}, its
// members read one by one with the scanner's depth bound. A "ready" that is
// not a boolean is refused as soon as its first byte shows it (Triton's
// sentence), without reading the value: an array nested a million deep is
// refused as quickly as [true].
func indexReady(body []byte) (bool, *APIError) {
	notObject := func(err error) *APIError {
		msg := `the body is not a JSON object like {"ready": true}`
		if err != nil {
			msg += ": " + err.Error()
		}
		return newError(400, CodeInvalidJSON, msg, nil)
	}
	if len(body) == 0 {
		return false, nil // no body: every model
	}
	i := skipWS(body, 0)
	if i == len(body) {
		return false, notObject(errors.New("the body holds only whitespace; send no body, or a JSON object"))
	}
	if body[i] != '{' {
		_, err := scanDoc(body)
		return false, notObject(err)
	}
	ready, seen := false, false
	i = skipWS(body, i+1)
	if i < len(body) && body[i] == '}' {
		i++
	} else {
		for {
			if i >= len(body) || body[i] != '"' {
				return false, notObject(&syntaxError{off: i, msg: "expected a string key"})
			}
			kend, err := scanString(body, i)
			if err != nil {
				return false, notObject(err)
			}
			key := jv(body[i:kend])
			i = skipWS(body, kend)
			if i >= len(body) || body[i] != ':' {
				return false, notObject(&syntaxError{off: i, msg: "expected ':' after an object key"})
			}
			i = skipWS(body, i+1)
			if keyIs(key, "ready") && !seen { // the first, as Triton reads it
				seen = true
				switch {
				case i < len(body) && body[i] == 't':
					ready = true
				case i < len(body) && body[i] == 'f':
				default:
					return false, newError(400, CodeBadRequest, "Invalid value for 'ready': expected a boolean (true lists only the ready versions, false or none every model)", nil)
				}
			}
			if i, err = scanValue(body, i, 1); err != nil {
				return false, notObject(err)
			}
			i = skipWS(body, i)
			if i < len(body) && body[i] == ',' {
				i = skipWS(body, i+1)
				continue
			}
			if i < len(body) && body[i] == '}' {
				i++
				break
			}
			return false, notObject(&syntaxError{off: i, msg: "expected ',' or '}' in an object"})
		}
	}
	if j := skipWS(body, i); j != len(body) {
		return false, notObject(&syntaxError{off: j, msg: "unexpected data after the JSON value"})
	}
	return ready, nil
}
