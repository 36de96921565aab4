// Command gpucheck is the serving half of `make gpu-check`
// (scripts/gpu-check.sh): it serves the models scripts/gpu-export.py wrote
// with `fw serve --device D`, drives each closed loop from keep-alive clients
// on loopback, and writes a markdown table that sets fw's throughput beside
// raw PyTorch's on the same device and the same model file (the rows
// bench/gpu_eager.py wrote, -eager).
//
//	gpucheck -bin bin/fw -models DIR -device cuda -eager eager.json -out serve.md
//
// Each row: requests/s and rows/s, p50 and p99, the server's CPU per
// answered request (utime+stime from /proc over the run), the mean rows per
// engine call (fw_batch_size_rows from /metrics), errors, and rows/s as a
// fraction of raw PyTorch's best rows/s on that file over the batches it
// timed (host tensors in, host tensors out: what a server's call does).
//
// With -profile DIR the servers run with --pprof, each row's measured run
// writes a Go CPU profile of the server into DIR
// (FILE_REQUEST_rROWS_cCLIENTS.pprof, for `go tool pprof -top bin/fw F`), and a
// second table says where a request's time and the server's CPU went: the
// server's own mean latency, the engine's time per call and the queue's wait
// (from /metrics), and CPU per request by thread name (/proc: fw's Go
// threads beside the libraries' own). -only limits the run to some files.
package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/fw-serve/fw/internal/benchserve"
	"github.com/fw-serve/fw/internal/procstat"
)

func main() {
	bin := flag.String("bin", "bin/fw", "the fw binary")
	models := flag.String("models", "", "the directory scripts/gpu-export.py wrote (required)")
	device := flag.String("device", "cuda", "fw serve --device")
	conc := flag.String("c", "1,16,64", "closed-loop clients, comma-separated: one row each")
	dur := flag.Duration("d", 5*time.Second, "measured time per row")
	warm := flag.Duration("warmup", time.Second, "load before each row, not counted (new batch shapes, cuDNN's algorithm choice)")
	eager := flag.String("eager", "", "bench/gpu_eager.py's JSON for the same files (empty: no ratio column)")
	out := flag.String("out", "", "write the markdown here too (empty: stdout only)")
	profile := flag.String("profile", "", "serve with --pprof and write each row's CPU profile here, with a table of where the time went")
	only := flag.String("only", "", "comma-separated model file names to serve (empty: all)")
	flag.Parse()
	if *models == "" {
		fmt.Fprintln(os.Stderr, "gpucheck: -models is required")
		os.Exit(2)
	}
	var cs []int
	for _, f := range strings.Split(*conc, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 || n > 1024 {
			fmt.Fprintf(os.Stderr, "gpucheck: -c %q: want client counts from 1 to 1024\n", *conc)
			os.Exit(2)
		}
		cs = append(cs, n)
	}
	if *profile != "" {
		if err := os.MkdirAll(*profile, 0o755); err != nil {
			fmt.Fprintln(os.Stderr, "gpucheck:", err)
			os.Exit(1)
		}
	}
	opt := options{bin: *bin, dir: *models, device: *device, eager: *eager, conc: cs, warm: *warm, dur: *dur, profile: *profile}
	if *only != "" {
		opt.only = map[string]bool{}
		for _, f := range strings.Split(*only, ",") {
			opt.only[strings.TrimSpace(f)] = true
		}
	}
	md, err := run(opt)
	fmt.Print(md)
	if *out != "" {
		if werr := os.WriteFile(*out, []byte(md), 0o644); werr != nil && err == nil {
			err = werr
		}
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "gpucheck:", err)
		os.Exit(1)
	}
}

// workload is one model file served and the request every client repeats.
type workload struct {
	file, path, ctype string
	rows              int // rows per request
	body              []byte
}

// eagerRow is one row of bench/gpu_eager.py's JSON.
type eagerRow struct {
	Model     string  `json:"model"`
	Batch     int     `json:"batch"`
	Mode      string  `json:"mode"`
	RowsPerS  float64 `json:"rows_per_s"`
	P50Micros float64 `json:"p50_us"`
}

// options is the command line.
type options struct {
	bin, dir, device, eager string
	conc                    []int
	warm, dur               time.Duration
	profile                 string          // "": no profiles
	only                    map[string]bool // nil: every file
}

func run(o options) (string, error) {
	dir, device, eagerPath, dur, warm := o.dir, o.device, o.eager, o.dur, o.warm
	jpeg, err := os.ReadFile(filepath.Join(dir, "samples", "rgb_224.jpg"))
	if err != nil {
		return "", fmt.Errorf("reading the sample picture: %w", err)
	}
	row := `[` + strings.TrimSuffix(strings.Repeat("0.5,", 64), ",") + `]`
	var loads []workload
	for _, f := range []string{"resnet18.ts.pt", "resnet18." + strings.SplitN(device, ":", 2)[0] + ".pt2"} {
		if _, err := os.Stat(filepath.Join(dir, f)); err == nil {
			loads = append(loads, workload{file: f, path: "/predict/image", ctype: "image/jpeg", rows: 1, body: jpeg})
		}
	}
	loads = append(loads,
		workload{file: "digits_mlp.ts.pt", path: "/predict", ctype: "application/json", rows: 1, body: []byte(`{"data":[` + row + `]}`)},
		workload{file: "digits_mlp.ts.pt", path: "/predict", ctype: "application/json", rows: 64,
			body: []byte(`{"data":[` + strings.TrimSuffix(strings.Repeat(row+",", 64), ",") + `]}`)})

	best := map[string]eagerRow{}
	if eagerPath != "" {
		b, err := os.ReadFile(eagerPath)
		if err != nil {
			return "", fmt.Errorf("reading the PyTorch baseline: %w", err)
		}
		var rows []eagerRow
		if err := json.Unmarshal(b, &rows); err != nil {
			return "", fmt.Errorf("reading the PyTorch baseline %s: %w", eagerPath, err)
		}
		for _, r := range rows {
			if r.Mode == "host" && r.RowsPerS > best[r.Model].RowsPerS {
				best[r.Model] = r
			}
		}
	}

	var b strings.Builder
	fmt.Fprintf(&b, "`fw serve --model FILE --device %s` with its defaults otherwise; clients back to back for %s per row after %s of warm-up, on loopback. "+
		"PyTorch: the best rows/s of bench/gpu_eager.py on the same file and device (host tensor in, host tensor out), at the batch named.\n\n", device, dur, warm)
	b.WriteString("| file | request | clients | req/s | rows/s | p50 ms | p99 ms | server CPU µs/req | rows per engine call | errors | PyTorch rows/s (batch) | fw / PyTorch |\n")
	b.WriteString("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	var firstErr error
	var diag strings.Builder
	for _, w := range loads {
		if err := measure(&b, &diag, o, w, best[w.file]); err != nil {
			fmt.Fprintf(&b, "| %s | %s | | | | | | | | failed: %s | | |\n", w.file, w.path, strings.ReplaceAll(err.Error(), "|", "/"))
			if firstErr == nil {
				firstErr = err
			}
		}
	}
	if o.profile != "" {
		b.WriteString("\nWhere the time went (same rows): the server's mean latency, the engine's mean time per call and the first request's mean wait before it " +
			"(fw_http_request_duration_seconds, fw_inference_duration_seconds, fw_queue_wait_seconds), and the server's CPU per request by thread name " +
			"(/proc/PID/task; fw's Go threads are named fw). Profiles: go tool pprof -top bin/fw FILE.\n\n")
		b.WriteString("| file | request | clients | server ms/req | engine ms/call | queue wait ms | CPU µs/req by thread | profile |\n")
		b.WriteString("|---|---|---:|---:|---:|---:|---|---|\n")
		b.WriteString(diag.String())
	}
	return b.String(), firstErr
}

func measure(b, diag *strings.Builder, o options, w workload, ceiling eagerRow) error {
	dir, device, conc, warm, dur := o.dir, o.device, o.conc, o.warm, o.dur
	ctx, cancel := context.WithTimeout(context.Background(), time.Duration(len(conc))*(dur+time.Minute)+2*time.Minute)
	defer cancel()
	args := []string{"--model", filepath.Join(dir, w.file), "--device", device}
	if o.profile != "" {
		args = append(args, "--pprof")
	}
	srv, err := benchserve.Start(ctx, o.bin, args...)
	if err != nil {
		return err
	}
	defer srv.Stop()
	tr := &http.Transport{MaxIdleConnsPerHost: 1024, DisableCompression: true}
	defer tr.CloseIdleConnections()
	c := &http.Client{Transport: tr, Timeout: time.Minute}
	post := func(int, int) (time.Duration, error) {
		start := time.Now()
		resp, err := c.Post(srv.URL+w.path, w.ctype, bytes.NewReader(w.body))
		if err != nil {
			return 0, err
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return 0, fmt.Errorf("%s answered %d: %.300s", w.path, resp.StatusCode, body)
		}
		return time.Since(start), nil
	}
	// One request must pass before anything is timed: a broken device path
	// is a failed row with the server's own words, not a table of errors.
	if _, err := post(0, 0); err != nil {
		return err
	}
	for _, n := range conc {
		// Warm-up at this concurrency (CUDA kernels for new batch shapes,
		// cuDNN's algorithm choice), then the measured run.
		benchserve.ClosedLoop(n, warm, post)
		m0, _ := scrape(c, srv.URL)
		th0, _ := procstat.Threads(srv.PID)
		cpu0, _ := procstat.CPU(srv.PID)
		var prof chan string
		if o.profile != "" {
			prof = make(chan string, 1)
			name := fmt.Sprintf("%s_%s_r%d_c%d.pprof", w.file, strings.ReplaceAll(strings.Trim(w.path, "/"), "/", "-"), w.rows, n)
			go func() { prof <- fetchProfile(c, srv.URL, filepath.Join(o.profile, name), dur) }()
		}
		lat, errs := benchserve.ClosedLoop(n, dur, post)
		cpu1, _ := procstat.CPU(srv.PID)
		th1, _ := procstat.Threads(srv.PID)
		m1, _ := scrape(c, srv.URL)
		rows0, calls0 := m0["fw_batch_size_rows_sum"], m0["fw_batch_size_rows_count"]
		rows1, calls1 := m1["fw_batch_size_rows_sum"], m1["fw_batch_size_rows_count"]
		rps := float64(len(lat)) / dur.Seconds()
		cpuPer, perCall := "", ""
		if len(lat) > 0 {
			cpuPer = fmt.Sprintf("%.0f", float64((cpu1-cpu0).Microseconds())/float64(len(lat)))
		}
		if calls1 > calls0 {
			perCall = fmt.Sprintf("%.1f", (rows1-rows0)/(calls1-calls0))
		}
		pt, ratio := "", ""
		if ceiling.RowsPerS > 0 {
			pt = fmt.Sprintf("%.0f (%d)", ceiling.RowsPerS, ceiling.Batch)
			ratio = fmt.Sprintf("%.2f", rps*float64(w.rows)/ceiling.RowsPerS)
		}
		fmt.Fprintf(b, "| %s | %s, %d row(s) | %d | %.0f | %.0f | %.2f | %.2f | %s | %s | %d | %s | %s |\n",
			w.file, w.path, w.rows, n, rps, rps*float64(w.rows), benchserve.PercentileMs(lat, 0.5), benchserve.PercentileMs(lat, 0.99), cpuPer, perCall, errs, pt, ratio)
		if prof != nil {
			fmt.Fprintf(diag, "| %s | %s, %d row(s) | %d | %s | %s | %s | %s | %s |\n", w.file, w.path, w.rows, n,
				meanMs(m0, m1, "fw_http_request_duration_seconds"), meanMs(m0, m1, "fw_inference_duration_seconds"), meanMs(m0, m1, "fw_queue_wait_seconds"),
				threadShare(th0, th1, len(lat)), <-prof)
		}
	}
	return nil
}

// fetchProfile saves the server's CPU profile over most of d into path and
// returns the file's name, or what went wrong.
func fetchProfile(c *http.Client, url, path string, d time.Duration) string {
	secs := max(int(d.Seconds())-1, 1)
	resp, err := c.Get(fmt.Sprintf("%s/debug/pprof/profile?seconds=%d", url, secs))
	if err != nil {
		return "failed: " + err.Error()
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		return fmt.Sprintf("failed: %d %v %.100s", resp.StatusCode, err, body)
	}
	if err := os.WriteFile(path, body, 0o644); err != nil {
		return "failed: " + err.Error()
	}
	return filepath.Base(path)
}

// meanMs is a histogram's mean between two scrapes, in milliseconds.
func meanMs(m0, m1 map[string]float64, name string) string {
	n := m1[name+"_count"] - m0[name+"_count"]
	if n <= 0 {
		return ""
	}
	return fmt.Sprintf("%.3f", 1000*(m1[name+"_sum"]-m0[name+"_sum"])/n)
}

// threadShare is the CPU per request of each thread name that used any
// between the two readings, busiest first.
func threadShare(th0, th1 map[string]time.Duration, requests int) string {
	if requests == 0 {
		return ""
	}
	type use struct {
		name string
		d    time.Duration
	}
	var us []use
	for name, d := range th1 {
		if dd := d - th0[name]; dd > 0 {
			us = append(us, use{name, dd})
		}
	}
	sort.Slice(us, func(i, j int) bool { return us[i].d > us[j].d })
	parts := make([]string, 0, len(us))
	for _, u := range us {
		parts = append(parts, fmt.Sprintf("%s %.0f", strings.ReplaceAll(u.name, "|", "/"), float64(u.d.Microseconds())/float64(requests)))
	}
	return strings.Join(parts, ", ")
}

// scrape reads every _sum and _count series of the server's /metrics,
// summed over their labels.
func scrape(c *http.Client, url string) (map[string]float64, error) {
	resp, err := c.Get(url + "/metrics")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	m := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		name, _, _ := strings.Cut(line, "{")
		name, _, _ = strings.Cut(name, " ")
		if !strings.HasSuffix(name, "_sum") && !strings.HasSuffix(name, "_count") ||
			strings.Contains(line, `endpoint="metrics"`) || strings.Contains(line, `endpoint="debug"`) {
			continue // the scrapes and the profile itself are not the load
		}
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		if v, perr := strconv.ParseFloat(f[len(f)-1], 64); perr == nil {
			m[name] += v
		}
	}
	return m, sc.Err()
}
