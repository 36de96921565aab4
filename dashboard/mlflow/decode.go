package mlflow

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/valyala/fasthttp"
	"github.com/valyala/fastjson"
)

// readBody reads a request body up to limit bytes (MLflow's code beyond it).
func readBody(ctx *fasthttp.RequestCtx, limit int64) ([]byte, *apiError) {
	r := ctx.RequestBodyStream()
	if r == nil {
		b := ctx.PostBody()
		if int64(len(b)) > limit {
			return nil, errf(413, codeLimitExceeded, "the body is larger than %d bytes; send smaller batches", limit)
		}
		return b, nil
	}
	b, err := io.ReadAll(io.LimitReader(r, limit+1))
	if err != nil {
		return nil, errf(400, codeBadRequest, "reading the request body: %v", err)
	}
	if int64(len(b)) > limit {
		return nil, errf(413, codeLimitExceeded, "the body is larger than %d bytes; send smaller batches", limit)
	}
	return b, nil
}

// raw returns field name as JSON: from the body, or from the query string
// of a GET (a single value as a JSON string, repeated values as an array).
func (r *request) raw(name string) (json.RawMessage, bool) {
	if !r.get {
		v, ok := r.body[name]
		if !ok || bytes.Equal(bytes.TrimSpace(v), []byte("null")) {
			return nil, false
		}
		return v, true
	}
	vals, ok := r.query[name]
	if !ok {
		return nil, false
	}
	if len(vals) == 1 {
		b, _ := json.Marshal(vals[0])
		return b, true
	}
	b, _ := json.Marshal(vals)
	return b, true
}

// str reads a string field ("" when absent).
func (r *request) str(name string) (string, *apiError) {
	v, ok := r.raw(name)
	if !ok {
		return "", nil
	}
	var s string
	if err := json.Unmarshal(v, &s); err != nil {
		return "", invalidValue(name, v, "a string")
	}
	return s, nil
}

// need reads a required string field.
func (r *request) need(name string) (string, *apiError) {
	s, e := r.str(name)
	if e != nil {
		return "", e
	}
	if s == "" {
		return "", missingValue(name)
	}
	return s, nil
}

// strs reads a repeated string field (absent: nil).
func (r *request) strs(name string) ([]string, *apiError) {
	v, ok := r.raw(name)
	if !ok {
		return nil, nil
	}
	var one string
	if json.Unmarshal(v, &one) == nil {
		return []string{one}, nil
	}
	var out []string
	if err := json.Unmarshal(v, &out); err != nil {
		return nil, invalidValue(name, v, "a list of strings")
	}
	return out, nil
}

// int64Field reads an int64 field: protobuf's JSON writes int64 as a string,
// MLflow's clients and curl users write numbers; both are accepted.
func (r *request) int64Field(name string) (int64, bool, *apiError) {
	v, ok := r.raw(name)
	if !ok {
		return 0, false, nil
	}
	n, err := parseInt64(v)
	if err != nil {
		return 0, false, invalidValue(name, v, "an integer")
	}
	return n, true, nil
}

func parseInt64(v json.RawMessage) (int64, error) {
	t := strings.TrimSpace(string(v))
	if strings.HasPrefix(t, `"`) {
		var s string
		if err := json.Unmarshal(v, &s); err != nil {
			return 0, err
		}
		t = s
	}
	if n, err := strconv.ParseInt(t, 10, 64); err == nil {
		return n, nil
	}
	f, err := strconv.ParseFloat(t, 64)
	if err != nil || f != math.Trunc(f) || math.Abs(f) > 9e18 {
		return 0, fmt.Errorf("%s is not an integer", t)
	}
	return int64(f), nil
}

// i64 is an int64 in a JSON object: a number or a string of one.
type i64 struct {
	v   int64
	set bool
}

func (n *i64) UnmarshalJSON(b []byte) error {
	if bytes.Equal(bytes.TrimSpace(b), []byte("null")) {
		return nil
	}
	v, err := parseInt64(b)
	if err != nil {
		return err
	}
	n.v, n.set = v, true
	return nil
}

// f64 is a double in a JSON object: a number or "NaN", "Infinity",
// "-Infinity" (protobuf's JSON for them), or a string of a number.
type f64 float64

func (f *f64) UnmarshalJSON(b []byte) error {
	t := strings.TrimSpace(string(b))
	if strings.HasPrefix(t, `"`) {
		var s string
		if err := json.Unmarshal(b, &s); err != nil {
			return err
		}
		switch s {
		case "NaN", "nan":
			*f = f64(math.NaN())
			return nil
		case "Infinity", "inf", "+Infinity":
			*f = f64(math.Inf(1))
			return nil
		case "-Infinity", "-inf":
			*f = f64(math.Inf(-1))
			return nil
		}
		t = s
	}
	v, err := strconv.ParseFloat(t, 64)
	if err != nil {
		return fmt.Errorf("%s is not a number", t)
	}
	*f = f64(v)
	return nil
}

// decode reads field name into v (a struct or slice); absent leaves v.
func (r *request) decode(name string, v any) *apiError {
	raw, ok := r.raw(name)
	if !ok {
		return nil
	}
	if err := json.Unmarshal(raw, v); err != nil {
		return invalidValue(name, raw, fmt.Sprintf("well-formed (%v)", err))
	}
	return nil
}

// invalidValue is MLflow's answer to a field of the wrong type, its
// wording first ("Invalid value 123 for parameter 'name' supplied"), then
// what fw expected. The value is shown as JSON, cut at 100 bytes.
func invalidValue(name string, raw json.RawMessage, want string) *apiError {
	v := strings.TrimSpace(string(raw))
	if len(v) > 100 {
		v = v[:100] + "..."
	}
	return errf(400, codeInvalidParameter, "Invalid value %s for parameter '%s' supplied: it must be %s", v, name, want)
}

// missingValue is MLflow's answer to a required field left out.
func missingValue(name string) *apiError {
	return errf(400, codeInvalidParameter, "Missing value for required parameter '%s'. See MLflow's REST API docs for the call's fields", name)
}

// decodeMetricsFast reads a "metrics" array as MLflow's clients write it
// (objects of "key" string, "value" number, "timestamp" and "step"
// integers as numbers or strings of digits) with fastjson, a third of
// encoding/json's cost on a 1000-metric log-batch. ok is false for
// anything else, a valid body included ("NaN" values, model_id, unknown
// fields): the caller then decodes it the general way, which also says
// what is wrong with a bad one. What it reads is what the general way
// reads: the same strconv parse of each number's text. raw is valid JSON
// (a field of the request body, which encoding/json has parsed): fastjson
// is laxer than encoding/json on some invalid input.
func decodeMetricsFast(pool *fastjson.ParserPool, raw []byte) (ms []wireMetric, ok bool) {
	p := pool.Get()
	defer pool.Put(p) // after the values are copied out: they live in p
	v, err := p.ParseBytes(raw)
	if err != nil || v.Type() != fastjson.TypeArray {
		return nil, false
	}
	arr, _ := v.Array()
	ms = make([]wireMetric, len(arr))
	var num []byte // a number's text (MarshalTo into our own buffer)
	ok = true
	for i, o := range arr {
		obj, err := o.Object()
		if err != nil {
			return nil, false
		}
		m := &ms[i]
		obj.Visit(func(k []byte, fv *fastjson.Value) {
			if !ok {
				return
			}
			switch string(k) {
			case "key":
				// Escapes and bytes that are not UTF-8 are left to encoding/json
				// (which reads a bad sequence as U+FFFD; fastjson keeps it).
				num = fv.MarshalTo(num[:0])
				var b []byte
				if b, err = fv.StringBytes(); err != nil || !utf8.Valid(b) || bytes.IndexByte(num, '\\') >= 0 {
					ok = false
					return
				}
				m.Key = string(b)
			case "value":
				if fv.Type() != fastjson.TypeNumber {
					ok = false
					return
				}
				num = fv.MarshalTo(num[:0])
				f, err := strconv.ParseFloat(string(num), 64)
				if err != nil {
					ok = false
					return
				}
				val := f64(f)
				m.Value = &val
			case "timestamp", "step":
				var text string
				switch fv.Type() {
				case fastjson.TypeNumber:
					num = fv.MarshalTo(num[:0])
					text = string(num)
				case fastjson.TypeString:
					b, _ := fv.StringBytes() // the parser's memory: copied by string()
					text = string(b)
				default:
					ok = false
					return
				}
				n, err := strconv.ParseInt(text, 10, 64)
				if err != nil {
					ok = false
					return
				}
				if string(k) == "step" {
					m.Step = i64{v: n, set: true}
				} else {
					m.Timestamp = i64{v: n, set: true}
				}
			default:
				ok = false
			}
		})
		if !ok {
			return nil, false
		}
	}
	return ms, true
}
