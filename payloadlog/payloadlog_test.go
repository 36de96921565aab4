package payloadlog

import (
	"bufio"
	"context"
	"encoding/json"
	"log/slog"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fw-serve/fw/engine"
	"github.com/fw-serve/fw/internal/testleak"
)

func TestMain(m *testing.M) { testleak.Main(m) }

func newLogger(t *testing.T, cfg Config) *Logger {
	t.Helper()
	l, err := New(cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close(context.Background()) })
	return l
}

func readRecords(t *testing.T, dir string) []Record {
	t.Helper()
	files, _ := filepath.Glob(filepath.Join(dir, "payloads-*.jsonl"))
	var out []Record
	for _, f := range files {
		fh, err := os.Open(f)
		if err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(fh)
		sc.Buffer(nil, 16<<20)
		for sc.Scan() {
			var r Record
			if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
				t.Fatal(err)
			}
			out = append(out, r)
		}
		fh.Close()
	}
	return out
}

// TestRecordsToFiles: what a record keeps of each tensor: values, a
// summary beyond MaxValues, strings clipped, NaN as 0 counted, redacted
// names without values, the error.
func TestRecordsToFiles(t *testing.T) {
	dir := t.TempDir()
	l := newLogger(t, Config{Rate: 1, Dest: dir, MaxValues: 4, MaxStringBytes: 3, Redact: []string{"token"}})
	str, err := engine.FromStrings([]int64{2}, []string{"héllo", "ab"})
	if err != nil {
		t.Fatal(err)
	}
	in := []engine.Tensor{
		engine.FromFloat32([]int64{1, 3}, []float32{1, float32(math.NaN()), 3}),
		engine.FromFloat32([]int64{1, 6}, []float32{1, 2, 3, 4, 5, 6}),
		str,
		engine.FromFloat32([]int64{1}, []float32{7}),
	}
	specs := []engine.TensorSpec{{Name: "x"}, {Name: "big"}, {Name: "text"}, {Name: "token"}}
	l.Log("m", "2", specs, in, nil, []engine.Tensor{engine.FromFloat32([]int64{2}, []float32{0.1, 0.9})}, 1500*time.Microsecond, context.DeadlineExceeded)
	if err := l.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	recs := readRecords(t, dir)
	if len(recs) != 1 {
		t.Fatalf("%d records", len(recs))
	}
	r := recs[0]
	if r.Model != "m" || r.Version != "2" || r.LatencyMs != 1.5 || r.Error != "context deadline exceeded" || len(r.ID) != 32 {
		t.Fatalf("record: %+v", r)
	}
	x, big, text, tok := r.Inputs[0], r.Inputs[1], r.Inputs[2], r.Inputs[3]
	if x.Name != "x" || len(x.Data) != 3 || x.Data[1] != 0 || x.NonFinite != 1 || x.Datatype != "float32" {
		t.Fatalf("x: %+v", x)
	}
	if big.Data != nil || big.Summary == nil || big.Summary.N != 6 || big.Summary.Mean != 3.5 || big.Summary.Min != 1 || big.Summary.Max != 6 {
		t.Fatalf("big: %+v %+v", big, big.Summary)
	}
	if len(text.Strings) != 2 || text.Strings[0] != "hé" || text.Strings[1] != "ab" { // 3 bytes of "héllo", cut at a character
		t.Fatalf("text: %+v", text)
	}
	if !tok.Redacted || tok.Data != nil || tok.Shape[0] != 1 {
		t.Fatalf("token: %+v", tok)
	}
	if out := r.Outputs[0]; out.Name != "0" || len(out.Data) != 2 {
		t.Fatalf("an output without a spec: %+v", out)
	}
	if c := l.Counts(); c.Logged != 1 || c.Sent != 1 || c.Dropped != 0 {
		t.Fatalf("counts: %+v", c)
	}
}

// TestSampling: the rate holds; 0 and a nil logger log nothing.
func TestSampling(t *testing.T) {
	l := newLogger(t, Config{Rate: 0.1, Dest: t.TempDir()})
	n := 0
	for range 100_000 {
		if l.Sample() {
			n++
		}
	}
	if n < 9_000 || n > 11_000 {
		t.Fatalf("a rate of 0.1 sampled %d of 100000", n)
	}
	var none *Logger
	if none.Sample() || newLogger(t, Config{Rate: 0, Dest: t.TempDir()}).Sample() {
		t.Fatal("sampled with no logger or a rate of 0")
	}
	none.Log("m", "1", nil, nil, nil, nil, 0, nil)
	if From(With(context.Background(), none)) != nil || From(With(context.Background(), l)) != l {
		t.Fatal("context")
	}
	for _, bad := range []Config{{Rate: 2, Dest: t.TempDir()}, {Rate: 0.5, Dest: "ftp://x"}, {Rate: 0.5}} {
		if _, err := New(bad, slog.New(slog.DiscardHandler)); err == nil {
			t.Errorf("%+v accepted", bad)
		}
	}
}

// TestNeverBlocks: with the dashboard stuck, Log returns at once; what the
// queue cannot hold is dropped and counted, and nothing without a spool
// waits for the dashboard.
func TestNeverBlocks(t *testing.T) {
	block := make(chan struct{})
	var hits atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		<-block
	}))
	defer srv.Close()
	defer close(block)
	l := newLogger(t, Config{Rate: 1, Dest: srv.URL, Queue: 10, FlushEvery: 10 * time.Millisecond})
	in := []engine.Tensor{engine.FromFloat32([]int64{1, 4}, []float32{1, 2, 3, 4})}
	start := time.Now()
	for range 2000 {
		l.Log("m", "1", nil, in, nil, nil, 0, nil)
	}
	if d := time.Since(start); d > time.Second {
		t.Fatalf("2000 logs took %s with the dashboard stuck", d)
	}
	if c := l.Counts(); c.Dropped < 1500 || c.Logged != 2000 { // the queue (10) and the batch being sent (256) hold the rest
		t.Fatalf("counts: %+v", c)
	}
}

// TestRefusedAndSpoolFull: records the dashboard refuses (4xx) are dropped,
// not spooled; a full spool drops what does not fit.
func TestRefusedAndSpoolFull(t *testing.T) {
	var status atomic.Int64
	status.Store(422)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(int(status.Load()))
	}))
	defer srv.Close()
	spool := t.TempDir()
	l := newLogger(t, Config{Rate: 1, Dest: srv.URL, SpoolDir: spool, SpoolBytes: 2000, FlushEvery: time.Hour})
	in := []engine.Tensor{engine.FromFloat32([]int64{1, 4}, []float32{1, 2, 3, 4})}
	l.Log("m", "1", nil, in, nil, nil, 0, nil)
	if err := l.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	if c := l.Counts(); c.Dropped != 1 || c.Spooled != 0 {
		t.Fatalf("refused: %+v", c)
	}
	status.Store(503)
	for range 20 { // ~300 bytes each: the spool takes a few batches
		l.Log("m", "1", nil, in, nil, nil, 0, nil)
		if err := l.Flush(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	c := l.Counts()
	if c.Spooled == 0 || c.Spooled+c.Dropped != 21 {
		t.Fatalf("spool full: %+v", c)
	}
	var total int64
	files, _ := filepath.Glob(filepath.Join(spool, "spool-*.ndjson"))
	for _, f := range files {
		st, _ := os.Stat(f)
		total += st.Size()
	}
	if total > 2000 || !strings.HasSuffix(files[0], "-1.ndjson") {
		t.Fatalf("spool holds %d bytes in %v", total, files)
	}
	// Back: the spool drains; its records count as sent.
	status.Store(200)
	if err := l.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	if c2 := l.Counts(); c2.Sent != c.Spooled {
		t.Fatalf("drained: %+v", c2)
	}
	if files, _ := filepath.Glob(filepath.Join(spool, "spool-*")); len(files) != 0 {
		t.Fatalf("left in the spool: %v", files)
	}
}

// TestFloat32Values: a float32 tensor's values are written in float32's
// shortest form and read back as the same float32 numbers; other types
// keep float64's.
func TestFloat32Values(t *testing.T) {
	f32 := Tensor{Name: "x", Datatype: "float32", Shape: []int64{1, 3}, Data: []float64{float64(float32(0.1)), float64(float32(1.0 / 3)), 0}, NonFinite: 1}
	b, err := json.Marshal(f32)
	if err != nil {
		t.Fatal(err)
	}
	if string(b) != `{"name":"x","datatype":"float32","shape":[1,3],"nonfinite":1,"data":[0.1,0.33333334,0]}` {
		t.Fatalf("%s", b)
	}
	var back Tensor
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	for i, v := range back.Data {
		if float32(v) != float32(f32.Data[i]) {
			t.Fatalf("value %d: %v, want %v", i, float32(v), float32(f32.Data[i]))
		}
	}
	f64 := Tensor{Name: "y", Datatype: "float64", Shape: []int64{1}, Data: []float64{1.0 / 3}}
	if b, _ := json.Marshal(f64); !strings.Contains(string(b), "0.3333333333333333") {
		t.Fatalf("float64: %s", b)
	}
	if b, _ := json.Marshal(Tensor{Name: "z", Datatype: "float32", Shape: []int64{2}, Redacted: true}); string(b) != `{"name":"z","datatype":"float32","shape":[2],"redacted":true}` {
		t.Fatalf("redacted: %s", b)
	}
}
