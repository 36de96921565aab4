package serving

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/fw-serve/fw/batcher"
	"github.com/fw-serve/fw/engine"
)

// reservedParameters are the request parameter keys Triton keeps for
// itself (its extension_parameters.md): the front ends read them, and
// they are never a model's parameters. Keys starting with "triton_" are
// reserved too.
var reservedParameters = []string{"binary_data_output", "headers", "priority", "sequence_end", "sequence_id", "sequence_start", "timeout"}

// ReservedParameter reports whether key is one of Triton's reserved
// request parameter keys (not those starting with "triton_").
func ReservedParameter(key string) bool {
	return slices.Contains(reservedParameters, key)
}

// maxParameters bounds the parameters one request hands to its model;
// maxGiven bounds the parameters (and forwarded headers) it may give,
// reserved and repeated ones included, so that a body of repeats costs
// no more than one of distinct keys.
const (
	maxParameters = 1024
	maxGiven      = 4 * maxParameters
)

// Parameters are a request's own parameters: those of its "parameters"
// (or, for generate, its other keys) that are not reserved, and the
// headers a forward pattern picks. A Python model reads them as a JSON
// object (request.parameters()), as Triton's Python backend hands them.
// The zero value has none; a key given twice keeps its last value.
//
// The reserved "priority" and "timeout" are kept apart, for the queue of
// the model's batcher (WithRequestInfo hands them to it).
type Parameters struct {
	keys   []string
	vals   []any
	index  map[string]int // key -> position, once there are a few
	given  int            // every Add and AddHeader, for maxGiven
	queue  batcher.QueueOptions
	queued bool // queue was given
}

// Add adds a request parameter: a string, a bool, an int64, a uint64 or a
// float64 (an OtherValue is refused, naming what it is). A reserved key
// (ReservedParameter) is not the model's and is skipped: the caller reads
// it. A key starting with "triton_" is refused with Triton's sentence.
func (p *Parameters) Add(key string, v any) error {
	if err := p.count(); err != nil {
		return err
	}
	if key == "priority" || key == "timeout" {
		return p.setQueue(key, v)
	}
	if ReservedParameter(key) {
		return nil
	}
	if strings.HasPrefix(key, "triton_") {
		return fmt.Errorf("parameter keys starting with 'triton_' are reserved for Triton usage and should not be specified: remove %q from the request's parameters", key)
	}
	switch x := v.(type) {
	case string, bool, int64, uint64:
	case float64:
		if math.IsNaN(x) || math.IsInf(x, 0) {
			return fmt.Errorf("request parameter %q must be a finite number", key)
		}
	default:
		return fmt.Errorf("parameter '%s' has invalid type. It should be either 'int', 'bool', or 'string'. (fw: got %s; a number with a fraction is taken too)", key, describeValue(v))
	}
	return p.put(key, v)
}

// setQueue reads the reserved "priority" (a priority level, 1 the
// highest) or "timeout" (microseconds in the queue, which a queue policy
// with allow_timeout_override honours): unsigned integers.
func (p *Parameters) setQueue(key string, v any) error {
	var n uint64
	switch x := v.(type) {
	case uint64:
		n = x
	case int64:
		if x < 0 {
			return fmt.Errorf("request parameter %q must be an unsigned integer, got %d", key, x)
		}
		n = uint64(x)
	default:
		return fmt.Errorf("request parameter %q must be an unsigned integer, got %s", key, describeValue(v))
	}
	if key == "priority" {
		p.queue.Priority = n
	} else {
		p.queue.Timeout = batcher.MicrosecondsDuration(n)
	}
	p.queued = true
	return nil
}

// AddHeader adds a request header that a forward pattern picked, as a
// string parameter of its name. Reserved names are refused with Triton's
// sentence: a header cannot set what the protocol reads from the body.
func (p *Parameters) AddHeader(name, value string) error {
	if err := p.count(); err != nil {
		return err
	}
	if ReservedParameter(name) || strings.HasPrefix(name, "triton_") {
		return reservedHeaderError(name)
	}
	return p.put(name, value)
}

// count counts one parameter given, refusing past maxGiven.
func (p *Parameters) count() error {
	p.given++
	if p.given > maxGiven {
		return fmt.Errorf("the request gives more than %d parameters (request parameters and forwarded headers together, repeats included); send fewer", maxGiven)
	}
	return nil
}

// put sets key's value, refusing a key past maxParameters.
func (p *Parameters) put(key string, v any) error {
	i := -1
	if p.index != nil {
		if j, ok := p.index[key]; ok {
			i = j
		}
	} else {
		i = slices.Index(p.keys, key)
	}
	if i >= 0 {
		p.vals[i] = v
		return nil
	}
	if len(p.keys) == maxParameters {
		return fmt.Errorf("the request has more than %d parameters (request parameters and forwarded headers together), the most that reach a model; send fewer", maxParameters)
	}
	p.keys = append(p.keys, key)
	p.vals = append(p.vals, v)
	switch {
	case p.index != nil:
		p.index[key] = len(p.keys) - 1
	case len(p.keys) > 16: // past a handful, a map finds keys
		p.index = make(map[string]int, len(p.keys))
		for j, k := range p.keys {
			p.index[k] = j
		}
	}
	return nil
}

// JSON is the parameters as one JSON object, in the order first given;
// "" when there are none.
func (p *Parameters) JSON() string {
	if len(p.keys) == 0 {
		return ""
	}
	b := []byte{'{'}
	for i, k := range p.keys {
		if i > 0 {
			b = append(b, ',')
		}
		kb, _ := json.Marshal(k)
		b = append(append(b, kb...), ':')
		if f, ok := p.vals[i].(float64); ok { // a double stays one: 1.0, not 1 (as Triton writes it)
			n := len(b)
			b = strconv.AppendFloat(b, f, 'g', -1, 64)
			if !bytes.ContainsAny(b[n:], ".eE") {
				b = append(b, '.', '0')
			}
			continue
		}
		vb, _ := json.Marshal(p.vals[i]) // strings, bools and integers
		b = append(b, vb...)
	}
	return string(append(b, '}'))
}

// WithRequestInfo returns ctx carrying the request's ID and parameters
// for its model (engine.RequestInfo), and its priority and queue timeout
// for the batcher (batcher.WithQueueOptions); ctx itself when it has none.
func WithRequestInfo(ctx context.Context, id string, p *Parameters) context.Context {
	js := ""
	if p != nil {
		js = p.JSON()
		if p.queued {
			ctx = batcher.WithQueueOptions(ctx, p.queue)
		}
	}
	if id == "" && js == "" {
		return ctx
	}
	return engine.WithRequestInfo(ctx, engine.RequestInfo{ID: id, Parameters: js})
}

// reservedHeaderError is a forwarded header with a reserved name, in
// Triton's sentence (which starts with a capital), then how to avoid it.
type reservedHeaderError string

func (e reservedHeaderError) Error() string {
	return "Header '" + string(e) + "' is reserved for Triton usage and cannot be forwarded. Send it under another name, or narrow the server's --http-header-forward-pattern / --grpc-header-forward-pattern"
}

// Len is the number of distinct parameters kept.
func (p *Parameters) Len() int { return len(p.keys) }

// AnswersWithParameters reports whether inst's answers may carry response
// parameters: a Python model's. An ensemble's answer carries none of its
// steps' (Triton builds it itself), and its steps see no sink.
func (i *Instance) AnswersWithParameters() bool {
	return i.Model != nil && i.Model.Format == engine.FormatPython
}

// WithResponseSink returns ctx with a sink for the answer's response
// parameters when inst's answers may carry them; ctx and nil otherwise,
// so that other models' requests pay nothing for it.
func WithResponseSink(ctx context.Context, inst *Instance) (context.Context, *engine.ResponseSink) {
	if !inst.AnswersWithParameters() {
		return ctx, nil
	}
	return engine.WithResponseSink(ctx)
}

// ResponseParameters are the response parameters the sink received, by
// key in the model's order, each a string, an int64 or a bool (Triton's
// response parameter types); nil when there are none or they are not such
// an object (a model process is not trusted to send one).
func ResponseParameters(s *engine.ResponseSink) ([]string, map[string]any) {
	if s == nil || s.Parameters() == "" {
		return nil, nil
	}
	dec := json.NewDecoder(strings.NewReader(s.Parameters()))
	dec.UseNumber()
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return nil, nil
	}
	var keys []string
	vals := map[string]any{}
	for dec.More() {
		if len(keys) > maxParameters { // a model process is not trusted with the server's CPU
			return nil, nil
		}
		kt, err := dec.Token()
		if err != nil {
			return nil, nil
		}
		k, _ := kt.(string)
		vt, err := dec.Token()
		if err != nil {
			return nil, nil
		}
		var val any
		switch v := vt.(type) {
		case string, bool:
			val = v
		case json.Number:
			n, err := v.Int64()
			if err != nil {
				return nil, nil
			}
			val = n
		default:
			return nil, nil
		}
		if ReservedParameter(k) || strings.HasPrefix(k, "triton_") {
			continue // the front end's own keys (sequence echo, triton_final_response) are not the model's to set
		}
		if _, seen := vals[k]; !seen {
			keys = append(keys, k)
		}
		vals[k] = val
	}
	if t, err := dec.Token(); err != nil || t != json.Delim('}') {
		return nil, nil
	}
	return keys, vals
}
