package serving

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fw-serve/fw/batcher"
	"github.com/fw-serve/fw/engine"
)

func TestParametersForTheModel(t *testing.T) {
	var p Parameters
	for _, kv := range []struct {
		k string
		v any
	}{{"temperature", 0.5}, {"n", int64(3)}, {"top_p", 1.0}, {"tiny", 1e-300}, {"big", uint64(math.MaxUint64)}, {"stream", true}, {"stop", `"END"\`},
		{"sequence_id", uint64(7)}, {"priority", uint64(1)}, {"timeout", int64(5)}, {"binary_data_output", true}, {"headers", "x"},
		{"n", int64(4)}} {
		if err := p.Add(kv.k, kv.v); err != nil {
			t.Fatalf("Add(%q): %v", kv.k, err)
		}
	}
	js := p.JSON()
	var got map[string]any
	if err := json.Unmarshal([]byte(js), &got); err != nil {
		t.Fatalf("JSON() %s: %v", js, err)
	}
	want := `{"temperature":0.5,"n":4,"top_p":1.0,"tiny":1e-300,"big":18446744073709551615,"stream":true,"stop":"\"END\"\\"}`
	if js != want {
		t.Fatalf("JSON() = %s, want %s (reserved keys left out, the last value of a key kept, order of first use)", js, want)
	}
	var none Parameters
	if none.JSON() != "" || WithRequestInfo(context.Background(), "", &none) != context.Background() {
		t.Fatal("no parameters and no ID: no JSON, no context value")
	}
	ctx := WithRequestInfo(context.Background(), "r1", &p)
	ri, ok := engine.RequestInfoOf(ctx)
	if !ok || ri.ID != "r1" || ri.Parameters != want {
		t.Fatalf("RequestInfo = %+v %v", ri, ok)
	}
	// priority and timeout go to the batcher's queue, not to the model.
	if o := batcher.QueueOptionsFrom(ctx); o != (batcher.QueueOptions{Priority: 1, Timeout: 5 * time.Microsecond}) {
		t.Fatalf("queue options %+v", o)
	}
}

// priority and timeout are unsigned integers; anything else is refused,
// naming the parameter.
func TestQueueParametersRefused(t *testing.T) {
	for _, c := range []struct {
		k string
		v any
	}{{"priority", int64(-1)}, {"timeout", int64(-5)}, {"priority", "1"}, {"timeout", 0.5}, {"priority", true}} {
		var p Parameters
		if err := p.Add(c.k, c.v); err == nil || !strings.Contains(err.Error(), fmt.Sprintf("request parameter %q must be an unsigned integer", c.k)) {
			t.Errorf("Add(%q, %v): %v", c.k, c.v, err)
		}
	}
	var p Parameters
	if err := p.Add("timeout", uint64(math.MaxUint64)); err != nil || p.queue.Timeout != time.Duration(math.MaxInt64) {
		t.Fatalf("the largest timeout: %v, %v (saturated)", err, p.queue.Timeout)
	}
}

func TestParametersRefused(t *testing.T) {
	var p Parameters
	for _, c := range []struct {
		k    string
		v    any
		want string
	}{
		{"triton_x", int64(1), "reserved for Triton usage"},
		{"obj", OtherValue("JSON object"), "parameter 'obj' has invalid type"},
		{"inf", math.Inf(1), "finite"},
	} {
		if err := p.Add(c.k, c.v); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Add(%q, %v) = %v, want %q", c.k, c.v, err, c.want)
		}
	}
	for _, h := range []string{"sequence_id", "timeout", "triton_final_response"} {
		if err := p.AddHeader(h, "v"); err == nil || !strings.Contains(err.Error(), "Header '"+h+"' is reserved for Triton usage and cannot be forwarded") {
			t.Errorf("AddHeader(%q) = %v", h, err)
		}
	}
	if err := p.AddHeader("x-tenant", "a"); err != nil {
		t.Fatal(err)
	}
	var many Parameters
	for i := range maxParameters {
		if err := many.Add("k"+strconv.Itoa(i), true); err != nil {
			t.Fatal(err)
		}
	}
	if err := many.Add("k0", false); err != nil {
		t.Fatalf("a key given again at the limit: %v", err)
	}
	if err := many.AddHeader("one-more", "x"); err == nil || !strings.Contains(err.Error(), "more than 1024 parameters") {
		t.Fatalf("past the limit: %v", err)
	}
	// Repeats count too: a body of one key repeated is refused at maxGiven, each repeat a map lookup
	var rep Parameters
	var err error
	for i := 0; err == nil && i < 10*maxGiven; i++ {
		err = rep.Add("k"+strconv.Itoa(i%100), int64(i))
	}
	if err == nil || !strings.Contains(err.Error(), "repeats included") || rep.Len() != 100 {
		t.Fatalf("repeats: %v, %d keys", err, rep.Len())
	}
}

// A model's response parameters: strings, integers and booleans in its
// order, each key once (the last value); the front end's own keys are not
// the model's to set; anything else (a float, a nested value, too many
// keys, not an object) gives none.
func TestResponseParameters(t *testing.T) {
	sink := func(js string) *engine.ResponseSink {
		s := &engine.ResponseSink{}
		s.SetParameters(js)
		return s
	}
	keys, vals := ResponseParameters(sink(`{"b":"x","a":7,"c":true,"a":8,"sequence_id":1,"triton_final_response":false}`))
	if strings.Join(keys, ",") != "b,a,c" || vals["a"] != int64(8) || vals["b"] != "x" || vals["c"] != true || len(vals) != 3 {
		t.Fatalf("%v %v", keys, vals)
	}
	for _, bad := range []string{`{"f":0.5}`, `{"n":{"a":1}}`, `[1]`, `{"big":99999999999999999999}`, `{"x":1`, `{"x":1]`} {
		if keys, _ := ResponseParameters(sink(bad)); keys != nil {
			t.Errorf("%.40q: %v", bad, keys)
		}
	}
	var distinct strings.Builder
	distinct.WriteString("{")
	for i := range maxParameters + 2 {
		if i > 0 {
			distinct.WriteString(",")
		}
		distinct.WriteString(`"k` + strconv.Itoa(i) + `":1`)
	}
	distinct.WriteString("}")
	if keys, _ := ResponseParameters(sink(distinct.String())); keys != nil {
		t.Fatalf("%d keys taken past the limit", len(keys))
	}
	if keys, _ := ResponseParameters(nil); keys != nil {
		t.Fatal("a nil sink gave parameters")
	}
}

func TestClassificationOfAHugeOutputIsRefused(t *testing.T) {
	n := int64(maxClassificationElements + 1)
	big := engine.Tensor{DType: engine.Float32, Shape: []int64{1, n}, Data: make([]byte, 4*n)}
	if _, err := TopClasses(big, 5, true, nil); err == nil || !strings.Contains(err.Error(), "classification output tensor too large") {
		t.Fatalf("TopClasses of %d elements: %v", n, err)
	}
	ok := engine.Tensor{DType: engine.Float32, Shape: []int64{1, 4}, Data: make([]byte, 16)}
	if _, err := TopClasses(ok, 2, true, nil); err != nil {
		t.Fatal(err)
	}
}

// Failed requests count under Triton's failure reasons.
func TestFailureReasons(t *testing.T) {
	var s Stats
	now := time.Now()
	for _, err := range []error{
		fmt.Errorf("%w: 9 waiting", batcher.ErrQueueFull), // REJECTED
		batcher.ErrQueueTimeout,                           // REJECTED
		stepFailure{batcher.ErrQueueTimeout},              // OTHER: an ensemble's step
		context.Canceled,                                  // CANCELED
		errors.New("onnxruntime: the call failed"),        // BACKEND
		&engine.InputError{Msg: "wrong shape"},            // OTHER
		nil,                                               // OTHER
	} {
		s.Record(Request{Began: now, Encoded: now, Err: err})
	}
	if got := s.Snapshot().FailuresByReason; got != [NumFailureReasons]uint64{2, 1, 1, 3} || s.Snapshot().Fail.Count != 7 {
		t.Fatalf("failures by reason %v", got)
	}
	if FailureReason(2) != "BACKEND" {
		t.Fatal(FailureReason(2))
	}
}

// stepFailure is an ensemble step's error (StepFailure).
type stepFailure struct{ err error }

func (e stepFailure) Error() string        { return "step 1: " + e.err.Error() }
func (e stepFailure) Unwrap() error        { return e.err }
func (e stepFailure) EnsembleStep() int    { return 1 }
func (e stepFailure) EnsembleName() string { return "ens" }

// A failure in an ensemble's step reads as Triton words it ("in ensemble
// 'E', " then the step's own error), which Triton's sequence tests match;
// fw's wrapping (the batcher's, the step's) is left out.
func TestEnsembleMessage(t *testing.T) {
	inner := fmt.Errorf("inference request to model 'm' must specify a non-zero or non-empty correlation ID: %w", ErrNoSequenceBatching)
	err := fmt.Errorf("batcher: engine call of 1 rows from 1 requests: %w", stepFailure{fmt.Errorf("batcher: engine call: %w", stepFailure{inner})})
	f := Classify(err, time.Second)
	if want := "in ensemble 'ens', in ensemble 'ens', " + inner.Error(); f.Kind != KindBadRequest || f.Message != want {
		t.Fatalf("%+v, want %q", f, want)
	}
	if f := Classify(inner, time.Second); f.Message != inner.Error() {
		t.Fatalf("outside an ensemble: %q", f.Message)
	}
}
