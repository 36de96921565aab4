// Package tune searches fw serve's batching and threading settings for one
// model against a latency target, as `fw tune` does: each candidate setting
// is served by a real `fw serve` process, driven closed loop from loopback
// clients at the concurrencies asked for, and measured (throughput, p50,
// p99, the server's CPU per answered request); the best setting that keeps
// its p99 under the target at every concurrency wins. Triton's Model
// Analyzer did this for Triton; no server ships it built in.
package tune

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/fw-serve/fw/internal/benchserve"
)

// Setting is one candidate: the fw serve flags it stands for.
type Setting struct {
	MaxBatch  int           // --max-batch-size: rows per engine call
	MaxDelay  time.Duration // --max-delay: how long a request waits for others
	Instances int           // --instances
	Threads   int           // --threads: intra-op threads per engine call
	Default   bool          // fw serve's defaults (reported as such)
}

// Flags are the fw serve flags of s.
func (s Setting) Flags() []string {
	return []string{
		"--max-batch-size", strconv.Itoa(s.MaxBatch),
		"--max-delay", s.MaxDelay.String(),
		"--instances", strconv.Itoa(s.Instances),
		"--threads", strconv.Itoa(s.Threads),
	}
}

func (s Setting) String() string { return strings.Join(s.Flags(), " ") }

// Point is one setting measured at one concurrency.
type Point struct {
	Concurrency int
	Answered    int
	Failed      int
	Throughput  float64       // answers per second
	P50, P99    time.Duration // request latency, as the client sees it
	CPU         time.Duration // the server's CPU time (user+system) per answer; 0 when unknown
}

// Result is a setting and its points, one per concurrency.
type Result struct {
	Setting Setting
	Points  []Point
	Err     error // the setting could not be served or measured
	// Served is the model configuration fw serve answered under the
	// setting (Triton's JSON), the base of its config.pbtxt (Pbtxt).
	Served []byte
}

// Meets reports whether every point's p99 is within target and nothing failed.
func (r Result) Meets(target time.Duration) bool {
	if r.Err != nil || len(r.Points) == 0 {
		return false
	}
	for _, p := range r.Points {
		if p.P99 > target || p.Failed > 0 || p.Answered == 0 {
			return false
		}
	}
	return true
}

// Score is the throughput the setting sustains at every concurrency: the
// lowest of its points'.
func (r Result) Score() float64 {
	if len(r.Points) == 0 {
		return 0
	}
	s := r.Points[0].Throughput
	for _, p := range r.Points[1:] {
		s = min(s, p.Throughput)
	}
	return s
}

// worstP99 is the highest p99 of r's points.
func (r Result) worstP99() time.Duration {
	var w time.Duration
	for _, p := range r.Points {
		w = max(w, p.P99)
	}
	return w
}

// Config is what a search needs.
type Config struct {
	Bin         string        // the fw binary that serves each candidate
	Model       string        // the model file
	Protocol    string        // "http" (/predict) or "grpc" (ModelInfer)
	Rows        int           // rows per request
	Concurrency []int         // closed-loop clients, one measurement each
	Target      time.Duration // the p99 to stay within
	Warmup      time.Duration // driven, not measured, before each measurement
	Duration    time.Duration // measured per setting and concurrency
	Budget      time.Duration // the whole search's wall time; candidates beyond it are skipped
	CPUs        int           // CPUs the server may use (bounds instances and threads)
	Settings    []Setting     // the candidates, in the order tried (Grid when empty)
	ServeArgs   []string      // more fw serve flags for every candidate
	Log         io.Writer     // progress, one line per measurement
}

// Grid is the default search space for a machine of cpus CPUs: fw serve's
// defaults first, then batch sizes 1, 8 and 64 rows with waits of 0, 1 ms
// and 5 ms (no wait for batches of one row), one instance with all the
// threads or one thread, and instances up to the CPUs (at most 4) sharing
// them.
func Grid(cpus int, def Setting) []Setting {
	cpus = max(1, cpus)
	out := []Setting{def}
	key := def
	key.Default = false
	seen := map[Setting]bool{key: true}
	add := func(s Setting) {
		if !seen[s] {
			seen[s] = true
			out = append(out, s)
		}
	}
	type layout struct{ instances, threads int }
	layouts := []layout{{1, cpus}}
	if cpus > 1 {
		layouts = append(layouts, layout{1, 1})
	}
	for n := 2; n <= min(cpus, 4); n *= 2 {
		layouts = append(layouts, layout{n, max(1, cpus/n)})
	}
	for _, l := range layouts {
		add(Setting{MaxBatch: 1, Instances: l.instances, Threads: l.threads})
		for _, b := range []int{8, 64} {
			for _, d := range []time.Duration{0, time.Millisecond, 5 * time.Millisecond} {
				add(Setting{MaxBatch: b, MaxDelay: d, Instances: l.instances, Threads: l.threads})
			}
		}
	}
	return out
}

// Run measures the settings in order until the budget is spent and
// returns every result, the ones meeting the target first (highest score
// first), then the others (lowest p99 first). ctx ending stops the search
// with what was measured.
func Run(ctx context.Context, cfg Config) ([]Result, error) {
	if cfg.Rows < 1 || len(cfg.Concurrency) == 0 || cfg.Duration <= 0 || cfg.Target <= 0 {
		return nil, errors.New("tune: rows, concurrency, duration and the p99 target must be positive")
	}
	settings := cfg.Settings
	if len(settings) == 0 {
		return nil, errors.New("tune: no settings to try")
	}
	log := cfg.Log
	if log == nil {
		log = io.Discard
	}
	start := time.Now()
	perSetting := time.Duration(len(cfg.Concurrency))*(cfg.Warmup+cfg.Duration) + time.Second
	var results []Result
	for i, s := range settings {
		if ctx.Err() != nil {
			break
		}
		if cfg.Budget > 0 && i > 0 && time.Since(start)+perSetting > cfg.Budget {
			fmt.Fprintf(log, "budget of %s spent: %d of %d settings tried\n", cfg.Budget, i, len(settings))
			break
		}
		r := measure(ctx, cfg, s)
		results = append(results, r)
		if r.Err != nil {
			fmt.Fprintf(log, "[%d/%d] %s: %v\n", i+1, len(settings), s, r.Err)
			continue
		}
		for _, p := range r.Points {
			fmt.Fprintf(log, "[%d/%d] %s, %d clients: %.0f req/s, p50 %s, p99 %s, CPU %s/req\n",
				i+1, len(settings), s, p.Concurrency, p.Throughput, ms(p.P50), ms(p.P99), us(p.CPU))
		}
	}
	Rank(results, cfg.Target)
	return results, nil
}

// Rank orders results: those meeting target by score (highest first), then
// the others by their worst p99 (lowest first); failed settings last.
func Rank(results []Result, target time.Duration) {
	sort.SliceStable(results, func(i, j int) bool {
		a, b := results[i], results[j]
		if (a.Err == nil) != (b.Err == nil) {
			return a.Err == nil
		}
		am, bm := a.Meets(target), b.Meets(target)
		if am != bm {
			return am
		}
		if am {
			return a.Score() > b.Score()
		}
		return a.worstP99() < b.worstP99()
	})
}

// measure serves s and drives it at each concurrency.
func measure(ctx context.Context, cfg Config, s Setting) Result {
	r := Result{Setting: s}
	args := append([]string{"--model", cfg.Model}, s.Flags()...)
	var grpcAddr string
	if cfg.Protocol == "grpc" {
		port, err := freePort()
		if err != nil {
			r.Err = err
			return r
		}
		grpcAddr = fmt.Sprintf("127.0.0.1:%d", port)
		args = append(args, "--grpc-port", strconv.Itoa(port))
	}
	args = append(args, cfg.ServeArgs...)
	srv, err := benchserve.Start(ctx, cfg.Bin, args...)
	if err != nil {
		r.Err = fmt.Errorf("serving it: %w", err)
		return r
	}
	defer srv.Stop()
	var drv driver
	if cfg.Protocol == "grpc" {
		drv, err = newGRPCDriver(ctx, srv.URL, grpcAddr, cfg.Rows)
	} else {
		drv, err = newHTTPDriver(ctx, srv.URL, cfg.Rows)
	}
	if err != nil {
		r.Err = err
		return r
	}
	defer drv.Close()
	if mi, err := describe(ctx, srv.URL); err == nil {
		r.Served, _ = servedConfig(ctx, srv.URL, mi.Name)
	}
	for _, c := range cfg.Concurrency {
		p, err := drive(ctx, drv, srv.PID, c, cfg.Warmup, cfg.Duration)
		if err != nil {
			r.Err = err
			return r
		}
		r.Points = append(r.Points, p)
	}
	return r
}

// percentile is the q quantile (0..1) of sorted latencies.
func percentile(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(q*float64(len(sorted)-1) + 0.5)
	return sorted[min(max(i, 0), len(sorted)-1)]
}

func ms(d time.Duration) string { return strconv.FormatFloat(float64(d)/1e6, 'f', 2, 64) + " ms" }
func us(d time.Duration) string { return strconv.FormatFloat(float64(d)/1e3, 'f', 1, 64) + " µs" }

// Table writes results as a markdown table, marking those within target.
func Table(w io.Writer, results []Result, target time.Duration) {
	conc := []int{}
	for _, r := range results {
		for _, p := range r.Points {
			if !slices.Contains(conc, p.Concurrency) {
				conc = append(conc, p.Concurrency)
			}
		}
	}
	fmt.Fprintf(w, "| # | max batch | max delay | instances | threads |")
	for _, c := range conc {
		fmt.Fprintf(w, " c=%d req/s | p50 ms | p99 ms | CPU µs/req |", c)
	}
	fmt.Fprintf(w, " p99 <= %s |\n|---|---:|---:|---:|---:|", ms(target))
	for range conc {
		fmt.Fprintf(w, "---:|---:|---:|---:|")
	}
	fmt.Fprintf(w, "---|\n")
	for i, r := range results {
		s := r.Setting
		name := strconv.Itoa(i + 1)
		if s.Default {
			name += " (defaults)"
		}
		fmt.Fprintf(w, "| %s | %d | %s | %d | %d |", name, s.MaxBatch, s.MaxDelay, s.Instances, s.Threads)
		if r.Err != nil {
			for range conc {
				fmt.Fprintf(w, " - | - | - | - |")
			}
			fmt.Fprintf(w, " failed: %v |\n", r.Err)
			continue
		}
		for _, c := range conc {
			i := slices.IndexFunc(r.Points, func(p Point) bool { return p.Concurrency == c })
			if i < 0 {
				fmt.Fprintf(w, " - | - | - | - |")
				continue
			}
			p := r.Points[i]
			cpu := "-"
			if p.CPU > 0 {
				cpu = strconv.FormatFloat(float64(p.CPU)/1e3, 'f', 1, 64)
			}
			fmt.Fprintf(w, " %.0f | %.2f | %.2f | %s |", p.Throughput, float64(p.P50)/1e6, float64(p.P99)/1e6, cpu)
		}
		verdict := "no"
		if r.Meets(target) {
			verdict = "yes"
		}
		fmt.Fprintf(w, " %s |\n", verdict)
	}
}
