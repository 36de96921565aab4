package modelrepo

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/fw-serve/fw/httpapi"
	"github.com/fw-serve/fw/serving"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/valyala/fasthttp"
)

// residentNow is what the resident models count against MaxResidentBytes
// (their files' bytes times their engine instances) and their names, sorted.
func residentNow(r *Repository) (int64, []string) {
	var n int64
	var names []string
	for _, inst := range r.Loaded() {
		for _, m := range inst.All() {
			n += m.Size
		}
		names = append(names, inst.Name())
	}
	slices.Sort(names)
	return n, names
}

// copyWithInstances copies Triton's simple model into root as name, with
// count engine instances (instance_group).
func copyWithInstances(t *testing.T, root, name string, count int) {
	t.Helper()
	copyModel(t, filepath.Join(samples(t), "simple"), root, name)
	p := filepath.Join(root, name, "config.pbtxt")
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	b = append(b, fmt.Sprintf("\ninstance_group [ { count: %d kind: KIND_CPU } ]\n", count)...)
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// --max-resident-bytes (Config.MaxResidentBytes): every model loads on its
// first request, and once one loads the least recently used are unloaded
// until the resident bytes (files' bytes times instances) fit the budget;
// a model twice as large pushes out two small ones. No request fails, and
// once clients stop the resident total is within the budget.
func TestOnDemandByteBudgetEvictsLeastRecentlyUsed(t *testing.T) {
	st, err := os.Stat(filepath.Join(samples(t), "simple", "1", "model.onnx"))
	if err != nil {
		t.Fatal(err)
	}
	unit := st.Size() // one instance of simple
	root := t.TempDir()
	for _, n := range []string{"s0", "s1", "s2"} {
		copyWithInstances(t, root, n, 1) // 1 unit each
	}
	for _, n := range []string{"b0", "b1"} {
		copyWithInstances(t, root, n, 2) // 2 units each
	}
	budget := 4 * unit
	f := open(t, Config{Roots: []string{root}, Mode: ModeNone, MaxResidentBytes: budget, LoadWait: time.Minute})
	if n, names := residentNow(f.repo); n != 0 {
		t.Fatalf("on demand: nothing loads at start, got %v (%d bytes)", names, n)
	}
	ctx := context.Background()
	step := func(name string, units int64, want ...string) {
		t.Helper()
		if err := inferSimple(ctx, f.repo, name); err != nil {
			t.Fatalf("request for %s: %v", name, err)
		}
		n, names := residentNow(f.repo)
		if !slices.Equal(names, want) || n != units*unit {
			t.Fatalf("after a request for %s: resident %v (%d bytes), want %v (%d bytes; budget %d)", name, names, n, want, units*unit, budget)
		}
	}
	step("s0", 1, "s0")
	step("s1", 2, "s0", "s1")
	step("s2", 3, "s0", "s1", "s2")
	step("s0", 3, "s0", "s1", "s2") // used again: s1 is now the least recently used
	step("b0", 4, "b0", "s0", "s2") // 5 units: s1 goes
	step("b1", 4, "b0", "b1")       // 6 units: s2, then s0 go
	step("s1", 3, "b1", "s1")       // 5 units: b0 goes
	evicted := map[string]bool{}
	for _, m := range f.repo.Index() {
		if strings.Contains(m.Reason, "least recently used") {
			evicted[m.Name] = true
		}
	}
	for _, n := range []string{"b0", "s0", "s2"} {
		if !evicted[n] {
			t.Fatalf("index does not say %s was unloaded to make room: %+v", n, f.repo.Index())
		}
	}

	// Many clients asking for every model: none fails; once they stop the
	// resident bytes are within the budget.
	all := []string{"s0", "b0", "s1", "b1", "s2"}
	var wg sync.WaitGroup
	for c := range 4 {
		wg.Go(func() {
			for i := range 12 {
				name := all[(c*3+i*2)%len(all)]
				if err := inferSimple(ctx, f.repo, name); err != nil {
					t.Errorf("client %d request %d for %s: %v", c, i, name, err)
					return
				}
			}
		})
	}
	wg.Wait()
	if n, names := residentNow(f.repo); n > budget || len(names) == 0 {
		t.Fatalf("after the clients: resident %v (%d bytes), budget %d", names, n, budget)
	}
}

// The bounded wait of an on-demand load (Config.LoadWait, fw serve's
// --timeout): while the model cannot become resident (its config.pbtxt is
// a pipe nothing writes to yet, as a stalled file system would be) a
// request is refused once the wait is over with a not-ready error carrying
// Retry-After, which HTTP answers 503 with a Retry-After header; once the
// model can load, it loads and answers.
func TestOnDemandLoadWaitBounded(t *testing.T) {
	root := t.TempDir()
	copyModel(t, filepath.Join(samples(t), "simple"), root, "slow")
	copyModel(t, filepath.Join(samples(t), "simple"), root, "fast")
	cfgPath := filepath.Join(root, "slow", "config.pbtxt")
	config, err := os.ReadFile(cfgPath)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(cfgPath); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(cfgPath, 0o644); err != nil {
		t.Skipf("no named pipes here: %v", err)
	}
	side := t.TempDir()
	hold := filepath.Join(side, "fifo") // the pipe, still reachable once config.pbtxt is a file again
	if err := os.Link(cfgPath, hold); err != nil {
		t.Fatal(err)
	}
	const wait = 50 * time.Millisecond
	f := open(t, Config{Roots: []string{root}, Mode: ModeNone, MaxResidentModels: 2, LoadWait: wait})

	// release makes the model loadable: config.pbtxt becomes a plain file,
	// and a load blocked opening the pipe is given the configuration.
	var once sync.Once
	release := func() {
		once.Do(func() {
			tmp := filepath.Join(side, "config.pbtxt")
			if err := os.WriteFile(tmp, config, 0o644); err != nil {
				t.Error(err)
				return
			}
			if err := os.Rename(tmp, cfgPath); err != nil {
				t.Error(err)
				return
			}
			for {
				fd, err := syscall.Open(hold, syscall.O_WRONLY|syscall.O_NONBLOCK, 0)
				if err == nil {
					_, werr := syscall.Write(fd, config)
					syscall.Close(fd)
					if werr != nil {
						t.Error(werr)
					}
					return
				}
				if err != syscall.ENXIO {
					t.Error(err)
					return
				}
				f.repo.mu.Lock()
				_, inFlight := f.repo.pending["slow"]
				f.repo.mu.Unlock()
				if !inFlight {
					return // no load is waiting on the pipe (it read the file)
				}
				time.Sleep(time.Millisecond)
			}
		})
	}
	t.Cleanup(release) // before the repository's shutdown, which waits for the load

	ctx := context.Background()
	if err := f.repo.Ready("slow", ""); err != nil {
		t.Fatalf("a model not loaded is ready on demand: %v", err)
	}
	got := make(chan error, 1)
	go func() { _, err := f.repo.Get("slow", ""); got <- err }()
	select {
	case err = <-got:
	case <-time.After(30 * time.Second): // a guard against a hang, far beyond the bound
		t.Fatalf("a request still waits 30 s for a model that cannot load (LoadWait %s)", wait)
	}
	wantModelError(t, err, serving.ModelNotReady, "was not ready within "+wait.String())
	if me, _ := serving.AsModelError(err); me.RetryAfter < 1 {
		t.Fatalf("no Retry-After: %+v", me)
	}
	// Another model still loads on demand and answers meanwhile.
	if err := inferSimple(ctx, f.repo, "fast"); err != nil {
		t.Fatal(err)
	}

	// Over HTTP: 503 with Retry-After.
	url := serveHTTPMore(t, f.repo)
	body := []byte(`{"inputs":[{"name":"INPUT0","datatype":"INT32","shape":[1,16],"data":[0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15]},` +
		`{"name":"INPUT1","datatype":"INT32","shape":[1,16],"data":[1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1]}]}`)
	code, ra, text := postMore(t, url+"/v2/models/slow/infer", body)
	if n, err := strconv.Atoi(ra); code != http.StatusServiceUnavailable || err != nil || n < 1 || !strings.Contains(text, "was not ready within") {
		t.Fatalf("HTTP while the model cannot load: %d, Retry-After %q, %s", code, ra, text)
	}
	if _, names := residentNow(f.repo); slices.Contains(names, "slow") {
		t.Fatalf("slow is resident: %v", names)
	}

	// Once it can load, it does: requests are refused the same way until
	// then, and answered after.
	release()
	for {
		err := inferSimple(ctx, f.repo, "slow")
		if err == nil {
			break
		}
		wantModelError(t, err, serving.ModelNotReady, "was not ready within")
	}
	if code, _, text := postMore(t, url+"/v2/models/slow/infer", body); code != http.StatusOK {
		t.Fatalf("HTTP once loaded: %d %s", code, text)
	}
}

// serveHTTPMore serves r over fw's HTTP API on a loopback socket; its URL.
func serveHTTPMore(t *testing.T, r *Repository) string {
	t.Helper()
	reg := prometheus.NewRegistry()
	base, cancel := context.WithCancel(context.Background())
	srv := httpapi.New(base, httpapi.Config{}, r, httpapi.NewMetrics(reg), quiet(), reg)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hs := &fasthttp.Server{Handler: srv.Handler}
	go hs.Serve(ln)
	t.Cleanup(func() { hs.Shutdown(); cancel() })
	return "http://" + ln.Addr().String()
}

// postMore posts a JSON body; the status, the Retry-After header and the body.
func postMore(t *testing.T, url string, body []byte) (int, string, string) {
	t.Helper()
	c := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := c.Post(url, "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header.Get("Retry-After"), string(b)
}
