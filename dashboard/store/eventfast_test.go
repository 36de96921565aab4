package store

import (
	"bytes"
	"cmp"
	"encoding/json"
	"math/rand/v2"
	"reflect"
	"slices"
	"testing"
)

var fastSeeds = []string{
	`{"type":"metrics","step":3,"values":{"loss":0.5,"acc":1e-3},"time":1764400000.25,"run_id":"0123456789abcdef","writer":"w","seq":4}`,
	`{"type":"system","values":{"cpu_percent":12.5,"rss_mb":100},"run_id":"r","seq":1}`,
	` { "type" : "metrics" , "step" : null , "values" : { } , "time" : null } `,
	`{}`, `{"values":{"a":1},"values":{"b":2}}`, `{"Type":"metrics"}`, `{"step":1.5}`, `{"step":1e2}`,
	`{"seq":9223372036854775808}`, `{"values":{"a":1e400}}`, `{"values":{"a":"NaN"}}`, `{"time":"2026-01-01T00:00:00Z"}`,
	`{"time":1e10}`, `{"type":"a\"b"}`, `{"type":"é"}`, `{"run_id":"x"} x`, `{"a":1}`, `{"step":-0}`, `{"step":01}`,
	`{"values":{"a":-}}`, `{"values":{"a":1.}}`, `{"values":{"a":.5}}`, `{"values":{"a":1,}}`, `{"type":"x",}`, `[1]`, ``, `{`,
	`{"seq":1,"seq":2}`, `{"values":null}`, `{"step":3,"step":null}`,
}

// Where the fast decoder takes an event, it must decode exactly as
// json.Unmarshal does; elsewhere it must leave it to json.Unmarshal.
func FuzzDecodeEventFast(f *testing.F) {
	for _, s := range fastSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var fast Event
		if !decodeEventFast(data, &fast) {
			return
		}
		var slow Event
		if err := json.Unmarshal(data, &slow); err != nil {
			t.Fatalf("fast decoder took %q, json.Unmarshal refuses it: %v", data, err)
		}
		if !reflect.DeepEqual(fast, slow) {
			t.Fatalf("%q:\nfast %+v\nslow %+v", data, fast, slow)
		}
	})
}

// The SDK's shape takes the fast path; the seeds that must not, do not.
func TestDecodeEventFastTakesTheSDKShape(t *testing.T) {
	for i, s := range fastSeeds {
		var ev Event
		got := decodeEventFast([]byte(s), &ev)
		if want := i < 4 || s == `{"step":-0}`; got != want {
			t.Errorf("%q: fast path %v, want %v", s, got, want)
		}
	}
	evs, err := DecodeEvents([]byte(`[` + fastSeeds[0] + `,{"type":"metrics","values":{"a":"x"}},` + fastSeeds[1] + `]`))
	if err != nil || len(evs) != 3 {
		t.Fatal(evs, err)
	}
	if evs[0].Step == nil || *evs[0].Step != 3 || evs[0].Values["acc"] != 1e-3 || evs[0].Seq != 4 || evs[0].Time.UnixMilli() != 1764400000250 {
		t.Errorf("fast-decoded event: %+v", evs[0])
	}
	if evs[1].decodeErr == nil || evs[1].decodeErr.Code != CodeInvalidType || evs[2].decodeErr != nil || evs[2].Type != "system" {
		t.Errorf("a bad element between good ones: %+v / %+v", evs[1], evs[2])
	}
}

// sortPoints must order as the comparison sort by (rid, key, step, order)
// it replaces, for batches in step order and out of it, with repeated steps.
func TestSortPointsIsTheFullSort(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	for round := 0; round < 300; round++ {
		n := r.IntN(200)
		pts := make([]point, n)
		for i := range pts {
			step := int64(i / 3)
			if round%2 == 1 {
				step = r.Int64N(20)
			}
			pts[i] = point{rid: r.Int64N(3), key: r.Int64N(4), step: step, value: float64(i), order: i}
		}
		want := slices.Clone(pts)
		slices.SortFunc(want, func(x, y point) int {
			return cmp.Or(cmp.Compare(x.rid, y.rid), cmp.Compare(x.key, y.key), cmp.Compare(x.step, y.step), x.order-y.order)
		})
		if got := sortPoints(pts); !slices.Equal(got, want) {
			t.Fatalf("round %d:\n got %v\nwant %v", round, got, want)
		}
	}
}

// A valid array is split in place into exactly the elements json.Decoder
// finds.
func FuzzSplitArray(f *testing.F) {
	for _, s := range []string{`[]`, `[1]`, `[ 1 , "a\"]" ,{"a":[1,{"b":"}"}]}, null,true,-1e5 ]`, `[[],[[]],{}]`, "[\n{\"x\":\"\\\\\"}\t]"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		data = bytes.TrimSpace(data)
		if len(data) == 0 || data[0] != '[' || !json.Valid(data) {
			return
		}
		var want []json.RawMessage
		if err := json.Unmarshal(data, &want); err != nil {
			t.Fatal(err)
		}
		got, ok := splitArray(data)
		if !ok {
			if len(want) <= MaxBatchEvents {
				t.Fatalf("%q: refused %d elements", data, len(want))
			}
			return
		}
		if len(got) != len(want) {
			t.Fatalf("%q: %d elements, want %d", data, len(got), len(want))
		}
		for i := range got {
			if !bytes.Equal(got[i], want[i]) {
				t.Fatalf("%q: element %d is %q, want %q", data, i, got[i], want[i])
			}
		}
	})
}
