package httpapi

import (
	"net"
	"net/netip"
	"strconv"
	"strings"
	"time"

	"github.com/valyala/fasthttp"
	"github.com/valyala/fastjson"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/fw-serve/fw/telemetry"
)

// spanKey is the RequestCtx user value holding a traced request's span.
type spanKey struct{}

// endSpan sends a traced request's spans: its server span, named by its
// method and route template (OpenTelemetry's HTTP conventions), an error
// when it was answered 5xx with the error's message.
func (s *Server) endSpan(ctx *fasthttp.RequestCtx, span *telemetry.Span, ep string, code int) {
	method := methodName(ctx.Method())
	path := ctx.Path()
	route := fixedRoutes[ep]
	if route == "" && ep != "other" {
		route = routeTemplate(string(path))
	}
	name := method
	if route != "" {
		name = method + " " + route
	}
	attrs := make([]attribute.KeyValue, 0, 8+telemetry.ModelAttrs) // room for End's
	attrs = append(attrs,
		attribute.String("http.request.method", method),
		attribute.String("url.path", string(path)),
		attribute.Int("http.response.status_code", code),
		attribute.Int("http.request.body.size", ctx.Request.Header.ContentLength()),
	)
	if route != "" {
		attrs = append(attrs, attribute.String("http.route", route))
	}
	if ip, ok := ctx.RemoteAddr().(*net.TCPAddr); ok {
		if a, ok := netip.AddrFromSlice(ip.IP); ok {
			attrs = append(attrs, attribute.String("client.address", a.Unmap().String()))
		}
	}
	if ua := ctx.Request.Header.UserAgent(); len(ua) > 0 {
		attrs = append(attrs, attribute.String("user_agent.original", string(ua)))
	}
	failed, message := code >= 500, ""
	if failed {
		attrs = append(attrs, attribute.String("error.type", strconv.Itoa(code)))
		if !ctx.Response.IsBodyStream() {
			message = errorMessage(ctx.Response.Body())
		}
	}
	span.End(name, trace.SpanKindServer, attrs, time.Now(), failed, message)
}

// fixedRoutes are the route templates of the route labels (Handler's ep)
// that are one path each.
var fixedRoutes = map[string]string{
	"predict": "/predict", "predict_image": "/predict/image", "predict_batch": "/predict/batch",
	"model": "/model", "metrics": "/metrics",
}

// methodName is m as a constant string for the common methods (no
// allocation), else a copy.
func methodName(m []byte) string {
	switch string(m) {
	case "GET":
		return "GET"
	case "POST":
		return "POST"
	case "HEAD":
		return "HEAD"
	case "PUT":
		return "PUT"
	case "DELETE":
		return "DELETE"
	}
	return "_OTHER" // OpenTelemetry's name for a method outside the known set
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
