package httpapi

import (
	"strings"

	"github.com/valyala/fasthttp"
	"github.com/valyala/fastjson"

	"github.com/fw-serve/fw/telemetry"
)

// spanKey is the RequestCtx user value holding a traced request's span.
type spanKey struct{}

// endSpan sends a traced request's spans: its server span, named by its
// method and route template (OpenTelemetry's HTTP conventions), an error
// when it was answered 5xx with the error's message.
func (s *Server) endSpan(ctx *fasthttp.RequestCtx, span *telemetry.Span, ep string, code int) {
	path := string(ctx.Path())
	route := fixedRoutes[ep]
	if route == "" && ep != "other" {
		route = routeTemplate(path)
	}
	span.EndHTTP(telemetry.HTTPRequest{
		Method: telemetry.MethodName(ctx.Method()), Path: path, Route: route, Status: code, Remote: ctx.RemoteAddr(),
		UserAgent: ctx.Request.Header.UserAgent(), BodySize: ctx.Request.Header.ContentLength(),
		ErrorMessage: func() string {
			if ctx.Response.IsBodyStream() {
				return ""
			}
			return errorMessage(ctx.Response.Body())
		},
	})
}

// fixedRoutes are the route templates of the route labels (Handler's ep)
// that are one path each.
var fixedRoutes = map[string]string{
	"predict": "/predict", "predict_image": "/predict/image", "predict_batch": "/predict/batch",
	"model": "/model", "metrics": "/metrics",
}

// errorMessage is an error answer's message (fw's {"error": {"message"}} or
// the V2 protocol's {"error": "..."}), at most 512 bytes; "" when the body
// is neither.
func errorMessage(body []byte) string {
	v, err := fastjson.ParseBytes(body)
	if err != nil {
		return ""
	}
	e := v.Get("error")
	if e == nil {
		return ""
	}
	var m string
	if sb, err := e.StringBytes(); err == nil {
		m = string(sb)
	} else if mb := e.GetStringBytes("message"); mb != nil {
		m = string(mb)
	}
	if len(m) > 512 {
		m = m[:512]
	}
	return m
}

// routeTemplate is path with the names a client chooses (model, version,
// region) replaced by placeholders, so that span names stay few:
// /v2/models/{model}/versions/{version}/infer.
func routeTemplate(path string) string {
	parts := strings.Split(path, "/")
	for i := 1; i < len(parts); i++ {
		switch parts[i-1] {
		case "models":
			parts[i] = "{model}"
		case "versions":
			parts[i] = "{version}"
		case "region":
			parts[i] = "{region}"
		}
	}
	if strings.HasPrefix(path, "/docs/") {
		return "/docs/{asset}"
	}
	return strings.Join(parts, "/")
}
