package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/fw-serve/fw/batcher"
	"github.com/fw-serve/fw/engine"
	"github.com/fw-serve/fw/tune"
)

// runTune is `fw tune MODEL --p99 D`: it searches fw serve's batching and
// threading settings for MODEL against a p99 target (package tune) and
// prints the measured table, the winner's flags, and writes its
// config.pbtxt when asked.
func runTune(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("tune", flag.ContinueOnError)
	fs.SetOutput(stderr)
	p99 := fs.Duration("p99", 0, "the p99 latency to stay within at every concurrency, e.g. 10ms (required)")
	protocol := fs.String("protocol", "http", "what the clients send: http (POST /predict, JSON rows) or grpc (ModelInfer with raw tensor contents)")
	rows := fs.Int("rows", 1, "rows per request")
	concurrency := fs.String("concurrency", "16", "closed-loop clients, comma-separated; a setting must meet the target at each, and ranks by its lowest throughput among them")
	duration := fs.Duration("duration", 2*time.Second, "measured time per setting and concurrency")
	warmup := fs.Duration("warmup", 500*time.Millisecond, "load before each measurement, not counted")
	budget := fs.Duration("budget", 3*time.Minute, "wall time of the whole search; the settings left when it is spent are not tried (fw serve's defaults always are)")
	configOut := fs.String("config", "", "write the winner as a model repository's config.pbtxt to this file")
	fs.Usage = func() {
		fmt.Fprintf(stderr, "Usage: fw tune MODEL_FILE --p99 DURATION [flags]\n\n"+
			"Searches fw serve's --max-batch-size, --max-delay, --instances and --threads for MODEL_FILE against a p99\n"+
			"target: each setting is served by a real `fw serve` on 127.0.0.1 and driven closed loop from this process\n"+
			"(keep the machine otherwise idle). Prints every setting measured (throughput, p50, p99, the server's CPU per\n"+
			"answered request), the best one that meets the target as fw serve flags, and with --config writes it as\n"+
			"config.pbtxt for `fw serve --model-repository`.\n"+
			"Exit status: 0 when a setting meets the target, 1 when none does (the closest is shown) or on errors,\n"+
			"2 on usage errors.\n\nFlags:\n")
		fs.PrintDefaults()
	}
	path, code, ok := parseWithFile(fs, args)
	if !ok {
		return code
	}
	usageErr := func(msg string) int {
		fmt.Fprintf(stderr, "fw tune: %s\n\n", msg)
		fs.Usage()
		return 2
	}
	if path == "" {
		return usageErr("give the model file to tune")
	}
	if *p99 <= 0 {
		return usageErr("--p99 is required: the latency target, e.g. --p99 10ms")
	}
	if *protocol != "http" && *protocol != "grpc" {
		return usageErr(fmt.Sprintf("--protocol %q: use http or grpc", *protocol))
	}
	if *rows < 1 || *rows > 1<<16 {
		return usageErr("--rows must be from 1 to 65536")
	}
	if *duration < 100*time.Millisecond || *warmup < 0 || *budget <= 0 {
		return usageErr("--duration must be at least 100ms, --warmup not negative and --budget positive")
	}
	var conc []int
	for _, f := range strings.Split(*concurrency, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 || n > 4096 {
			return usageErr(fmt.Sprintf("--concurrency %q: want numbers of clients from 1 to 4096, comma-separated", *concurrency))
		}
		conc = append(conc, n)
	}
	if _, err := os.Stat(path); err != nil {
		fmt.Fprintf(stderr, "fw tune: %v\n", err)
		return 1
	}
	bin, err := os.Executable()
	if err != nil {
		fmt.Fprintf(stderr, "fw tune: finding the fw binary to serve with: %v\n", err)
		return 1
	}
	cpus := engine.AvailableCPUs()
	bdef := batcher.DefaultConfig()
	threads, err := defaultThreads(ctx, path, max(1, cpus/max(1, bdef.Instances)), stderr)
	if err != nil {
		fmt.Fprintf(stderr, "fw tune: %v\n", err)
		return 1
	}
	def := tune.Setting{MaxBatch: bdef.MaxBatchRows, MaxDelay: bdef.MaxDelay, Instances: bdef.Instances, Threads: threads, Default: true}
	cfg := tune.Config{
		Bin: bin, Model: path, Protocol: *protocol, Rows: *rows, Concurrency: conc, Target: *p99,
		Warmup: *warmup, Duration: *duration, Budget: *budget, CPUs: cpus,
		Settings: tune.Grid(cpus, def), Log: stderr,
	}
	fmt.Fprintf(stderr, "fw tune: %d settings x %d concurrencies, %s each (budget %s), on %d CPUs\n", len(cfg.Settings), len(conc), *duration, *budget, cpus)
	results, err := tune.Run(ctx, cfg)
	if err != nil {
		fmt.Fprintf(stderr, "fw tune: %v\n", err)
		return 1
	}
	if len(results) == 0 {
		fmt.Fprintf(stderr, "fw tune: nothing was measured\n")
		return 1
	}
	tune.Table(stdout, results, *p99)
	best := results[0]
	if best.Err != nil {
		fmt.Fprintf(stderr, "fw tune: no setting could be served: %v\n", best.Err)
		return 1
	}
	flags := "fw serve --model " + path + " " + best.Setting.String()
	if !best.Meets(*p99) {
		fmt.Fprintf(stdout, "\nNo setting kept p99 within %s. Closest:\n  %s\n", *p99, flags)
		return 1
	}
	fmt.Fprintf(stdout, "\nBest within p99 %s (%.0f req/s at every concurrency):\n  %s\n", *p99, best.Score(), flags)
	if *configOut != "" {
		if best.Served == nil {
			fmt.Fprintf(stderr, "fw tune: the model configuration could not be read from the server; no config.pbtxt written\n")
			return 1
		}
		text, err := tune.Pbtxt(best.Served, best.Setting)
		if err == nil {
			err = os.WriteFile(*configOut, text, 0o644)
		}
		if err != nil {
			fmt.Fprintf(stderr, "fw tune: writing %s: %v\n", *configOut, err)
			return 1
		}
		fmt.Fprintf(stdout, "Wrote %s (place it beside the model as <repository>/<name>/config.pbtxt).\n", *configOut)
	}
	return 0
}

// defaultThreads is the intra-op thread count fw serve runs path with by
// default: perCall, or one for a model whose calls are as fast with one
// (servedThreads).
func defaultThreads(ctx context.Context, path string, perCall int, w io.Writer) (int, error) {
	m, err := engine.Load(ctx, path, withLibraries(engine.Options{Threads: perCall}))
	if err != nil {
		return 0, fmt.Errorf("loading %s: %w", path, err)
	}
	m = servedThreads(ctx, m, w)
	defer m.Close()
	return m.Threads(), nil
}
