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
	md, err := run(*bin, *models, *device, *eager, cs, *warm, *dur)
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

func run(bin, dir, device, eagerPath string, conc []int, warm, dur time.Duration) (string, error) {
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
	for _, w := range loads {
		if err := measure(&b, bin, dir, device, w, conc, warm, dur, best[w.file]); err != nil {
			fmt.Fprintf(&b, "| %s | %s | | | | | | | | failed: %s | | |\n", w.file, w.path, strings.ReplaceAll(err.Error(), "|", "/"))
			if firstErr == nil {
				firstErr = err
			}
		}
	}
	return b.String(), firstErr
}

func measure(b *strings.Builder, bin, dir, device string, w workload, conc []int, warm, dur time.Duration, ceiling eagerRow) error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Duration(len(conc))*(dur+time.Minute)+2*time.Minute)
	defer cancel()
	srv, err := benchserve.Start(ctx, bin, "--model", filepath.Join(dir, w.file), "--device", device)
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
		rows0, calls0, _ := batchStats(c, srv.URL)
		cpu0, _ := procstat.CPU(srv.PID)
		lat, errs := benchserve.ClosedLoop(n, dur, post)
		cpu1, _ := procstat.CPU(srv.PID)
		rows1, calls1, _ := batchStats(c, srv.URL)
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
	}
	return nil
}

// batchStats reads fw_batch_size_rows' sum and count (all models) from the
// server's /metrics.
func batchStats(c *http.Client, url string) (rows, calls float64, err error) {
	resp, err := c.Get(url + "/metrics")
	if err != nil {
		return 0, 0, err
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		name, _, _ := strings.Cut(line, "{")
		name, _, _ = strings.Cut(name, " ")
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		v, perr := strconv.ParseFloat(f[len(f)-1], 64)
		if perr != nil {
			continue
		}
		switch name {
		case "fw_batch_size_rows_sum":
			rows += v
		case "fw_batch_size_rows_count":
			calls += v
		}
	}
	return rows, calls, sc.Err()
}
