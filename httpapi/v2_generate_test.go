package httpapi

import (
	"encoding/json"
	"slices"
	"testing"

	"github.com/fw-serve/fw/engine"
	"github.com/fw-serve/fw/internal/testmodels"
	"github.com/fw-serve/fw/serving"
)

// Triton's generate extension on simple_identity (a BYTES identity with a
// batch axis): a string in, the same string out under the output's name,
// the keys in Triton's order; generate_stream answers the same object as
// one Server-Sent Event.
func TestV2GenerateStringIdentity(t *testing.T) {
	ts := startModel(t, testmodels.Triton(t, "simple_identity"), Config{}, nil)
	url := ts.url + "/v2/models/simple_identity/"
	r := v2Do(t, "POST", url+"generate", []byte(`{"INPUT0": "hello world", "id": "42", "temperature": 0.5, "stream": false}`))
	if r.status != 200 || r.header.Get("Content-Type") != "application/json" {
		t.Fatalf("%d %s: %s", r.status, r.header.Get("Content-Type"), r.body)
	}
	if want := `{"OUTPUT0":"hello world","id":"42","model_name":"simple_identity","model_version":"1"}`; string(r.body) != want {
		t.Fatalf("body %s, want %s", r.body, want)
	}
	// A list is a list; an empty or absent ID is not answered.
	r = v2Do(t, "POST", url+"generate", []byte(`{"id": "", "INPUT0": ["a", "é\"b", ""]}`))
	if got := r.json(t); r.status != 200 || !slices.Equal(toStrings(got["OUTPUT0"]), []string{"a", "é\"b", ""}) || got["id"] != nil {
		t.Fatalf("%d %s", r.status, r.body)
	}
	// The parameters object's keys follow the same rule: an input there is an input.
	r = v2Do(t, "POST", url+"generate", []byte(`{"parameters": {"INPUT0": "inside", "max_tokens": 3}}`))
	if got := r.json(t); r.status != 200 || got["OUTPUT0"] != "inside" {
		t.Fatalf("%d %s", r.status, r.body)
	}

	r = v2Do(t, "POST", url+"generate_stream", []byte(`{"INPUT0": "streamed", "id": "7"}`), "Accept", "text/event-stream")
	if r.status != 200 || r.header.Get("Content-Type") != "text/event-stream; charset=utf-8" {
		t.Fatalf("%d %s: %s", r.status, r.header.Get("Content-Type"), r.body)
	}
	if want := `data: {"OUTPUT0":"streamed","id":"7","model_name":"simple_identity","model_version":"1"}` + "\n\n"; string(r.body) != want {
		t.Fatalf("stream body %q, want %q", r.body, want)
	}
}

func toStrings(v any) []string {
	l, _ := v.([]any)
	out := make([]string, len(l))
	for i, x := range l {
		out[i], _ = x.(string)
	}
	return out
}

// The numeric path on Triton's simple (INT32 INPUT0 + INPUT1, both [16]
// after the batch axis): flat lists fill the shape, a nested list is
// read as its elements, and a count that fills no shape is refused with
// Triton's sentence.
func TestV2GenerateNumeric(t *testing.T) {
	ts := startModel(t, testmodels.Triton(t, "simple"), Config{}, nil)
	url := ts.url + "/v2/models/simple/generate"
	in0, in1 := make([]int, 16), make([]int, 16)
	for i := range in0 {
		in0[i], in1[i] = i, 1
	}
	body, _ := json.Marshal(map[string]any{"INPUT0": in0, "INPUT1": [][]int{in1[:8], in1[8:]}})
	r := v2Do(t, "POST", url, body)
	var got struct{ OUTPUT0, OUTPUT1 []int }
	if r.status != 200 || json.Unmarshal(r.body, &got) != nil {
		t.Fatalf("%d %s", r.status, r.body)
	}
	for i := range in0 {
		if got.OUTPUT0[i] != i+1 || got.OUTPUT1[i] != i-1 {
			t.Fatalf("element %d: %d %d (%s)", i, got.OUTPUT0[i], got.OUTPUT1[i], r.body)
		}
	}
	// Two rows by count: 32 elements fill [2,16].
	body, _ = json.Marshal(map[string]any{"INPUT0": append(in0, in0...), "INPUT1": append(in1, in1...)})
	if r := v2Do(t, "POST", url, body); r.status != 200 || len(r.json(t)["OUTPUT0"].([]any)) != 32 {
		t.Fatalf("%d %s", r.status, r.body)
	}
	body, _ = json.Marshal(map[string]any{"INPUT0": in0[:15], "INPUT1": in1})
	v2Do(t, "POST", url, body).expectError(t, 400, CodeInvalidInput, "The schema can not convert input 'INPUT0' to tensor with proper shape")
	v2Do(t, "POST", url, []byte(`{"INPUT0": [true], "INPUT1": 1}`)).expectError(t, 400, CodeInvalidInput, "attempt to access JSON non-signed-integer as signed-integer")
	// No rows ([0,16]) is refused by the batcher before the model runs:
	// JSON on the stream route too, not an event.
	r = v2Do(t, "POST", ts.url+"/v2/models/simple/generate_stream", []byte(`{"INPUT0": [], "INPUT1": []}`))
	if ct := r.header.Get("Content-Type"); ct != "application/json" {
		t.Fatalf("Content-Type %q: %s", ct, r.body)
	}
	r.expectError(t, 400, CodeInvalidInput, "row")
}

// Refused requests answer Triton's sentences as JSON, on both routes,
// before anything runs.
func TestV2GenerateErrors(t *testing.T) {
	ts := startModel(t, testmodels.Triton(t, "simple_identity"), Config{}, nil)
	for _, route := range []string{"generate", "generate_stream"} {
		url := ts.url + "/v2/models/simple_identity/" + route
		for _, c := range []struct {
			body, code, says string
		}{
			{`{}`, CodeInvalidInput, "expected 1 inputs but got 0 inputs for model 'simple_identity'. Got input(s) [], but missing required input(s) ['INPUT0']"},
			{`{"abc": 123}`, CodeInvalidInput, "expected 1 inputs but got 0 inputs"},
			{`{"INPUT0": 123}`, CodeInvalidInput, "attempt to access JSON non-string as string"},
			{`{"INPUT0": ["a", ["b", 1]]}`, CodeInvalidInput, "attempt to access JSON non-string as string"},
			{`{"INPUT0": "a", "INPUT0": "b"}`, CodeBadRequest, "input 'INPUT0' already exists in request"},
			{`{"INPUT0": "a", "PARAMS": {"x": 1}}`, CodeBadRequest, "parameter 'PARAMS' has invalid type. It should be either 'int', 'bool', or 'string'."},
			{`{"INPUT0": "a", "p": null}`, CodeBadRequest, "parameter 'p' has invalid type"},
			{`{"INPUT0": "a", "parameters": 1}`, CodeBadRequest, "Expected JSON object for keyword: 'parameters'"},
			{`{"INPUT0": "a", "parameters": {"nested": {"twice": 1}}}`, CodeBadRequest, "Converting keyword: 'parameters': parameter 'nested' has invalid type."},
			{`{"INPUT0": "a", "id": 5}`, CodeBadRequest, "Unable to parse 'id': attempt to access JSON non-string as string"},
			{`{"INPUT0": "a", "sequence_id": 3}`, CodeBadRequest, "sequence"},
			{`["INPUT0"]`, CodeBadRequest, "must be a JSON object"},
			{`{"INPUT0": `, CodeInvalidJSON, "failed to parse the request JSON buffer"},
		} {
			r := v2Do(t, "POST", url, []byte(c.body))
			if ct := r.header.Get("Content-Type"); ct != "application/json" {
				t.Fatalf("%s %s: Content-Type %q", route, c.body, ct)
			}
			r.expectError(t, 400, c.code, c.says)
		}
		v2Do(t, "GET", url, nil).expectError(t, 405, CodeMethodNotAllowed, "POST")
		v2Do(t, "POST", ts.url+"/v2/models/nope/"+route, []byte(`{}`)).expectError(t, 404, CodeNotFound, "Request for unknown model")
	}
}

// genShape follows Triton's rule: fixed axes divide the count from the
// last axis on, the innermost variable axis takes the rest, the others 1.
func TestGenerateShape(t *testing.T) {
	for _, c := range []struct {
		shape []int64
		n     int64
		want  string
	}{
		{[]int64{1, 1}, 1, "[1,1]"},
		{[]int64{1, -1}, 2, "[1,2]"},
		{[]int64{-1, 16}, 16, "[1,16]"},
		{[]int64{-1, 16}, 48, "[3,16]"},
		{[]int64{-1, -1}, 5, "[1,5]"},
		{[]int64{-1, 3, -1}, 12, "[1,3,4]"},
		{[]int64{-1}, 0, "[0]"},
		{[]int64{}, 1, "[]"},
		{[]int64{-1, 16}, 15, ""},
		{[]int64{1, 1}, 2, ""},
		{[]int64{2}, 0, ""},
		{[]int64{}, 2, ""},
	} {
		got, ok := genShape(engine.TensorSpec{Shape: c.shape}, c.n)
		s := ""
		if ok {
			s = serving.ShapeString(got)
		}
		if s != c.want {
			t.Errorf("shape %v, %d elements: %q, want %q", c.shape, c.n, s, c.want)
		}
	}
}

// FuzzGenerateRequest: any body is a request or a 4xx with a message,
// never a panic, and an accepted request's tensors hold exactly their
// shapes' elements.
func FuzzGenerateRequest(f *testing.F) {
	ins := []engine.TensorSpec{
		{Name: "PROMPT", DType: engine.String, Shape: []int64{1, 1}},
		{Name: "tokens", DType: engine.Int32, Shape: []int64{-1, 4}},
		{Name: "stream", DType: engine.Bool, Shape: []int64{-1}},
		{Name: "scale", DType: engine.Float16, Shape: []int64{-1, -1}},
	}
	f.Add([]byte(`{"PROMPT": "hi", "tokens": [1,2,3,4], "stream": false, "scale": 0.5, "id": "x", "parameters": {"t": 1}}`))
	f.Add([]byte(`{"parameters": {"PROMPT": "a", "tokens": [[1,2],[3,4]], "stream": [true, false], "scale": [[1e5]]}}`))
	f.Add([]byte(`{"PROMPT": ["a"], "tokens": [2147483648,0,0,0], "stream": [], "scale": 70000}`))
	f.Add([]byte(`{"PROMPT": "a", "PROMPT": "b"}`))
	f.Add([]byte(`{"tokens": [[[[[1]]]]], "x": [1]}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		if len(body) > 1<<16 {
			return
		}
		g, aerr := parseGenerate(body, "m", ins)
		var req *v2Request
		if aerr == nil {
			req, aerr = genInputs(g, ins, v2Limits{maxBytes: 1 << 20})
		}
		if aerr != nil {
			if aerr.Message == "" || aerr.Status < 400 || aerr.Status > 500 {
				t.Fatalf("bad error: %+v", aerr)
			}
			return
		}
		for i, x := range req.inputs {
			if x.DType != ins[i].DType || int64(len(x.Shape)) != int64(len(ins[i].Shape)) {
				t.Fatalf("input %d: %s %v", i, x.DType, x.Shape)
			}
			if x.DType != engine.String && int64(len(x.Data)) != engine.NumElements(x.Shape)*int64(x.DType.Size()) {
				t.Fatalf("input %d: %d bytes for shape %v", i, len(x.Data), x.Shape)
			}
		}
	})
}
