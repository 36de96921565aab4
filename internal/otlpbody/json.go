package otlpbody

import (
	"bytes"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"

	collpb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/protobuf/encoding/protojson"
)

// maxDepth bounds the nesting Decode walks (an attribute's value may nest
// arrays and maps): deeper bodies are refused, not recursed into.
const maxDepth = 64

// DecodeJSON reads OTLP/HTTP's JSON encoding of a trace export:
// protobuf's JSON mapping, except that trace and span IDs are hex strings,
// not base64 (the OTLP specification's "JSON Protobuf Encoding"), and
// enums may be integers. Unknown fields are ignored, as the specification
// asks of receivers.
func DecodeJSON(body []byte) (*collpb.ExportTraceServiceRequest, error) {
	var doc any
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber() // int64 times and values as written, not through float64
	if err := dec.Decode(&doc); err != nil {
		return nil, fmt.Errorf("the body is not JSON: %w", err)
	}
	if dec.More() {
		return nil, fmt.Errorf("the body is not JSON: more than one value")
	}
	if err := fixIDs(doc, "", 0); err != nil {
		return nil, err
	}
	fixed, err := json.Marshal(doc)
	if err != nil {
		return nil, err
	}
	var req collpb.ExportTraceServiceRequest
	if err := (protojson.UnmarshalOptions{DiscardUnknown: true}).Unmarshal(fixed, &req); err != nil {
		return nil, fmt.Errorf("the body is not an OTLP ExportTraceServiceRequest: %w", err)
	}
	return &req, nil
}

// idFields are the fields that hold trace or span IDs, in either of
// protobuf JSON's spellings.
var idFields = map[string]bool{
	"traceId": true, "trace_id": true, "spanId": true, "span_id": true,
	"parentSpanId": true, "parent_span_id": true,
}

// fixIDs rewrites the hex IDs of spans and links in place as base64, what
// protobuf's JSON mapping reads for bytes.
func fixIDs(v any, key string, depth int) error {
	if depth > maxDepth {
		return fmt.Errorf("the body nests deeper than %d levels", maxDepth)
	}
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			if s, ok := e.(string); ok && idFields[k] {
				if s == "" {
					continue
				}
				b, err := hex.DecodeString(s)
				if err != nil {
					return fmt.Errorf("%s %q is not hex: OTLP/JSON writes IDs as hex strings", k, s)
				}
				x[k] = base64.StdEncoding.EncodeToString(b)
				continue
			}
			if err := fixIDs(e, k, depth+1); err != nil {
				return err
			}
		}
	case []any:
		for _, e := range x {
			if err := fixIDs(e, key, depth+1); err != nil {
				return err
			}
		}
	}
	return nil
}
