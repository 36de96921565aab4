// Command repository measures fw serve with a model repository
// (--model-repository): the time to load and unload one model over the
// repository API; a 1,000-model repository with --max-resident-models 100
// (memory, the first request to a model not loaded, a resident model's
// latency while others load and unload around it); ten models in one
// server against ten fw serve processes; and a 3x224x224 FP32 input sent
// as JSON, as binary tensor data and through system shared memory.
//
//	go run ./bench/repository                  # writes the repository section of docs/benchmarks.md
//	go run ./bench/repository -md ""           # print only
package main

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/fw-serve/fw/internal/benchdoc"
	"github.com/fw-serve/fw/internal/benchserve"
	"github.com/fw-serve/fw/internal/procstat"
)

func main() {
	bin := flag.String("bin", "bin/fw", "the fw binary")
	models := flag.String("models", "build/models", "the reference models (make models)")
	dur := flag.Duration("d", 5*time.Second, "measured time per load row")
	many := flag.Int("n", 1000, "models in the large repository")
	resident := flag.Int("resident", 100, "--max-resident-models for the large repository")
	rounds := flag.Int("rounds", 5, "interleaved rounds of the fixed-rate rows (alone, then with the churn)")
	md := flag.String("md", "docs/benchmarks.md", "markdown file whose repository section gets the tables (empty: print only)")
	only := flag.String("only", "", "run only these parts, comma-separated (load, ondemand, ten, bytes, large) and print them (the markdown file is left alone)")
	burn := flag.Duration("burn", 0, "internal: be the control row's other process, busy for this long churnRate times a second until killed")
	flag.Parse()
	flag.Visit(func(f *flag.Flag) {
		if f.Name == "burn" { // the control's child: never the bench itself
			if *burn <= 0 {
				fmt.Fprintln(os.Stderr, "repository: -burn needs a positive duration")
				os.Exit(2)
			}
			burnLoop(*burn)
		}
	})
	parts := map[string]bool{}
	for _, p := range strings.Split(*only, ",") {
		if p = strings.TrimSpace(p); p != "" {
			parts[p] = true
		}
	}
	if len(parts) > 0 {
		*md = ""
	}
	b := &strings.Builder{}
	if err := run(b, *bin, *models, *dur, *many, *resident, max(1, *rounds), parts); err != nil {
		fmt.Fprintln(os.Stderr, "repository:", err)
		os.Exit(1)
	}
	fmt.Print(b.String())
	if *md != "" {
		if err := benchdoc.ReplaceSection(*md, "repository", b.String()); err != nil {
			fmt.Fprintln(os.Stderr, "repository:", err)
			os.Exit(1)
		}
	}
}

func run(b *strings.Builder, bin, models string, dur time.Duration, many, resident, rounds int, parts map[string]bool) error {
	want := func(p string) bool { return len(parts) == 0 || parts[p] }
	tmp, err := os.MkdirTemp("", "fw-repobench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	mlp := filepath.Join(models, "digits_mlp.onnx")
	fmt.Fprintf(b, "`go run ./bench/repository -d %s -n %d -resident %d -rounds %d` on %s (%s), %d CPUs, loopback, `fw serve` defaults otherwise. The models are copies of digits_mlp.onnx (64 -> 10, 38 KB) and Triton's densenet_onnx stand-in (python/fw/triton_samples.py).\n\n",
		dur, many, resident, rounds, benchdoc.Commit(), time.Now().UTC().Format("2006-01-02"), runtime.NumCPU())

	// 1. Load and unload over the repository API.
	if want("load") {
		repo := filepath.Join(tmp, "twenty")
		if err := copies(repo, mlp, "m", 20); err != nil {
			return err
		}
		if err := loadUnload(b, bin, repo, 20); err != nil {
			return err
		}
	}
	// 2. A large repository served on demand.
	if want("ondemand") {
		big := filepath.Join(tmp, "many")
		if err := copies(big, mlp, "m", many); err != nil {
			return err
		}
		if err := onDemand(b, bin, big, many, resident, rounds, dur); err != nil {
			return err
		}
	}
	// 3. Ten models: one server against ten processes.
	if want("ten") {
		if err := tenModels(b, bin, mlp, filepath.Join(tmp, "ten"), dur); err != nil {
			return err
		}
	}
	// 4. BYTES tensors.
	if want("bytes") {
		str := filepath.Join(tmp, "strings")
		if err := copyDir(filepath.Join(models, "triton", "simple_string"), filepath.Join(str, "simple_string")); err != nil {
			return err
		}
		if err := bytesThroughput(b, bin, str, dur); err != nil {
			return err
		}
	}
	// 5. A large input three ways.
	if want("large") {
		dn := filepath.Join(tmp, "densenet")
		if err := copyDir(filepath.Join(models, "triton", "densenet_onnx"), filepath.Join(dn, "densenet_onnx")); err != nil {
			return err
		}
		if err := largeInput(b, bin, dn, dur); err != nil {
			return err
		}
	}
	return nil
}

// bytesThroughput measures Triton's simple_string (two BYTES inputs of 16
// numbers as strings, their sum and difference as strings) as JSON and as
// binary tensor data.
func bytesThroughput(b *strings.Builder, bin, repo string, dur time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	srv, err := benchserve.Start(ctx, bin, "--model-repository", repo)
	if err != nil {
		return err
	}
	defer stop(srv)
	var a, c []string
	var raw []byte
	for i := range 16 {
		a = append(a, strconv.Itoa(i))
		c = append(c, "1")
	}
	quote := func(v []string) string {
		q := make([]string, len(v))
		for i, x := range v {
			q[i] = strconv.Quote(x)
		}
		return strings.Join(q, ",")
	}
	jsonBody := []byte(`{"inputs":[{"name":"INPUT0","datatype":"BYTES","shape":[1,16],"data":[` + quote(a) + `]},{"name":"INPUT1","datatype":"BYTES","shape":[1,16],"data":[` + quote(c) + `]}]}`)
	ser := func(v []string) []byte {
		var out []byte
		for _, x := range v {
			out = binary.LittleEndian.AppendUint32(out, uint32(len(x)))
			out = append(out, x...)
		}
		return out
	}
	r0, r1 := ser(a), ser(c)
	raw = append(append(raw, r0...), r1...)
	hdr := []byte(`{"inputs":[{"name":"INPUT0","datatype":"BYTES","shape":[1,16],"parameters":{"binary_data_size":` + strconv.Itoa(len(r0)) + `}},{"name":"INPUT1","datatype":"BYTES","shape":[1,16],"parameters":{"binary_data_size":` + strconv.Itoa(len(r1)) + `}}],"outputs":[{"name":"OUTPUT0","parameters":{"binary_data":true}},{"name":"OUTPUT1","parameters":{"binary_data":true}}]}`)
	binBody := append(append([]byte{}, hdr...), raw...)
	b.WriteString("**BYTES tensors**: Triton's simple_string (two BYTES inputs of 16 numbers written as strings; their sum and difference come back as strings), 8 keep-alive clients:\n\n")
	b.WriteString("| request | bytes | req/s | p50 ms | p99 ms | failed |\n|---|---:|---:|---:|---:|---:|\n")
	for _, r := range []struct {
		name string
		body []byte
		hdr  []string
	}{{"JSON strings", jsonBody, nil}, {"binary tensor data (length-prefixed)", binBody, []string{"Inference-Header-Content-Length", strconv.Itoa(len(hdr))}}} {
		run := func(d time.Duration) ([]time.Duration, int64) {
			return benchserve.ClosedLoop(8, d, func(int, int) (time.Duration, error) {
				return postOK(srv.URL+"/v2/models/simple_string/infer", r.body, r.hdr...)
			})
		}
		run(time.Second)
		lat, failed := run(dur)
		fmt.Fprintf(b, "| %s | %d | %.0f | %.2f | %.2f | %d |\n", r.name, len(r.body), float64(len(lat))/dur.Seconds(), benchserve.PercentileMs(lat, .5), benchserve.PercentileMs(lat, .99), failed)
	}
	b.WriteString("\n")
	return nil
}

// copies lays out n models named prefix0000... each with version 1 a copy
// (hard link) of file.
func copies(root, file, prefix string, n int) error {
	for i := range n {
		d := filepath.Join(root, fmt.Sprintf("%s%04d", prefix, i), "1")
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
		if err := os.Link(file, filepath.Join(d, "model.onnx")); err != nil {
			if err := copyFile(file, filepath.Join(d, "model.onnx")); err != nil {
				return err
			}
		}
	}
	return nil
}

func copyFile(src, dst string) error {
	data, err := os.ReadFile(src)
	if err != nil {
		return err
	}
	return os.WriteFile(dst, data, 0o644)
}

func copyDir(src, dst string) error {
	return filepath.WalkDir(src, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		if d.IsDir() {
			return os.MkdirAll(filepath.Join(dst, rel), 0o755)
		}
		return copyFile(p, filepath.Join(dst, rel))
	})
}

var transport = &http.Transport{MaxIdleConnsPerHost: 64, DisableCompression: true}

var client = &http.Client{Transport: transport, Timeout: 2 * time.Minute}

// stop closes the client's idle keep-alive connections, then the server:
// a graceful shutdown waits for open connections.
func stop(srv *benchserve.Server) {
	transport.CloseIdleConnections()
	srv.Stop()
}

func post(url, ctype string, body []byte, hdr ...string) (int, []byte, time.Duration, error) {
	req, err := http.NewRequest("POST", url, bytes.NewReader(body))
	if err != nil {
		return 0, nil, 0, err
	}
	req.Header.Set("Content-Type", ctype)
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	start := time.Now()
	resp, err := client.Do(req)
	if err != nil {
		return 0, nil, 0, err
	}
	out, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp.StatusCode, out, time.Since(start), nil
}

var row = []byte(`{"inputs":[{"name":"input","datatype":"FP32","shape":[1,64],"data":[` + strings.TrimSuffix(strings.Repeat("0.5,", 64), ",") + `]}]}`)

func infer(base, model string) (time.Duration, error) {
	code, out, d, err := post(base+"/v2/models/"+model+"/infer", "application/json", row)
	if err != nil {
		return 0, err
	}
	if code != 200 {
		return 0, fmt.Errorf("%s: %d %s", model, code, out)
	}
	return d, nil
}

// postOK is post for a closed loop: an answer other than 200 is a failure.
func postOK(url string, body []byte, hdr ...string) (time.Duration, error) {
	code, out, d, err := post(url, "application/json", body, hdr...)
	if err == nil && code != 200 {
		err = fmt.Errorf("%d %s", code, out)
	}
	return d, err
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

func loadUnload(b *strings.Builder, bin, repo string, n int) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	srv, err := benchserve.Start(ctx, bin, "--model-repository", repo, "--model-control-mode", "explicit")
	if err != nil {
		return err
	}
	defer stop(srv)
	var loads, unloads []time.Duration
	for i := range n {
		name := fmt.Sprintf("m%04d", i)
		code, out, d, err := post(srv.URL+"/v2/repository/models/"+name+"/load", "application/json", nil)
		if err != nil || code != 200 {
			return fmt.Errorf("load %s: %d %s %v", name, code, out, err)
		}
		loads = append(loads, d)
		if _, err := infer(srv.URL, name); err != nil {
			return err
		}
	}
	for i := range n {
		name := fmt.Sprintf("m%04d", i)
		code, out, d, err := post(srv.URL+"/v2/repository/models/"+name+"/unload", "application/json", nil)
		if err != nil || code != 200 {
			return fmt.Errorf("unload %s: %d %s %v", name, code, out, err)
		}
		unloads = append(unloads, d)
	}
	b.WriteString("**Load and unload** (`--model-control-mode explicit`, `POST /v2/repository/models/M/load` then `/unload`, one model at a time; a load includes reading the file, the ONNX Runtime session, the embedded test vector and the warm-up batches of 1, 8 and 64 rows; an unload waits for the model's accepted requests and frees it):\n\n")
	b.WriteString("| call | models | p50 ms | p99 ms | max ms |\n|---|---:|---:|---:|---:|\n")
	fmt.Fprintf(b, "| load digits_mlp | %d | %.1f | %.1f | %.1f |\n", n, benchserve.PercentileMs(loads, .5), benchserve.PercentileMs(loads, .99), benchserve.PercentileMs(loads, 1))
	fmt.Fprintf(b, "| unload digits_mlp | %d | %.1f | %.1f | %.1f |\n\n", n, benchserve.PercentileMs(unloads, .5), benchserve.PercentileMs(unloads, .99), benchserve.PercentileMs(unloads, 1))
	return nil
}

func onDemand(b *strings.Builder, bin, repo string, many, resident, rounds int, dur time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	srv, err := benchserve.Start(ctx, bin, "--model-repository", repo, "--max-resident-models", strconv.Itoa(resident))
	if err != nil {
		return err
	}
	defer stop(srv)
	rss0, _, _ := srv.Mem()
	// Index of the whole repository.
	_, out, idxTime, err := post(srv.URL+"/v2/repository/index", "application/json", nil)
	if err != nil {
		return err
	}
	var idx []map[string]any
	_ = json.Unmarshal(out, &idx)
	// Cold first requests, more models than fit.
	cold := resident + resident/2
	var first []time.Duration
	for i := range cold {
		d, err := infer(srv.URL, fmt.Sprintf("m%04d", i))
		if err != nil {
			return err
		}
		first = append(first, d)
	}
	var warm []time.Duration
	for range 200 {
		d, err := infer(srv.URL, fmt.Sprintf("m%04d", cold-1))
		if err != nil {
			return err
		}
		warm = append(warm, d)
	}
	rss1, hwm, _ := srv.Mem()
	// A resident model's latency, alone and while others load and unload.
	// The others are asked for in turn, round after round, so that each was
	// last used about many-cold requests before: evicted, loaded again.
	var turn atomic.Int64
	other := func() string { return fmt.Sprintf("m%04d", cold+int(turn.Add(1)-1)%(many-cold)) }
	hot := func(churn bool) ([]time.Duration, int64, int64, error) {
		var failed, churned atomic.Int64
		stop := make(chan struct{})
		var wg sync.WaitGroup
		if churn {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					select {
					case <-stop:
						return
					default:
					}
					if _, err := infer(srv.URL, other()); err != nil {
						failed.Add(1)
					}
					churned.Add(1)
				}
			}()
		}
		lat, hotFailed := benchserve.ClosedLoop(4, dur, func(int, int) (time.Duration, error) { return infer(srv.URL, "m0000") })
		close(stop)
		wg.Wait()
		return lat, failed.Load() + hotFailed, churned.Load(), nil
	}
	if _, err := infer(srv.URL, "m0000"); err != nil {
		return err
	}
	alone, f1, _, _ := hot(false)
	busy, f2, churned, _ := hot(true)
	// The same at fixed rates (equal work with and without the churn): what
	// a resident model's clients see while a steady stream of other models
	// loads and unloads, with CPU to spare.
	paced := func(churn bool) ([]time.Duration, int64, int64) {
		var failed, churned atomic.Int64
		done := make(chan struct{})
		if churn {
			go func() {
				defer close(done)
				_, f := benchserve.Paced(1, churnRate, dur, func(_, i int) (time.Duration, error) {
					churned.Add(1)
					return infer(srv.URL, other())
				})
				failed.Add(f)
			}()
		} else {
			close(done)
		}
		lat, f := benchserve.Paced(4, hotRate, dur, func(int, int) (time.Duration, error) { return infer(srv.URL, "m0000") })
		<-done
		return lat, failed.Load() + f, churned.Load()
	}
	// cpuOf is fw's CPU time over f.
	cpuOf := func(f func()) time.Duration {
		c0, err0 := procstat.CPU(srv.PID)
		f()
		c1, err1 := procstat.CPU(srv.PID)
		if err0 != nil || err1 != nil {
			return 0
		}
		return c1 - c0
	}
	// Interleaved rounds: a single p99 over ~100 slow requests moves with
	// the machine's noise as much as with the churn; each round's pair is
	// compared with itself.
	var p99Alone, p99Busy, p50Alone, p50Busy, ratios, perLoad []float64
	var nAlone, nBusy, f3, f4, pChurned int64
	for range rounds {
		var a, c []time.Duration
		var fa, fc, ch int64
		cpuAlone := cpuOf(func() { a, fa, _ = paced(false) })
		cpuBusy := cpuOf(func() { c, fc, ch = paced(true) })
		p99Alone, p99Busy = append(p99Alone, benchserve.PercentileMs(a, .99)), append(p99Busy, benchserve.PercentileMs(c, .99))
		p50Alone, p50Busy = append(p50Alone, benchserve.PercentileMs(a, .5)), append(p50Busy, benchserve.PercentileMs(c, .5))
		ratios = append(ratios, benchserve.PercentileMs(c, .99)/benchserve.PercentileMs(a, .99))
		if ch > 0 {
			perLoad = append(perLoad, ms(cpuBusy-cpuAlone)/float64(ch))
		}
		nAlone, nBusy, f3, f4, pChurned = nAlone+int64(len(a)), nBusy+int64(len(c)), f3+fa, f4+fc, pChurned+ch
	}
	// The control: the churn's extra CPU (fw's CPU with it minus without,
	// per load) burned by another process at the same rate instead. What it
	// does to the resident model's p99 is what any process sharing these
	// CPUs would do; the rest is the loads' own.
	loadCPU := time.Duration(benchserve.Median(perLoad) * float64(time.Millisecond))
	if loadCPU <= 0 {
		return fmt.Errorf("the churn's CPU per load could not be measured (%v ms per round): no control row", perLoad)
	}
	var p99Ctl, p50Ctl, ctlRatios []float64
	var nCtl, f5 int64
	for range rounds {
		a, _, _ := paced(false)
		c, fc, err := burning(ctx, loadCPU, func() ([]time.Duration, int64, int64) { return paced(false) })
		if err != nil {
			return err
		}
		p99Ctl, p50Ctl = append(p99Ctl, benchserve.PercentileMs(c, .99)), append(p50Ctl, benchserve.PercentileMs(c, .5))
		ctlRatios = append(ctlRatios, benchserve.PercentileMs(c, .99)/benchserve.PercentileMs(a, .99))
		nCtl, f5 = nCtl+int64(len(c)), f5+fc
	}
	fmt.Fprintf(b, "**%d models, `--max-resident-models %d`** (every model loads on its first request; the least recently used are unloaded to make room): RSS %.0f MiB at start with none loaded, %.0f MiB after %d models were asked for once (%d resident; peak %.0f MiB); `POST /v2/repository/index` of %d models in %.1f ms.\n\n",
		many, resident, float64(rss0)/(1<<20), float64(rss1)/(1<<20), cold, resident, float64(hwm)/(1<<20), len(idx), ms(idxTime))
	b.WriteString("| request | count | p50 ms | p99 ms | failed |\n|---|---:|---:|---:|---:|\n")
	fmt.Fprintf(b, "| first request to a model not loaded (load + warm-up + answer) | %d | %.1f | %.1f | 0 |\n", len(first), benchserve.PercentileMs(first, .5), benchserve.PercentileMs(first, .99))
	fmt.Fprintf(b, "| a loaded model, one client | %d | %.2f | %.2f | 0 |\n", len(warm), benchserve.PercentileMs(warm, .5), benchserve.PercentileMs(warm, .99))
	fmt.Fprintf(b, "| a resident model, 4 clients, alone | %d | %.2f | %.2f | %d |\n", len(alone), benchserve.PercentileMs(alone, .5), benchserve.PercentileMs(alone, .99), f1)
	fmt.Fprintf(b, "| the same while a fifth client asks for other models (%d loads and unloads) | %d | %.2f | %.2f | %d |\n", churned, len(busy), benchserve.PercentileMs(busy, .5), benchserve.PercentileMs(busy, .99), f2)
	b.WriteString("\n")
	fmt.Fprintf(b, "At fixed rates (equal work, CPU to spare; latency from each request's due time), %d interleaved rounds of %s each, medians of the rounds' p50 and p99; the last column is each round's p99 with the churn over its p99 alone, median (lowest to highest):\n\n", rounds, dur)
	b.WriteString("| request | count | p50 ms | p99 ms | failed | p99 ratio |\n|---|---:|---:|---:|---:|---:|\n")
	fmt.Fprintf(b, "| a resident model at %d requests/s (4 clients), alone | %d | %.2f | %.2f | %d | |\n", hotRate, nAlone, benchserve.Median(p50Alone), benchserve.Median(p99Alone), f3)
	fmt.Fprintf(b, "| the same while other models load and unload at %d/s (%d loads and unloads) | %d | %.2f | %.2f | %d | %.2f (%.2f to %.2f) |\n",
		churnRate, pChurned, nBusy, benchserve.Median(p50Busy), benchserve.Median(p99Busy), f4, benchserve.Median(ratios), slices.Min(ratios), slices.Max(ratios))
	fmt.Fprintf(b, "| control: no churn, another process busy for %.1f ms %d times a second (fw's CPU per load and eviction, first request included, measured in the rows above; on one thread, where a load spreads over ONNX Runtime's) | %d | %.2f | %.2f | %d | %.2f (%.2f to %.2f) |\n\n",
		ms(loadCPU), churnRate, nCtl, benchserve.Median(p50Ctl), benchserve.Median(p99Ctl), f5, benchserve.Median(ctlRatios), slices.Min(ctlRatios), slices.Max(ctlRatios))
	return nil
}

// burning runs f while another process (this program with -burn) is busy
// for busy, churnRate times a second; the control row of onDemand.
func burning(ctx context.Context, busy time.Duration, f func() ([]time.Duration, int64, int64)) ([]time.Duration, int64, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, 0, err
	}
	cmd := exec.CommandContext(ctx, self, "-burn", busy.String())
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL} // never outlives the bench
	if err := cmd.Start(); err != nil {
		return nil, 0, fmt.Errorf("start the control's busy process: %w", err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	lat, failed, _ := f()
	return lat, failed, nil
}

// burnLoop is the -burn process: busy for busy, churnRate times a second,
// until it is killed.
func burnLoop(busy time.Duration) {
	runtime.GOMAXPROCS(1)
	every := time.Second / churnRate
	next := time.Now()
	x := 0
	for {
		for start := time.Now(); time.Since(start) < busy; {
			x++
		}
		next = next.Add(every)
		time.Sleep(time.Until(next))
	}
}

// hotRate and churnRate are the fixed-rate rows' loads: the resident
// model's requests per second, and the other models' first requests (each
// a load and an eviction) per second.
const hotRate, churnRate = 2000, 20

func tenModels(b *strings.Builder, bin, mlp, root string, dur time.Duration) error {
	if err := copies(root, mlp, "m", 10); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	load := func(urls []string, names []string) (float64, []time.Duration, int64) {
		lat, failed := benchserve.ClosedLoop(16, dur, func(c, i int) (time.Duration, error) {
			return infer(urls[(c+i)%len(urls)], names[(c+i)%len(names)])
		})
		return float64(len(lat)) / dur.Seconds(), lat, failed
	}
	names := make([]string, 10)
	for i := range names {
		names[i] = fmt.Sprintf("m%04d", i)
	}
	one, err := benchserve.Start(ctx, bin, "--model-repository", root)
	if err != nil {
		return err
	}
	load([]string{one.URL}, names) // warm-up
	rps1, lat1, f1 := load([]string{one.URL}, names)
	rss1, _, _ := one.Mem()
	stop(one)
	var procs []*benchserve.Server
	defer func() {
		for _, p := range procs {
			stop(p)
		}
	}()
	var urls []string
	var rss10 int64
	for _, n := range names {
		p, err := benchserve.Start(ctx, bin, "--model", filepath.Join(root, n, "1", "model.onnx"))
		if err != nil {
			return err
		}
		procs = append(procs, p)
		urls = append(urls, p.URL)
	}
	model := make([]string, 10)
	for i := range model {
		model[i] = "digits_mlp" // a single file is served under its fw.json name
	}
	load(urls, model)
	rps10, lat10, f10 := load(urls, model)
	for _, p := range procs {
		r, _, _ := p.Mem()
		rss10 += r
	}
	b.WriteString("**Ten models**: ten copies of digits_mlp in one `fw serve --model-repository` against ten `fw serve --model` processes, 16 keep-alive clients sending V2 JSON requests round-robin over the ten models:\n\n")
	b.WriteString("| setup | req/s | p50 ms | p99 ms | RSS MiB (sum) | failed |\n|---|---:|---:|---:|---:|---:|\n")
	fmt.Fprintf(b, "| one server, ten models | %.0f | %.2f | %.2f | %.0f | %d |\n", rps1, benchserve.PercentileMs(lat1, .5), benchserve.PercentileMs(lat1, .99), float64(rss1)/(1<<20), f1)
	fmt.Fprintf(b, "| ten processes | %.0f | %.2f | %.2f | %.0f | %d |\n\n", rps10, benchserve.PercentileMs(lat10, .5), benchserve.PercentileMs(lat10, .99), float64(rss10)/(1<<20), f10)
	return nil
}

func largeInput(b *strings.Builder, bin, repo string, dur time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	srv, err := benchserve.Start(ctx, bin, "--model-repository", repo, "--allow-client-shm=true")
	if err != nil {
		return err
	}
	defer stop(srv)
	const n = 3 * 224 * 224
	vals := make([]float32, n)
	for i := range vals {
		vals[i] = float32(i%255) / 255
	}
	raw := make([]byte, n*4)
	for i, v := range vals {
		binary.LittleEndian.PutUint32(raw[i*4:], math.Float32bits(v))
	}
	// JSON.
	var jb strings.Builder
	jb.WriteString(`{"inputs":[{"name":"data_0","datatype":"FP32","shape":[3,224,224],"data":[`)
	for i, v := range vals {
		if i > 0 {
			jb.WriteByte(',')
		}
		jb.WriteString(strconv.FormatFloat(float64(v), 'g', -1, 32))
	}
	jb.WriteString(`]}],"outputs":[{"name":"fc6_1","parameters":{"binary_data":true}}]}`)
	jsonBody := []byte(jb.String())
	// Binary tensor data.
	hdr := []byte(`{"inputs":[{"name":"data_0","datatype":"FP32","shape":[3,224,224],"parameters":{"binary_data_size":` + strconv.Itoa(len(raw)) + `}}],"outputs":[{"name":"fc6_1","parameters":{"binary_data":true}}]}`)
	binBody := append(append([]byte{}, hdr...), raw...)
	// System shared memory: the input in a region the server maps once.
	key := fmt.Sprintf("fw_repobench_%d", os.Getpid())
	if err := os.WriteFile("/dev/shm/"+key, raw, 0o600); err != nil {
		return err
	}
	defer os.Remove("/dev/shm/" + key)
	if code, out, _, err := post(srv.URL+"/v2/systemsharedmemory/region/in/register", "application/json", []byte(`{"key":"/`+key+`","offset":0,"byte_size":`+strconv.Itoa(len(raw))+`}`)); err != nil || code != 200 {
		return fmt.Errorf("register: %d %s %v", code, out, err)
	}
	shmBody := []byte(`{"inputs":[{"name":"data_0","datatype":"FP32","shape":[3,224,224],"parameters":{"shared_memory_region":"in","shared_memory_byte_size":` + strconv.Itoa(len(raw)) + `}}],"outputs":[{"name":"fc6_1","parameters":{"binary_data":true}}]}`)
	rows := []struct {
		name string
		body []byte
		hdr  []string
	}{
		{"JSON", jsonBody, nil},
		{"binary tensor data", binBody, []string{"Inference-Header-Content-Length", strconv.Itoa(len(hdr))}},
		{"system shared memory", shmBody, nil},
	}
	b.WriteString("**A 3x224x224 FP32 input (588 KiB)** to the densenet_onnx stand-in (its compute is a pooling and a 1x1 convolution: the transfer dominates), the output as binary data, 4 keep-alive clients:\n\n")
	b.WriteString("| input sent as | request bytes | req/s | p50 ms | p99 ms | failed |\n|---|---:|---:|---:|---:|---:|\n")
	for _, r := range rows {
		run := func(d time.Duration) ([]time.Duration, int64) {
			return benchserve.ClosedLoop(4, d, func(int, int) (time.Duration, error) {
				return postOK(srv.URL+"/v2/models/densenet_onnx/infer", r.body, r.hdr...)
			})
		}
		run(time.Second) // warm-up
		lat, failed := run(dur)
		fmt.Fprintf(b, "| %s | %d | %.0f | %.2f | %.2f | %d |\n", r.name, len(r.body), float64(len(lat))/dur.Seconds(), benchserve.PercentileMs(lat, .5), benchserve.PercentileMs(lat, .99), failed)
	}
	b.WriteString("\n")
	return nil
}
