package reqtrace

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"
)

func req(model string, i int) Request {
	t0 := time.Unix(1_700_000_000, int64(i)*1000)
	return Request{Model: model, Version: "3", ID: "r" + string(rune('a'+i%26)), Began: t0, Submitted: t0.Add(10 * time.Microsecond),
		Queue: 5 * time.Microsecond, Compute: 20 * time.Microsecond, Encoded: t0.Add(50 * time.Microsecond)}
}

// readTraces reads a trace file: the ids of its traces (from the headers)
// and every object.
func readTraces(t *testing.T, name string) (ids []uint64, objs []map[string]any) {
	t.Helper()
	b, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &objs); err != nil {
		t.Fatalf("%s is not a JSON array: %v", name, err)
	}
	for _, o := range objs {
		if _, ok := o["model_name"]; ok {
			ids = append(ids, uint64(o["id"].(float64)))
		}
	}
	return ids, objs
}

func TestSettingsDefaultsAndUpdates(t *testing.T) {
	tr, err := New(filepath.Join(t.TempDir(), "trace.json"), Settings{})
	if err != nil {
		t.Fatal(err)
	}
	g := tr.Get("")
	if g["trace_level"][0] != "OFF" || g["trace_rate"][0] != "1000" || g["trace_count"][0] != "-1" || g["log_frequency"][0] != "0" || g["trace_mode"][0] != "triton" {
		t.Fatalf("defaults: %v", g)
	}
	// A model's own settings; the rest follows the server's, live.
	m, err := tr.Set("simple", Update{"trace_rate": {"7"}})
	if err != nil || m["trace_rate"][0] != "7" || m["trace_level"][0] != "OFF" {
		t.Fatalf("model rate: %v %v", m, err)
	}
	if _, err := tr.Set("", Update{"trace_level": {"TIMESTAMPS"}, "log_frequency": {"2"}}); err != nil {
		t.Fatal(err)
	}
	if m := tr.Get("simple"); m["trace_level"][0] != "TIMESTAMPS" || m["log_frequency"][0] != "2" {
		t.Fatalf("the model follows the server's level: %v", m)
	}
	// Cleared (null): the model follows the server again.
	if m, err := tr.Set("simple", Update{"trace_rate": nil}); err != nil || m["trace_rate"][0] != "1000" {
		t.Fatalf("cleared rate: %v %v", m, err)
	}
	// A model without its own settings answers the server's.
	if m := tr.Get("other"); m["trace_rate"][0] != "1000" || m["trace_level"][0] != "TIMESTAMPS" {
		t.Fatalf("other: %v", m)
	}
	for _, c := range []struct {
		u     Update
		unsup bool
		msg   string
	}{
		{Update{"trace_file": {"/tmp/x"}}, true, "trace file location can not be updated through network protocol"},
		{Update{"trace_level": {"OFF", "TIMESTAMPS"}}, false, "Expect only one trace level 'OFF' is specified"},
		{Update{"trace_level": {"TENSORS"}}, true, "TIMESTAMPS only"},
		{Update{"trace_level": {"LOUD"}}, false, `"LOUD"`},
		{Update{"trace_rate": {"abc"}}, false, "Unable to parse 'trace_rate', got: abc"},
		{Update{"trace_rate": {"4294967296"}}, false, "out of range"},
		{Update{"trace_rate": {"0"}}, false, "rate >= 1"},
		{Update{"trace_count": {"-2"}}, false, "Expecting value >= -1"},
		{Update{"trace_count": {"2147483648"}}, false, "out of range"},
		{Update{"log_frequency": {"-1"}}, false, "Unable to parse 'log_frequency'"},
		{Update{"trace_mode": {"opentelemetry"}}, true, "mode"},
		{Update{"colour": {"red"}}, false, "unknown trace setting"},
	} {
		_, err := tr.Set("", c.u)
		var se *SettingError
		if !errors.As(err, &se) || se.Unsupported != c.unsup || !strings.Contains(err.Error(), c.msg) {
			t.Errorf("%v: %v, want unsupported=%v with %q", c.u, err, c.unsup, c.msg)
		}
	}
	// Nothing changed by a refused update.
	if g := tr.Get(""); g["trace_rate"][0] != "1000" || g["trace_level"][0] != "TIMESTAMPS" {
		t.Fatalf("after refusals: %v", g)
	}
	// No file: settings can be read and changed, not to a level that traces.
	nf, err := New("", Settings{})
	if err != nil {
		t.Fatal(err)
	}
	var se *SettingError
	if _, err := nf.Set("", Update{"trace_level": {"TIMESTAMPS"}}); !errors.As(err, &se) || !strings.Contains(err.Error(), "file=PATH") {
		t.Fatalf("tracing without a file: %v", err)
	}
	if _, err := nf.Set("", Update{"trace_rate": {"5"}}); err != nil {
		t.Fatal(err)
	}
}

// One request in every rate is traced, each with Triton's header and
// timestamps; the count stops it; log_frequency writes FILE.N.
func TestSamplingAndFiles(t *testing.T) {
	file := filepath.Join(t.TempDir(), "trace.json")
	lvl, rate, count, freq := LevelTimestamps, uint32(3), int32(4), uint32(2)
	tr, err := New(file, Settings{Level: &lvl, Rate: &rate, Count: &count, LogFrequency: &freq})
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 30; i++ {
		if err := tr.Record(req("simple", i)); err != nil {
			t.Fatal(err)
		}
	}
	// Requests 3, 6, 9, 12 traced (count 4), written two per file.
	ids0, objs := readTraces(t, file+".0")
	ids1, _ := readTraces(t, file+".1")
	if len(ids0) != 2 || len(ids1) != 2 {
		t.Fatalf("files hold %v and %v", ids0, ids1)
	}
	if _, err := os.Stat(file + ".2"); !os.IsNotExist(err) {
		t.Fatalf("a third file after the count ran out: %v", err)
	}
	if g := tr.Get(""); g["trace_count"][0] != "0" {
		t.Fatalf("count left: %v", g["trace_count"])
	}
	h := objs[0]
	if h["model_name"] != "simple" || h["model_version"].(float64) != 3 || h["request_id"] == "" {
		t.Fatalf("header %v", h)
	}
	var names []string
	var last float64
	for _, o := range objs[1:7] {
		ts := o["timestamps"].([]any)[0].(map[string]any)
		names = append(names, ts["name"].(string))
		if ns := ts["ns"].(float64); ns < last {
			t.Fatalf("timestamps out of order: %v", objs[1:7])
		} else {
			last = ns
		}
	}
	if strings.Join(names, ",") != "REQUEST_START,QUEUE_START,COMPUTE_START,COMPUTE_END,INFER_RESPONSE_COMPLETE,REQUEST_END" {
		t.Fatalf("timestamps %v", names)
	}
	if err := tr.Close(); err != nil {
		t.Fatal(err)
	}
}

// A model's own rate samples its requests apart; log_frequency 0 writes
// everything to FILE at Close; concurrent records are safe.
func TestModelSettingsAndClose(t *testing.T) {
	file := filepath.Join(t.TempDir(), "trace.json")
	lvl, rate := LevelTimestamps, uint32(10)
	tr, err := New(file, Settings{Level: &lvl, Rate: &rate})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tr.Set("hot", Update{"trace_rate": {"1"}}); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for g := 0; g < 4; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 50; i++ {
				_ = tr.Record(req("hot", i))
				_ = tr.Record(req("cold", i))
			}
		}()
	}
	wg.Wait()
	if err := tr.Close(); err != nil {
		t.Fatal(err)
	}
	_ = tr.Record(req("hot", 1)) // after Close: not traced
	ids, objs := readTraces(t, file)
	hot, cold := 0, 0
	for _, o := range objs {
		switch o["model_name"] {
		case "hot":
			hot++
		case "cold":
			cold++
		}
	}
	if hot != 200 || cold != 20 || len(ids) != 220 {
		t.Fatalf("hot %d (want 200), cold %d (want 20), traces %d", hot, cold, len(ids))
	}
	seen := map[uint64]bool{}
	for _, id := range ids {
		if seen[id] {
			t.Fatalf("trace id %d twice", id)
		}
		seen[id] = true
	}
}

// Nothing traced costs one atomic load per request.
func BenchmarkRecordOff(b *testing.B) {
	tr, _ := New("", Settings{})
	r := req("m", 1)
	for i := 0; i < b.N; i++ {
		_ = tr.Record(r)
	}
}

// FuzzSet: any update, as a client sends it, is applied or refused whole
// with a SettingError, and the settings stay ones that Record can use.
func FuzzSet(f *testing.F) {
	f.Add("trace_rate", "7", "", "simple")
	f.Add("trace_level", "TIMESTAMPS", "OFF", "")
	f.Add("trace_count", "-1", "", "m")
	f.Add("log_frequency", "4294967296", "", "")
	f.Add("trace_file", "/x", "", "")
	f.Fuzz(func(t *testing.T, name, v1, v2, model string) {
		tr, err := New(filepath.Join(t.TempDir(), "t.json"), Settings{})
		if err != nil {
			t.Fatal(err)
		}
		var vals []string
		if v1 != "" {
			vals = append(vals, v1)
		}
		if v2 != "" {
			vals = append(vals, v2)
		}
		before := tr.Get(model)
		out, err := tr.Set(model, Update{name: vals})
		if err != nil {
			var se *SettingError
			if !errors.As(err, &se) || se.Message == "" {
				t.Fatalf("%s=%q: %v is not a SettingError", name, vals, err)
			}
			if got := tr.Get(model); fmt.Sprint(got) != fmt.Sprint(before) {
				t.Fatalf("refused %s=%q changed the settings: %v -> %v", name, vals, before, got)
			}
			return
		}
		if out["trace_rate"][0] == "0" {
			t.Fatalf("rate 0 accepted")
		}
		for i := 0; i < 3; i++ {
			if err := tr.Record(req(model, i)); err != nil {
				t.Fatal(err)
			}
		}
		if err := tr.Close(); err != nil {
			t.Fatal(err)
		}
	})
}

// Begin numbers traces in the order requests go in, as Triton numbers
// them on arrival, whatever order they are answered in; requests it did
// not sample leave no trace; the count's last one writes the file when it
// is answered.
func TestBeginNumbersInArrivalOrder(t *testing.T) {
	file := filepath.Join(t.TempDir(), "trace.json")
	lvl, rate, count, freq := LevelTimestamps, uint32(2), int32(3), uint32(0)
	tr, err := New(file, Settings{Level: &lvl, Rate: &rate, Count: &count, LogFrequency: &freq})
	if err != nil {
		t.Fatal(err)
	}
	var reqs []Request
	for i := range 8 {
		r := req("simple", i)
		r.Begun, r.Trace = true, tr.Begin("simple")
		reqs = append(reqs, r)
	}
	got := []uint64{}
	for _, r := range reqs {
		got = append(got, r.Trace)
	}
	if want := []uint64{0, 1, 0, 2, 0, 3, 0, 0}; !reflect.DeepEqual(got, want) {
		t.Fatalf("IDs %v, want %v: every 2nd request, 3 of them, numbered as they went in", got, want)
	}
	for _, i := range []int{3, 1, 0, 2, 4, 6, 7, 5} { // answered out of order; 5 is the last traced one
		if err := tr.Record(reqs[i]); err != nil {
			t.Fatal(err)
		}
	}
	ids, _ := readTraces(t, file+".0")
	if want := []uint64{2, 1, 3}; !reflect.DeepEqual(ids, want) {
		t.Fatalf("file holds %v, want %v (in answer order, each with its arrival ID)", ids, want)
	}
	if err := tr.Close(); err != nil {
		t.Fatal(err)
	}

	// The count's last request answered before an earlier one: the file
	// waits for that one, or for its End when it fails.
	file = filepath.Join(t.TempDir(), "trace.json")
	rate, count = 1, 2
	tr, err = New(file, Settings{Level: &lvl, Rate: &rate, Count: &count, LogFrequency: &freq})
	if err != nil {
		t.Fatal(err)
	}
	a, b := req("simple", 0), req("simple", 1)
	a.Begun, a.Trace = true, tr.Begin("simple")
	b.Begun, b.Trace = true, tr.Begin("simple")
	if err := tr.Record(b); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(file + ".0"); !os.IsNotExist(err) {
		t.Fatalf("written while request %d was still out: %v", a.Trace, err)
	}
	if err := tr.End(a.Trace); err != nil {
		t.Fatal(err)
	}
	if ids, _ := readTraces(t, file+".0"); !reflect.DeepEqual(ids, []uint64{2}) {
		t.Fatalf("file holds %v, want [2]", ids)
	}
	if err := tr.Close(); err != nil {
		t.Fatal(err)
	}
}
