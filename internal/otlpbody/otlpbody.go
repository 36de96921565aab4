// Package otlpbody reads the body of an OTLP/HTTP trace export
// (ExportTraceServiceRequest) as the dashboard's two /v1/traces receivers
// take it, fw's request traces and MLflow's spans: protobuf or JSON, gzip
// or not, the expanded size bounded; and writes the answer in the
// request's format. Each receiver writes refusals in its own error shape.
package otlpbody

import (
	"bytes"
	"compress/gzip"
	"fmt"
	"io"
	"strings"

	collpb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
)

// Format reads a request's Content-Type: JSON (application/json) or
// protobuf (application/x-protobuf); ok is false for anything else, and
// media is the type named, for the refusal.
func Format(contentType string) (isJSON, ok bool, media string) {
	media = strings.ToLower(strings.TrimSpace(strings.Split(contentType, ";")[0]))
	switch media {
	case "application/json":
		return true, true, media
	case "application/x-protobuf":
		return false, true, media
	}
	return false, false, media
}

// Error is a refused body: the HTTP status to answer and why.
type Error struct {
	Status int
	Msg    string
}

func (e *Error) Error() string { return e.Msg }

// Read decodes a body: Content-Encoding "", "identity" or "gzip" (what a
// gzip body expands to is read up to limit bytes, so a small bomb is
// refused, not held), then protobuf or JSON.
func Read(body []byte, isJSON bool, encoding string, limit int64) (*collpb.ExportTraceServiceRequest, *Error) {
	switch enc := strings.ToLower(encoding); enc {
	case "", "identity":
	case "gzip":
		zr, err := gzip.NewReader(bytes.NewReader(body))
		if err != nil {
			return nil, &Error{400, "the gzip body is corrupt: " + err.Error()}
		}
		b, err := io.ReadAll(io.LimitReader(zr, limit+1))
		if err != nil {
			return nil, &Error{400, "the gzip body is corrupt: " + err.Error()}
		}
		if int64(len(b)) > limit {
			return nil, &Error{413, fmt.Sprintf("the body expands to more than %d bytes; send smaller batches (OTEL_BSP_MAX_EXPORT_BATCH_SIZE)", limit)}
		}
		body = b
	default:
		return nil, &Error{415, fmt.Sprintf("Content-Encoding %q: send gzip or none", enc)}
	}
	if isJSON {
		req, err := DecodeJSON(body)
		if err != nil {
			return nil, &Error{400, err.Error()}
		}
		return req, nil
	}
	req := &collpb.ExportTraceServiceRequest{}
	if err := proto.Unmarshal(body, req); err != nil {
		return nil, &Error{400, "the body is not an OTLP ExportTraceServiceRequest: " + err.Error()}
	}
	return req, nil
}

// Answer is resp as the body of the answer, in the request's format, and
// its Content-Type.
func Answer(resp *collpb.ExportTraceServiceResponse, isJSON bool) ([]byte, string) {
	if isJSON {
		b, _ := protojson.Marshal(resp)
		return b, "application/json"
	}
	b, _ := proto.Marshal(resp)
	return b, "application/x-protobuf"
}
