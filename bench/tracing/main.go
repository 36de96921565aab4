// Command tracing measures what OpenTelemetry tracing and payload logging
// cost fw serve: the
// same /predict load (digits_mlp, one row) against fw with both off,
// tracing 1 % and 100 % (exported over OTLP/HTTP to a real OpenTelemetry
// Collector, build/tools/otelcol, debug exporter, on loopback), and
// payloads logged at 1 % and 100 % (to JSONL files). The cost is the server's CPU time per request (its process's
// user+system time over the requests answered), rounds interleaved so that
// the machine's drift falls on every mode alike. Two loads: a fixed rate
// that every mode sustains (the cost at equal work: on a machine this small
// the collector and the load generator share the server's CPUs, and a
// closed loop would also charge their contention to the traced modes), and
// a closed loop (throughput).
//
//	go run ./bench/tracing                  # writes the tracing section of docs/benchmarks.md
//	go run ./bench/tracing -md "" -d 5s     # print only
package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/fw-serve/fw/internal/benchdoc"
	"github.com/fw-serve/fw/internal/benchserve"
	"github.com/fw-serve/fw/internal/procstat"
)

func main() {
	bin := flag.String("bin", "bin/fw", "the fw binary")
	col := flag.String("otelcol", "build/tools/otelcol", "the OpenTelemetry Collector (scripts/fetch-otelcol.sh)")
	model := flag.String("model", "build/models/digits_mlp.onnx", "the model served")
	dur := flag.Duration("d", 10*time.Second, "measured time per mode and round")
	rounds := flag.Int("rounds", 3, "rounds (each runs every mode once)")
	clients := flag.Int("c", 16, "concurrent keep-alive clients")
	rate := flag.Float64("rate", 6000, "the fixed load, requests per second over all clients")
	md := flag.String("md", "docs/benchmarks.md", "markdown file whose tracing section gets the table (empty: print only)")
	flag.Parse()
	if err := run(*bin, *col, *model, *dur, *rounds, *clients, *rate, *md); err != nil {
		fmt.Fprintln(os.Stderr, "tracing:", err)
		os.Exit(1)
	}
}

type mode struct {
	name string
	args []string
}

type sample struct {
	rps, cpuUs, p50, p99 float64
	errs                 int64
}

func run(bin, col, model string, dur time.Duration, rounds, clients int, rate float64, md string) error {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	port, stop, err := startCollector(ctx, col)
	if err != nil {
		return err
	}
	defer stop()
	endpoint := fmt.Sprintf("http://127.0.0.1:%d", port)
	pdir, err := os.MkdirTemp("", "fw-bench-payloads")
	if err != nil {
		return err
	}
	defer os.RemoveAll(pdir)
	modes := []mode{
		{"off", nil},
		{"tracing 1 %", []string{"--otel-endpoint", endpoint, "--otel-sample-rate", "0.01"}},
		{"tracing 100 %", []string{"--otel-endpoint", endpoint, "--otel-sample-rate", "1"}},
		{"payloads 1 %", []string{"--log-payloads", "0.01", "--log-payloads-to", pdir}},
		{"payloads 100 %", []string{"--log-payloads", "1", "--log-payloads-to", pdir}},
	}
	loads := []float64{rate, 0}
	got := make([][][]sample, len(loads))
	for li, load := range loads {
		got[li] = make([][]sample, len(modes))
		for r := range rounds {
			for i, m := range modes {
				s, err := measure(bin, model, m, dur, clients, load)
				if err != nil {
					return fmt.Errorf("round %d, tracing %s: %w", r+1, m.name, err)
				}
				fmt.Fprintf(os.Stderr, "load %s, round %d, %s: %.0f req/s, %.1f µs CPU/req\n", loadName(load), r+1, m.name, s.rps, s.cpuUs)
				got[li][i] = append(got[li][i], s)
			}
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "`go run ./bench/tracing -d %s -rounds %d -c %d -rate %.0f` on %s (%s), %d CPUs: `fw serve --model %s` with its defaults, %d keep-alive clients posting one row to /predict, at a fixed %.0f requests/s in all and then back to back; tracing exported over OTLP/HTTP to the OpenTelemetry Collector 0.165 (debug exporter) on the same machine (`--otel-endpoint`, `--otel-sample-rate`); payloads logged to JSONL files (`--log-payloads`, `--log-payloads-to DIR`). Medians of %d interleaved rounds of %s; CPU is fw's own process time per request answered. Latency at the fixed rate is from each request's due time.\n\n",
		dur, rounds, clients, rate, benchdoc.Commit(), time.Now().UTC().Format("2006-01-02"), runtime.NumCPU(), filepath.Base(model), clients, rate, rounds, dur)
	b.WriteString("\"CPU vs off\" is the median over the rounds of each round's own ratio to that round's \"off\" (the modes of a round run back to back, so the machine's slow drift cancels), with the rounds' lowest and highest ratio.\n\n")
	b.WriteString("| load | observability | req/s | server CPU per request, µs | CPU vs off (rounds' range) | p50 ms | p99 ms | errors |\n|---|---|---:|---:|---:|---:|---:|---:|\n")
	for li, load := range loads {
		for i, m := range modes {
			ss := got[li][i]
			cpu := median(ss, func(s sample) float64 { return s.cpuUs })
			ratios := make([]float64, len(ss))
			for r := range ss {
				ratios[r] = 100 * (ss[r].cpuUs/got[li][0][r].cpuUs - 1)
			}
			slices.Sort(ratios)
			var errs int64
			for _, s := range ss {
				errs += s.errs
			}
			fmt.Fprintf(&b, "| %s | %s | %.0f | %.1f | %+.1f %% (%+.1f to %+.1f) | %.2f | %.2f | %d |\n", loadName(load), m.name,
				median(ss, func(s sample) float64 { return s.rps }), cpu, ratios[len(ratios)/2], ratios[0], ratios[len(ratios)-1],
				median(ss, func(s sample) float64 { return s.p50 }), median(ss, func(s sample) float64 { return s.p99 }), errs)
		}
	}
	fmt.Print(b.String())
	if md != "" {
		return benchdoc.ReplaceSection(md, "tracing", b.String())
	}
	return nil
}

func loadName(rate float64) string {
	if rate > 0 {
		return fmt.Sprintf("%.0f req/s", rate)
	}
	return "closed loop"
}

func median(ss []sample, f func(sample) float64) float64 {
	v := make([]float64, len(ss))
	for i, s := range ss {
		v[i] = f(s)
	}
	return benchserve.Median(v)
}

// startCollector runs the collector with an OTLP/HTTP receiver on a free
// loopback port and the debug exporter; stop ends it.
func startCollector(ctx context.Context, col string) (int, func(), error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, nil, err
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	dir, err := os.MkdirTemp("", "fw-bench-otelcol")
	if err != nil {
		return 0, nil, err
	}
	cfg := fmt.Sprintf(`{"receivers": {"otlp": {"protocols": {"http": {"endpoint": "127.0.0.1:%d"}}}},
"exporters": {"debug": {"verbosity": "basic"}},
"service": {"pipelines": {"traces": {"receivers": ["otlp"], "exporters": ["debug"]}},
 "telemetry": {"metrics": {"level": "none"}, "logs": {"level": "warn"}}}}`, port)
	path := filepath.Join(dir, "config.yaml")
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		return 0, nil, err
	}
	cmd := exec.CommandContext(ctx, col, "--config", path)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGTERM) }
	cmd.WaitDelay = 10 * time.Second
	if err := cmd.Start(); err != nil {
		return 0, nil, fmt.Errorf("start %s (bash scripts/fetch-otelcol.sh builds it): %w", col, err)
	}
	stop := func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		_ = cmd.Wait()
		os.RemoveAll(dir)
	}
	for deadline := time.Now().Add(30 * time.Second); ; {
		c, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", port), time.Second)
		if err == nil {
			c.Close()
			return port, stop, nil
		}
		if time.Now().After(deadline) {
			stop()
			return 0, nil, fmt.Errorf("the collector did not listen on %d", port)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func measure(bin, model string, m mode, dur time.Duration, clients int, rate float64) (sample, error) {
	ctx, cancel := context.WithTimeout(context.Background(), dur+3*time.Minute)
	defer cancel()
	srv, err := benchserve.Start(ctx, bin, append([]string{"--model", model}, m.args...)...)
	if err != nil {
		return sample{}, err
	}
	defer srv.Stop()
	body := []byte(`{"data":[[` + strings.TrimSuffix(strings.Repeat("0.5,", 64), ",") + `]]}`)
	tr := &http.Transport{MaxIdleConnsPerHost: clients, DisableCompression: true}
	defer tr.CloseIdleConnections()
	c := &http.Client{Transport: tr, Timeout: time.Minute}
	post := func(int, int) (time.Duration, error) {
		start := time.Now()
		resp, err := c.Post(srv.URL+"/predict", "application/json", bytes.NewReader(body))
		if err != nil {
			return 0, err
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			return 0, fmt.Errorf("/predict answered %d", resp.StatusCode)
		}
		return time.Since(start), nil
	}
	for range 4 * clients {
		post(0, 0)
	}
	before, err := procstat.CPU(srv.PID)
	if err != nil {
		return sample{}, err
	}
	var lat []time.Duration
	var errs int64
	if rate > 0 {
		lat, errs = benchserve.Paced(clients, rate, dur, post)
	} else {
		lat, errs = benchserve.ClosedLoop(clients, dur, post)
	}
	after, err := procstat.CPU(srv.PID)
	if err != nil {
		return sample{}, err
	}
	if len(lat) == 0 {
		return sample{}, fmt.Errorf("no request answered")
	}
	return sample{
		rps: float64(len(lat)) / dur.Seconds(), cpuUs: float64((after - before).Microseconds()) / float64(len(lat)),
		p50: benchserve.PercentileMs(lat, 0.5), p99: benchserve.PercentileMs(lat, 0.99), errs: errs,
	}, nil
}
