package telemetry

import (
	"math"

	"go.opentelemetry.io/otel/attribute"
	"google.golang.org/protobuf/encoding/protowire"
)

// The OTLP trace protobuf (opentelemetry/proto/trace/v1/trace.proto and
// collector/trace/v1/trace_service.proto), written field by field: fw's
// spans are encoded straight from its own records into the bytes an OTLP
// receiver takes, with no message objects in between (the SDK's path costs
// several times more per span; see docs/benchmarks.md, tracing).
const (
	fRequestResourceSpans = 1 // ExportTraceServiceRequest.resource_spans

	fResourceSpansResource   = 1
	fResourceSpansScopeSpans = 2
	fResourceAttributes      = 1

	fScopeSpansScope = 1
	fScopeSpansSpans = 2
	fScopeName       = 1
	fScopeVersion    = 2

	fSpanTraceID      = 1
	fSpanSpanID       = 2
	fSpanTraceState   = 3
	fSpanParentSpanID = 4
	fSpanName         = 5
	fSpanKind         = 6
	fSpanStart        = 7
	fSpanEnd          = 8
	fSpanAttributes   = 9
	fSpanLinks        = 13
	fSpanStatus       = 15
	fSpanFlags        = 16

	fLinkTraceID    = 1
	fLinkSpanID     = 2
	fLinkTraceState = 3
	fLinkFlags      = 6

	fStatusMessage = 2
	fStatusCode    = 3

	fKeyValueKey   = 1
	fKeyValueValue = 2

	fAnyString = 1
	fAnyBool   = 2
	fAnyInt    = 3
	fAnyDouble = 4

	statusError = 2

	// Span.flags: the W3C trace flags in bits 0-7; bit 8 says bit 9 is
	// set, which says the parent is remote.
	flagsSampled      = 0x01
	flagsHasIsRemote  = 0x100
	flagsParentRemote = 0x200
)

// span is one span as the encoder takes it.
type span struct {
	traceID       [16]byte
	spanID        [8]byte
	parentID      [8]byte // zero: a root span
	parentRemote  bool
	traceState    string
	name          string
	kind          int32 // 1 internal, 2 server
	start, end    int64 // Unix nanoseconds
	attrs         []attribute.KeyValue
	links         []link
	failed        bool
	statusMessage string
}

// link is a span a span links to.
type link struct {
	traceID [16]byte
	spanID  [8]byte
}

// appendSpan appends sp as a Span message (the field's tag and length
// included) to b, using scratch for the message body; it returns both.
func appendSpan(b, scratch []byte, sp *span) ([]byte, []byte) {
	m := scratch[:0]
	m = protowire.AppendTag(m, fSpanTraceID, protowire.BytesType)
	m = protowire.AppendBytes(m, sp.traceID[:])
	m = protowire.AppendTag(m, fSpanSpanID, protowire.BytesType)
	m = protowire.AppendBytes(m, sp.spanID[:])
	if sp.traceState != "" {
		m = protowire.AppendTag(m, fSpanTraceState, protowire.BytesType)
		m = protowire.AppendString(m, sp.traceState)
	}
	if sp.parentID != ([8]byte{}) {
		m = protowire.AppendTag(m, fSpanParentSpanID, protowire.BytesType)
		m = protowire.AppendBytes(m, sp.parentID[:])
	}
	m = protowire.AppendTag(m, fSpanName, protowire.BytesType)
	m = protowire.AppendString(m, sp.name)
	m = protowire.AppendTag(m, fSpanKind, protowire.VarintType)
	m = protowire.AppendVarint(m, uint64(sp.kind))
	m = protowire.AppendTag(m, fSpanStart, protowire.Fixed64Type)
	m = protowire.AppendFixed64(m, uint64(sp.start))
	m = protowire.AppendTag(m, fSpanEnd, protowire.Fixed64Type)
	m = protowire.AppendFixed64(m, uint64(sp.end))
	for _, kv := range sp.attrs {
		m = appendKeyValue(m, fSpanAttributes, kv)
	}
	for _, l := range sp.links {
		m = protowire.AppendTag(m, fSpanLinks, protowire.BytesType)
		m = protowire.AppendVarint(m, uint64((1+1+16)+(1+1+8)+(1+4)))
		m = protowire.AppendTag(m, fLinkTraceID, protowire.BytesType)
		m = protowire.AppendBytes(m, l.traceID[:])
		m = protowire.AppendTag(m, fLinkSpanID, protowire.BytesType)
		m = protowire.AppendBytes(m, l.spanID[:])
		m = protowire.AppendTag(m, fLinkFlags, protowire.Fixed32Type)
		m = protowire.AppendFixed32(m, flagsSampled|flagsHasIsRemote)
	}
	if sp.failed {
		n := protowire.SizeTag(fStatusCode) + protowire.SizeVarint(statusError)
		if sp.statusMessage != "" {
			n += protowire.SizeTag(fStatusMessage) + protowire.SizeBytes(len(sp.statusMessage))
		}
		m = protowire.AppendTag(m, fSpanStatus, protowire.BytesType)
		m = protowire.AppendVarint(m, uint64(n))
		if sp.statusMessage != "" {
			m = protowire.AppendTag(m, fStatusMessage, protowire.BytesType)
			m = protowire.AppendString(m, sp.statusMessage)
		}
		m = protowire.AppendTag(m, fStatusCode, protowire.VarintType)
		m = protowire.AppendVarint(m, statusError)
	}
	flags := uint32(flagsSampled | flagsHasIsRemote)
	if sp.parentRemote {
		flags |= flagsParentRemote
	}
	m = protowire.AppendTag(m, fSpanFlags, protowire.Fixed32Type)
	m = protowire.AppendFixed32(m, flags)

	b = protowire.AppendTag(b, fScopeSpansSpans, protowire.BytesType)
	b = protowire.AppendBytes(b, m)
	return b, m
}

// appendKeyValue appends kv as field num (a KeyValue message). Types other
// than string, bool, int64 and float64 are written as their string form.
func appendKeyValue(b []byte, num protowire.Number, kv attribute.KeyValue) []byte {
	var any []byte
	var scratch [16]byte
	switch kv.Value.Type() {
	case attribute.BOOL:
		v := uint64(0)
		if kv.Value.AsBool() {
			v = 1
		}
		any = protowire.AppendVarint(protowire.AppendTag(scratch[:0], fAnyBool, protowire.VarintType), v)
	case attribute.INT64:
		any = protowire.AppendVarint(protowire.AppendTag(scratch[:0], fAnyInt, protowire.VarintType), uint64(kv.Value.AsInt64()))
	case attribute.FLOAT64:
		any = protowire.AppendFixed64(protowire.AppendTag(scratch[:0], fAnyDouble, protowire.Fixed64Type), math.Float64bits(kv.Value.AsFloat64()))
	}
	key := string(kv.Key)
	if any != nil {
		n := protowire.SizeTag(fKeyValueKey) + protowire.SizeBytes(len(key)) + protowire.SizeTag(fKeyValueValue) + protowire.SizeBytes(len(any))
		b = protowire.AppendTag(b, num, protowire.BytesType)
		b = protowire.AppendVarint(b, uint64(n))
		b = protowire.AppendTag(b, fKeyValueKey, protowire.BytesType)
		b = protowire.AppendString(b, key)
		b = protowire.AppendTag(b, fKeyValueValue, protowire.BytesType)
		return protowire.AppendBytes(b, any)
	}
	s := kv.Value.String()
	anyLen := protowire.SizeTag(fAnyString) + protowire.SizeBytes(len(s))
	n := protowire.SizeTag(fKeyValueKey) + protowire.SizeBytes(len(key)) + protowire.SizeTag(fKeyValueValue) + protowire.SizeBytes(anyLen)
	b = protowire.AppendTag(b, num, protowire.BytesType)
	b = protowire.AppendVarint(b, uint64(n))
	b = protowire.AppendTag(b, fKeyValueKey, protowire.BytesType)
	b = protowire.AppendString(b, key)
	b = protowire.AppendTag(b, fKeyValueValue, protowire.BytesType)
	b = protowire.AppendVarint(b, uint64(anyLen))
	b = protowire.AppendTag(b, fAnyString, protowire.BytesType)
	return protowire.AppendString(b, s)
}

// appendResource appends the Resource message of attrs as field
// fResourceSpansResource.
func appendResource(b []byte, attrs []attribute.KeyValue) []byte {
	var m []byte
	for _, kv := range attrs {
		m = appendKeyValue(m, fResourceAttributes, kv)
	}
	b = protowire.AppendTag(b, fResourceSpansResource, protowire.BytesType)
	return protowire.AppendBytes(b, m)
}

// appendScope appends the InstrumentationScope message as field
// fScopeSpansScope.
func appendScope(b []byte, name, version string) []byte {
	n := protowire.SizeTag(fScopeName) + protowire.SizeBytes(len(name))
	if version != "" {
		n += protowire.SizeTag(fScopeVersion) + protowire.SizeBytes(len(version))
	}
	b = protowire.AppendTag(b, fScopeSpansScope, protowire.BytesType)
	b = protowire.AppendVarint(b, uint64(n))
	b = protowire.AppendTag(b, fScopeName, protowire.BytesType)
	b = protowire.AppendString(b, name)
	if version != "" {
		b = protowire.AppendTag(b, fScopeVersion, protowire.BytesType)
		b = protowire.AppendString(b, version)
	}
	return b
}

// request wraps encoded spans (a run of ScopeSpans.spans fields) into an
// ExportTraceServiceRequest: one ResourceSpans with resource (an encoded
// Resource field) and one ScopeSpans with scope (an encoded scope field).
func request(dst, resource, scope, spans []byte) []byte {
	scopeSpansLen := len(scope) + len(spans)
	rsLen := len(resource) + protowire.SizeTag(fResourceSpansScopeSpans) + protowire.SizeBytes(scopeSpansLen)
	dst = protowire.AppendTag(dst, fRequestResourceSpans, protowire.BytesType)
	dst = protowire.AppendVarint(dst, uint64(rsLen))
	dst = append(dst, resource...)
	dst = protowire.AppendTag(dst, fResourceSpansScopeSpans, protowire.BytesType)
	dst = protowire.AppendVarint(dst, uint64(scopeSpansLen))
	dst = append(dst, scope...)
	return append(dst, spans...)
}
