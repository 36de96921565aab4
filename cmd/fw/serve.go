package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/fw-serve/fw/batcher"
	"github.com/fw-serve/fw/engine"
	"github.com/fw-serve/fw/grpcapi"
	"github.com/fw-serve/fw/httpapi"
	"github.com/fw-serve/fw/internal/hostguard"
	"github.com/fw-serve/fw/modelhost"
	"github.com/fw-serve/fw/serving"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/valyala/fasthttp"
	"google.golang.org/grpc"
)

func runServe(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.SetOutput(stderr)
	ef := &envFlags{fs: fs}
	def := httpapi.DefaultConfig()
	bdef := batcher.DefaultConfig()
	model := ef.String("model", "", "exported model file to serve: ONNX (float or int8), TorchScript, quantized TorchScript or an AOTInductor .pt2 package (required); a directory holding exactly one such file (KServe's /mnt/models) serves that file")
	host := ef.String("host", "127.0.0.1", "address to listen on; 0.0.0.0 for all interfaces (the container image sets it)")
	port := ef.Int("port", 8000, "port to listen on")
	grpcPort := ef.Int("grpc-port", 0, "port for the gRPC front end (the Open Inference Protocol's GRPCInferenceService, as Triton serves it on 8001, with grpc.health.v1) on --host; 0 turns it off")
	device := ef.String("device", "cpu", "compute device: cpu, cuda or cuda:N")
	maxBatch := ef.Int("max-batch-size", bdef.MaxBatchRows, "most rows coalesced into one engine call (counted in rows, not requests)")
	maxDelay := ef.Duration("max-delay", bdef.MaxDelay, "longest a request waits for others to share its engine call; 0 disables waiting")
	instances := ef.Int("instances", bdef.Instances, "engine instances: the model is loaded this many times (each its own session, so this many times the memory), one batcher worker each, so this many engine calls run at once; the CPU threads are split between them (as Triton's instance groups)")
	threads := ef.Int("threads", 0, "intra-op threads per engine call (0: available CPUs / instances, honouring cgroup quotas)")
	maxQueue := ef.Int("max-queue", bdef.MaxQueue, "requests allowed to wait; beyond it the server answers 503 with Retry-After")
	timeout := ef.Duration("timeout", def.Timeout, "longest a request waits for its result (504 beyond it; its work is dropped)")
	maxBody := ef.Int64("max-body-bytes", def.MaxBodyBytes, "largest request body or gRPC message, counted decompressed when compressed (413 or RESOURCE_EXHAUSTED beyond it); NDJSON streams are bounded per line, and in total when compressed")
	maxRows := ef.Int("max-rows", def.MaxRows, "most rows in one /predict request or batch item (413 beyond it)")
	maxPixels := ef.Int64("max-image-pixels", def.MaxImagePixels, "largest image (width*height, read from its header before decoding; 413 beyond it)")
	keysFile := ef.String("api-keys-file", "", "file with one API key per line; when set (or FW_API_KEYS holds comma-separated keys) the prediction and V2 endpoints need `Authorization: Bearer KEY`")
	allowedHosts := ef.String("allowed-hosts", "", "comma-separated extra Host names the server answers to (name, name:port, .domain, or * for any); when bound to loopback only localhost, 127.0.0.1 and ::1 are accepted by default (against DNS rebinding); on other addresses no check unless this is set; /health answers any Host")
	watch := ef.Bool("watch", false, "reload the model when its file changes: the new one is loaded and warmed up beside the old, then swapped in; a broken file is refused and the old one keeps serving")
	watchEvery := ef.Duration("watch-interval", time.Second, "how often --watch checks the file")
	shutdownTimeout := ef.Duration("shutdown-timeout", 30*time.Second, "on SIGTERM: stop accepting, finish in-flight requests, exit within this time")
	drainDelay := ef.Duration("drain-delay", 0, "on SIGTERM: keep serving this long with /health answering 503 before closing the listener, so load balancers stop sending first (Kubernetes: a few seconds)")
	accessLog := ef.Bool("access-log", false, "log every request")
	logFormat := ef.String("log-format", "text", "log format: text or json")
	logLevel := ef.String("log-level", "info", "log level: debug, info, warn or error")
	graphOpt := ef.String("graph-optimization", "all", "ONNX Runtime graph optimisation: disable, basic, extended or all")
	allowNonFinite := ef.Bool("allow-nonfinite", false, "pass NaN and Inf inputs to the model instead of refusing them with 422")
	noWarmup := ef.Bool("no-warmup", false, "skip the warm-up batches (the embedded test vector still runs)")
	spin := ef.Bool("engine-spin", false, "let ONNX Runtime's threads busy-wait between calls (lower latency when the engine has CPUs to itself; off: they leave the CPUs to the HTTP front end)")
	fs.Usage = func() {
		fmt.Fprintf(stderr, `Usage: fw serve --model PATH [flags]

Serves one exported model over HTTP: POST /predict (JSON rows), /predict/image,
/predict/batch (JSON or streaming NDJSON), the Open Inference Protocol under /v2
(with Triton's model configuration and statistics), GET /health (/health/live,
/health/ready), /model, /metrics (Prometheus), /docs; and, with --grpc-port, over
gRPC (the Open Inference Protocol's GRPCInferenceService and grpc.health.v1).
Concurrent requests are coalesced into engine calls by a dynamic micro-batcher.
Every flag can also be set from the environment variable named in brackets.

Flags:
`)
		fs.PrintDefaults()
	}
	if code, ok := ef.parse("fw serve", args, stderr); !ok {
		return code
	}
	if *model == "" && fs.NArg() == 1 {
		*model = fs.Arg(0)
	}
	if *model == "" {
		fmt.Fprintln(stderr, "fw serve: --model is required (or FW_MODEL): the exported .onnx or .pt file to serve")
		return 2
	}
	modelPath, err := modelFile(*model)
	if err != nil {
		fmt.Fprintf(stderr, "fw serve: %v\n", err)
		return 2
	}
	*model = modelPath
	log, err := newLogger(stderr, *logFormat, *logLevel)
	if err != nil {
		fmt.Fprintf(stderr, "fw serve: %v\n", err)
		return 2
	}
	hosts, err := hostguard.New(*host, hostguard.ParseList(*allowedHosts))
	if err != nil {
		fmt.Fprintf(stderr, "fw serve: %v\n", err)
		return 2
	}
	keys, err := loadAPIKeys(*keysFile)
	if err != nil {
		fmt.Fprintf(stderr, "fw serve: %v\n", err)
		return 2
	}
	if *instances < 1 || *maxBatch < 1 || *maxQueue < 1 || *port < 0 || *port > 65535 || *grpcPort < 0 || *grpcPort > 65535 {
		fmt.Fprintln(stderr, "fw serve: --instances, --max-batch-size and --max-queue must be at least 1, --port and --grpc-port within 0..65535")
		return 2
	}
	perCall := *threads
	if perCall == 0 {
		perCall = max(1, engine.AvailableCPUs() / *instances)
	}

	ln, ok := listen("fw serve", *host, *port, stderr)
	if !ok {
		return 1
	}
	var gln net.Listener
	if *grpcPort > 0 {
		if gln, ok = listenFlag("fw serve", "--grpc-port", *host, *grpcPort, stderr); !ok {
			ln.Close()
			return 1
		}
	}

	base, cancelBase := context.WithCancel(context.Background())
	defer cancelBase()
	reg := prometheus.NewRegistry()
	metrics := httpapi.NewMetrics(reg)
	stats := &serving.Stats{} // Triton-style inference statistics, both front ends
	// The model's lifecycle owns the slot the server reads: what serves now
	// and whether it is ready.
	mh := modelhost.New(modelhost.Config{
		Path: *model,
		Engine: withLibraries(engine.Options{Device: engine.Device(*device), Threads: perCall, GraphOptimization: *graphOpt,
			AllowNonFinite: *allowNonFinite, Spin: *spin}),
		Batcher:    batcher.Config{MaxBatchRows: *maxBatch, MaxDelay: *maxDelay, Instances: *instances, MaxQueue: *maxQueue},
		SkipWarmup: *noWarmup,
		Stats:      stats,
	}, metrics, log)
	srv := httpapi.New(base, httpapi.Config{
		MaxBodyBytes: *maxBody, MaxRows: *maxRows, MaxImagePixels: *maxPixels, Timeout: *timeout,
		APIKeys: keys, AccessLog: *accessLog, Version: version, Hosts: hosts, Stats: stats,
	}, mh, metrics, log, reg)
	hs := &fasthttp.Server{
		Handler:                      srv.Handler,
		Name:                         "fw",
		MaxRequestBodySize:           int(min(*maxBody, int64(1<<31-1))),
		StreamRequestBody:            true,
		DisablePreParseMultipartForm: true,
		ReadTimeout:                  60 * time.Second,
		IdleTimeout:                  120 * time.Second,
		CloseOnShutdown:              true,
		Logger:                       slogPrintf{log},
	}
	serveErr := make(chan error, 2)
	go func() { serveErr <- hs.Serve(ln) }()
	url := "http://" + ln.Addr().String()
	log.Info("listening", "url", url, "model", *model)
	var gs *grpc.Server
	var gsrv *grpcapi.Server
	if gln != nil {
		gsrv = grpcapi.New(base, grpcapi.Config{
			MaxMessageBytes: int(min(*maxBody, int64(1<<31-1))), MaxRows: *maxRows, Timeout: *timeout,
			APIKeys: keys, Version: version,
		}, mh, stats, reg, log)
		gs = grpc.NewServer(gsrv.ServerOptions()...)
		gsrv.Register(gs)
		go func() {
			if err := gs.Serve(gln); err != nil {
				serveErr <- fmt.Errorf("gRPC: %w", err)
			}
		}()
		log.Info("listening (gRPC)", "addr", gln.Addr().String())
		fmt.Fprintf(stdout, "fw serve: gRPC (Open Inference Protocol) on %s\n", gln.Addr())
	}

	if err := mh.Start(ctx); err != nil {
		fmt.Fprintf(stderr, "fw serve: %v\n", err)
		hs.Shutdown()
		if gs != nil {
			gs.Stop()
		}
		return 1
	}
	fmt.Fprintf(stdout, "fw serve: %s ready on %s (docs: %s/docs)\n", srv.Current().Model.Name(), url, url)
	if *watch {
		go mh.Watch(base, *watchEvery)
	}

	select {
	case <-ctx.Done():
	case err := <-serveErr:
		if err != nil {
			fmt.Fprintf(stderr, "fw serve: %v\n", err)
			return 1
		}
	}
	log.Info("shutting down: draining in-flight requests", "drain_delay", *drainDelay, "timeout", *shutdownTimeout)
	mh.BeginShutdown() // from here no reload makes /health 200 again
	if *drainDelay > 0 {
		time.Sleep(*drainDelay)
	}
	sctx, cancel := context.WithTimeout(context.Background(), *shutdownTimeout)
	defer cancel()
	code := 0
	grpcDone := make(chan struct{})
	go func() {
		defer close(grpcDone)
		if gs != nil {
			gsrv.BeginShutdown() // health watches and inference streams end instead of holding the stop
			stopGRPC(sctx, gs)
		}
	}()
	if err := hs.ShutdownWithContext(sctx); err != nil {
		log.Warn("shutdown: connections still open at the deadline", "err", err)
		code = 1
	}
	<-grpcDone
	if err := mh.Shutdown(sctx, *shutdownTimeout); err != nil {
		log.Warn("shutdown: the model did not drain in time", "err", err)
		code = 1
	}
	cancelBase()
	log.Info("stopped")
	return code
}

// modelFile returns path, or for a directory (KServe's /mnt/models, where
// its storage initializer puts the model) the one model file in it.
func modelFile(path string) (string, error) {
	st, err := os.Stat(path)
	if err != nil || !st.IsDir() {
		return path, nil // a missing file is reported by the load, with its reason
	}
	entries, err := os.ReadDir(path)
	if err != nil {
		return "", fmt.Errorf("--model %s: %w", path, err)
	}
	modelExts := []string{".onnx", ".pt", ".pth", ".pt2", ".ts", ".torchscript"}
	var found []string
	for _, e := range entries {
		name := e.Name()
		if strings.HasPrefix(name, ".") || !slices.Contains(modelExts, strings.ToLower(filepath.Ext(name))) {
			continue
		}
		if fi, err := os.Stat(filepath.Join(path, name)); err == nil && fi.Mode().IsRegular() {
			found = append(found, name)
		}
	}
	switch len(found) {
	case 1:
		return filepath.Join(path, found[0]), nil
	case 0:
		return "", fmt.Errorf("--model %s is a directory with no model file in it (%s); put the exported file there or pass the file itself", path, strings.Join(modelExts, ", "))
	}
	return "", fmt.Errorf("--model %s is a directory with %d model files (%s); pass the one to serve", path, len(found), strings.Join(found, ", "))
}

// stopGRPC stops gs gracefully (in-flight calls finish, new ones are
// refused), forcibly once ctx is done.
func stopGRPC(ctx context.Context, gs *grpc.Server) {
	done := make(chan struct{})
	go func() { gs.GracefulStop(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
		gs.Stop()
		<-done
	}
}

func loadAPIKeys(path string) ([]string, error) {
	var keys []string
	if v := os.Getenv("FW_API_KEYS"); v != "" {
		for _, k := range strings.Split(v, ",") {
			if k = strings.TrimSpace(k); k != "" {
				keys = append(keys, k)
			}
		}
	}
	if path != "" {
		b, err := os.ReadFile(path)
		if err != nil {
			return nil, fmt.Errorf("read --api-keys-file: %w", err)
		}
		for _, line := range strings.Split(string(b), "\n") {
			if k := strings.TrimSpace(line); k != "" && !strings.HasPrefix(k, "#") {
				keys = append(keys, k)
			}
		}
		if len(keys) == 0 {
			return nil, fmt.Errorf("--api-keys-file %s holds no keys", path)
		}
	}
	return keys, nil
}

func newLogger(w io.Writer, format, level string) (*slog.Logger, error) {
	var lv slog.Level
	if err := lv.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("--log-level %q: use debug, info, warn or error", level)
	}
	opts := &slog.HandlerOptions{Level: lv}
	switch format {
	case "text":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	}
	return nil, fmt.Errorf("--log-format %q: use text or json", format)
}

// slogPrintf adapts slog to fasthttp's Logger.
type slogPrintf struct{ log *slog.Logger }

func (l slogPrintf) Printf(format string, args ...any) { l.log.Warn(fmt.Sprintf(format, args...)) }
