package telemetry

import (
	"net"
	"net/netip"
	"strconv"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
)

// HTTPRequest is what an HTTP server span says of its request, in
// OpenTelemetry's HTTP conventions.
type HTTPRequest struct {
	Method    string // GET, POST, ...; "_OTHER" for a method outside the known set
	Path      string
	Route     string // the route template ("/v2/models/{model}/infer"); "" for none
	Status    int
	Remote    net.Addr
	UserAgent []byte
	BodySize  int // the request's Content-Length; -1 when unknown (left out)
	// ErrorMessage, for a 5xx answer, is read lazily from its body.
	ErrorMessage func() string
}

// EndHTTP ends s as the server span of request r: named "METHOD route",
// its attributes, an error when it was answered 5xx.
func (s *Span) EndHTTP(r HTTPRequest) {
	if s == nil {
		return
	}
	name := r.Method
	if r.Route != "" {
		name += " " + r.Route
	}
	attrs := make([]attribute.KeyValue, 0, 8+ModelAttrs) // room for End's
	attrs = append(attrs,
		attribute.String("http.request.method", r.Method),
		attribute.String("url.path", r.Path),
		attribute.Int("http.response.status_code", r.Status),
	)
	if r.BodySize >= 0 {
		attrs = append(attrs, attribute.Int("http.request.body.size", r.BodySize))
	}
	if r.Route != "" {
		attrs = append(attrs, attribute.String("http.route", r.Route))
	}
	if ip, ok := r.Remote.(*net.TCPAddr); ok {
		if a, ok := netip.AddrFromSlice(ip.IP); ok {
			attrs = append(attrs, attribute.String("client.address", a.Unmap().String()))
		}
	}
	if len(r.UserAgent) > 0 {
		attrs = append(attrs, attribute.String("user_agent.original", string(r.UserAgent)))
	}
	failed, message := r.Status >= 500, ""
	if failed {
		attrs = append(attrs, attribute.String("error.type", strconv.Itoa(r.Status)))
		if r.ErrorMessage != nil {
			message = r.ErrorMessage()
		}
	}
	s.End(name, trace.SpanKindServer, attrs, time.Now(), failed, message)
}

// MethodName is m as a constant string for the common methods (no
// allocation), else OpenTelemetry's "_OTHER".
func MethodName(m []byte) string {
	switch string(m) {
	case "GET":
		return "GET"
	case "POST":
		return "POST"
	case "HEAD":
		return "HEAD"
	case "PUT":
		return "PUT"
	case "PATCH":
		return "PATCH"
	case "DELETE":
		return "DELETE"
	case "OPTIONS":
		return "OPTIONS"
	}
	return "_OTHER"
}
