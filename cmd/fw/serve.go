package main

import (
	"cmp"
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"runtime/debug"
	"slices"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/valyala/fasthttp"
	"google.golang.org/grpc"

	"github.com/fw-serve/fw/batcher"
	"github.com/fw-serve/fw/engine"
	"github.com/fw-serve/fw/grpcapi"
	"github.com/fw-serve/fw/httpapi"
	"github.com/fw-serve/fw/imageprep"
	"github.com/fw-serve/fw/internal/hostguard"
	"github.com/fw-serve/fw/internal/logswitch"
	"github.com/fw-serve/fw/internal/tritonlog"
	"github.com/fw-serve/fw/modelhost"
	"github.com/fw-serve/fw/modelrepo"
	"github.com/fw-serve/fw/pybackend"
	"github.com/fw-serve/fw/respcache"
	"github.com/fw-serve/fw/serving"
	"github.com/fw-serve/fw/sharedmem"
)

func runServe(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.SetOutput(stderr)
	ef := &envFlags{fs: fs}
	def := httpapi.DefaultConfig()
	bdef := batcher.DefaultConfig()
	model := ef.String("model", "", "exported model file to serve: ONNX (float or int8), TorchScript, quantized TorchScript or an AOTInductor .pt2 package; a directory holding exactly one such file (KServe's /mnt/models) serves that file (this or --model-repository is required)")
	repos := ef.List("model-repository", "a model repository in Triton's layout (DIR/<model>/config.pbtxt, DIR/<model>/<version>/model.onnx|model.pt|model.pt2) whose models are served side by side")
	controlMode := ef.String("model-control-mode", "none", "with --model-repository: none (load every model at start), explicit (load the --load-model ones; the repository API loads and unloads) or poll (load every model and follow the repository's changes)")
	loadModels := ef.List("load-model", "with --model-control-mode explicit: a model to load at start (* for all)")
	pollSecs := ef.Int("repository-poll-secs", 15, "with --model-control-mode poll: seconds between looks at the repository")
	shmMode := ef.String("shared-memory", "system", "Triton's system shared memory extension: system (its routes answer; clients register regions only with --allow-client-shm=true) or none")
	allowClientShm := ef.TritonBool("allow-client-shm", false, "tritonserver's option: let clients on this machine register POSIX shared memory regions (and CUDA ones, refused on this server) and pass tensors through them; off, register and unregister answer 501 / UNIMPLEMENTED with Triton's sentence and the status lists none (the server would map files of the client's choosing)")
	maxResident := ef.Int("max-resident-models", 0, "with --model-repository: at most this many models loaded at once; every model of the repository then loads on its first request (which waits at most --timeout, then 503 with Retry-After) and the least recently used are unloaded to make room (0: no bound, models load as the control mode says)")
	maxResidentBytes := ef.Int64("max-resident-bytes", 0, "with --model-repository: at most this many bytes of model files (times their instances) loaded at once, served on demand as with --max-resident-models (0: no bound)")
	httpRestricted := ef.List("http-restricted-api", "restrict an API category to requests with a header, as tritonserver's flag: CATEGORY[,CATEGORY...]:KEY=VALUE (categories health, metadata, inference, shared-memory, model-config, model-repository, statistics, trace, logging); others answer 403")
	grpcRestricted := ef.List("grpc-restricted-protocol", "the same for gRPC calls, whose metadata must carry triton-grpc-protocol-KEY: VALUE (tritonserver's flag); others answer PERMISSION_DENIED")
	traceConfigs := ef.List("trace-config", "request tracing, tritonserver's flag: [triton,]SETTING=VALUE with file=PATH (where traces are written, Triton's JSON), log-frequency=N (a file FILE.N every N traces; 0: FILE at shutdown), rate=N (trace one request in N), level=TIMESTAMPS|OFF, count=N (-1: no limit); GET/POST /v2/trace/setting changes them while serving")
	otelEndpoint := ef.String("otel-endpoint", "", "send OpenTelemetry traces to this OTLP receiver URL (http://HOST:4317 with --otel-protocol grpc, http://HOST:4318 for http/protobuf); default: OTEL_EXPORTER_OTLP_TRACES_ENDPOINT or OTEL_EXPORTER_OTLP_ENDPOINT; neither: no tracing")
	otelProtocol := ef.String("otel-protocol", "", "OTLP protocol, grpc or http/protobuf (default: OTEL_EXPORTER_OTLP_PROTOCOL, else http/protobuf)")
	otelRate := ef.String("otel-sample-rate", "", "fraction of requests traced, 0 to 1; a request whose traceparent is sampled is always traced (default: OTEL_TRACES_SAMPLER, else every request)")
	logPayloads := ef.String("log-payloads", "0", "fraction of requests whose inputs and outputs are logged (0 to 1; 0: off), for drift and audit: sent to --log-payloads-to without ever holding up a request")
	logPayloadsTo := ef.String("log-payloads-to", "", "where logged payloads go: the dashboard's URL (http://HOST:8080; records are POSTed to its /api/payloads, its token from FW_PAYLOADS_TOKEN), a bucket (s3://BUCKET/PREFIX, an NDJSON object a batch under PREFIX/payloads/YYYY/MM/DD/HH/; FW_S3_ENDPOINT, AWS_REGION, AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, FW_S3_PATH_STYLE=1) or a directory (JSONL files, one an hour)")
	logPayloadsRedact := ef.String("log-payloads-redact", "", "comma-separated input and output names whose values are never logged (their name, type and shape are)")
	logPayloadsSpool := ef.String("log-payloads-spool", "", "directory where payloads wait while the dashboard does not take them (at most 64 MiB; sent again, oldest first, once it does); empty: they are dropped, counted")
	logPayloadsDeployment := ef.String("log-payloads-deployment", "", "the name this server's payloads are filed under (the dashboard sets its deployment's ID)")
	traceFile := fs.String("trace-file", "", "tritonserver's older name for --trace-config triton,file=PATH")
	traceLevel := fs.String("trace-level", "", "tritonserver's older name for --trace-config level=LEVEL")
	traceRate := fs.String("trace-rate", "", "tritonserver's older name for --trace-config rate=N")
	traceCount := fs.String("trace-count", "", "tritonserver's older name for --trace-config count=N")
	traceFreq := fs.String("trace-log-frequency", "", "tritonserver's older name for --trace-config triton,log-frequency=N")
	pythonBin := ef.String("python", "", "with --model-repository: the interpreter (with numpy) that runs Python-backend models (backend \"python\", a model.py), one process per instance (default: FW_PYTHON, FW_VENV's, .venv's, then python3)")
	metricsPort := ef.Int("metrics-port", 0, "also serve GET /metrics on this port (tritonserver's metrics port, 8002 in Triton's examples); 0: only on --port. Beside fw's own series, /metrics carries Triton's nv_inference_* per model and version")
	exitOnError := ef.TritonBool("exit-on-error", true, "with --model-repository: exit when a model fails to load at start (false: serve the others; the failed ones are UNAVAILABLE in the repository index with their reasons)").p
	noAuto := ef.Bool("disable-auto-complete-config", false, "refuse a repository model without config.pbtxt instead of completing its configuration from the model file")
	host := ef.String("host", "127.0.0.1", "address to listen on; 0.0.0.0 for all interfaces (the container image sets it)")
	port := ef.Int("port", 8000, "port to listen on")
	grpcPort := ef.Int("grpc-port", 0, "port for the gRPC front end (the Open Inference Protocol's GRPCInferenceService, as Triton serves it on 8001, with grpc.health.v1) on --host; 0 turns it off")
	device := ef.String("device", "cpu", "compute device: cpu, cuda or cuda:N")
	maxBatch := ef.Int("max-batch-size", bdef.MaxBatchRows, "most rows coalesced into one engine call (counted in rows, not requests)")
	maxDelay := ef.Duration("max-delay", bdef.MaxDelay, "longest a request waits for others to share its engine call; 0 disables waiting")
	instances := ef.Int("instances", bdef.Instances, "engine instances: the model is loaded this many times (each its own session, so this many times the memory), one batcher worker each, so this many engine calls run at once; the CPU threads are split between them (as Triton's instance groups)")
	threads := ef.Int("threads", 0, "intra-op threads per engine call (0: fw's choice: available CPUs / instances, honouring cgroup quotas; or one when an ONNX model's calls, timed at load, are as fast with one: a small model)")
	maxQueue := ef.Int("max-queue", bdef.MaxQueue, "requests allowed to wait; beyond it the server answers 503 with Retry-After")
	timeout := ef.Duration("timeout", def.Timeout, "longest a request waits for its result (504 beyond it; its work is dropped)")
	maxBody := ef.Int64("max-body-bytes", def.MaxBodyBytes, "largest request body or gRPC message, counted decompressed when compressed (beyond it 413; on /v2, Triton's 400; over gRPC, RESOURCE_EXHAUSTED); NDJSON streams are bounded per line, and in total when compressed")
	fs.Int64Var(maxBody, "http-max-input-size", *maxBody, "tritonserver's name for --max-body-bytes (whichever is given last wins)")
	maxRows := ef.Int("max-rows", def.MaxRows, "most rows in one /predict request or batch item (413 beyond it)")
	maxPixels := ef.Int64("max-image-pixels", def.MaxImagePixels, "largest image (width*height, read from its header before decoding; 413 beyond it)")
	keysFile := ef.String("api-keys-file", "", "file with one API key per line; when set (or FW_API_KEYS holds comma-separated keys) the prediction and V2 endpoints need `Authorization: Bearer KEY`")
	allowedHosts := ef.String("allowed-hosts", "", "comma-separated extra Host names the server answers to (name, name:port, .domain, or * for any); when bound to loopback only localhost, 127.0.0.1 and ::1 are accepted by default (against DNS rebinding); on other addresses no check unless this is set; /health answers any Host")
	watch := ef.Bool("watch", false, "reload the model when its file changes: the new one is loaded and warmed up beside the old, then swapped in; a broken file is refused and the old one keeps serving")
	watchEvery := ef.Duration("watch-interval", time.Second, "how often --watch checks the file")
	shutdownTimeout := ef.Duration("shutdown-timeout", 30*time.Second, "on SIGTERM: stop accepting, finish in-flight requests, exit within this time")
	drainDelay := ef.Duration("drain-delay", 0, "on SIGTERM: keep serving this long with /health answering 503 before closing the listener, so load balancers stop sending first (Kubernetes: a few seconds)")
	accessLog := ef.Bool("access-log", false, "log every request")
	pprofOn := ef.Bool("pprof", false, "serve Go's runtime profiles under /debug/pprof/ on --port (CPU: /debug/pprof/profile?seconds=N, heap, goroutines) for `go tool pprof`, behind --api-key when set; off by default: profiles show the server's internals")
	logFormat := ef.String("log-format", "text", "log format: text or json, or tritonserver's default or ISO8601 (its own line layout, messages escaped unless TRITON_SERVER_ESCAPE_LOG_MESSAGES=0)")
	logLevel := ef.String("log-level", "info", "log level: debug, info, warn or error")
	graphOpt := ef.String("graph-optimization", "all", "ONNX Runtime graph optimisation: disable, basic, extended or all")
	allowNonFinite := ef.Bool("allow-nonfinite", false, "pass NaN and Inf inputs to the model instead of refusing them with 422")
	noWarmup := ef.Bool("no-warmup", false, "skip the warm-up batches (the embedded test vector still runs)")
	gcPercent := ef.Int("gc-percent", defaultGCPercent, "Go's garbage collector target for this process, as GOGC: the heap grows this many percent past what is live before a collection (25 to 10000). fw's default 400 collects a quarter as often as Go's 100, whose collections, each shrinking the stacks of the goroutines serving requests that then grow again, cost about a quarter of a small model's gRPC request's CPU (docs/benchmarks.md); lower it to spend CPU for memory. GOGC, when set and this flag is not, is taken as Go takes it")
	spin := ef.Bool("engine-spin", false, "let ONNX Runtime's threads busy-wait between calls (lower latency when the engine has CPUs to itself; off: they leave the CPUs to the HTTP front end)")
	triton := registerTritonOptions(ef, port, shutdownTimeout)
	fs.Usage = func() {
		fmt.Fprintf(stderr, `Usage: fw serve --model PATH [flags]
       fw serve --model-repository DIR [--model-control-mode none|explicit|poll] [flags]

Serves one exported model, or every model of a Triton-layout model repository
(each with its own batcher, instances and statistics; ensembles, platform
"ensemble", run pipelines of them), over HTTP: POST /predict
(JSON rows; ?model=NAME picks a model when several are served), /predict/image,
/predict/batch (JSON or streaming NDJSON), the Open Inference Protocol under /v2
(with Triton's model configuration, statistics and model repository extensions), GET /health (/health/live,
/health/ready), /model, /metrics (Prometheus), /docs; and, with --grpc-port, over
gRPC (the Open Inference Protocol's GRPCInferenceService and grpc.health.v1).
Concurrent requests are coalesced into engine calls by a dynamic micro-batcher.
Every flag can also be set from the environment variable named in brackets.
tritonserver's options are taken too, so that a Triton command line moves over
with the binary's name changed (docs/serving.md, "Moving from Triton"); as
tritonserver's, a long option may be shortened to a prefix only it has
(--log-warn for --log-warning).

Flags:
`)
		fs.PrintDefaults()
	}
	args, err := expandPrefixes(fs, args)
	if err != nil {
		fmt.Fprintf(stderr, "fw serve: %v\n", err)
		return 2
	}
	if code, ok := ef.parse("fw serve", args, stderr); !ok {
		return code
	}
	if err := setGCPercent(fs, *gcPercent); err != nil {
		fmt.Fprintf(stderr, "fw serve: %v\n", err)
		return 2
	}
	if *model == "" && fs.NArg() == 1 {
		*model = fs.Arg(0)
	}
	if *model == "" && len(*repos) == 0 {
		fmt.Fprintln(stderr, "fw serve: --model is required (or FW_MODEL: the exported .onnx or .pt file to serve), or --model-repository (a Triton-layout directory of models)")
		return 2
	}
	if *model != "" && len(*repos) > 0 {
		fmt.Fprintln(stderr, "fw serve: give --model or --model-repository, not both (put the file in the repository as <name>/1/model.onnx)")
		return 2
	}
	mode, err := modelrepo.ParseMode(*controlMode)
	if err != nil {
		fmt.Fprintf(stderr, "fw serve: %v\n", err)
		return 2
	}
	if len(*loadModels) > 0 && mode != modelrepo.ModeExplicit {
		fmt.Fprintln(stderr, "fw serve: --load-model needs --model-control-mode explicit (in none and poll modes every model loads)")
		return 2
	}
	if triton.configName != "" && len(*repos) == 0 {
		fmt.Fprintln(stderr, "fw serve: --model-config-name needs --model-repository (it picks each model's configs/NAME.pbtxt)")
		return 2
	}
	if *watch && len(*repos) > 0 {
		fmt.Fprintln(stderr, "fw serve: --watch follows the --model file; a repository follows its changes with --model-control-mode poll")
		return 2
	}
	if *shmMode != "system" && *shmMode != "none" {
		fmt.Fprintln(stderr, "fw serve: --shared-memory must be system or none")
		return 2
	}
	if *shmMode == "none" && *allowClientShm.p {
		fmt.Fprintln(stderr, "fw serve: --allow-client-shm=true needs --shared-memory system")
		return 2
	}
	if (*maxResident != 0 || *maxResidentBytes != 0) && len(*repos) == 0 {
		fmt.Fprintln(stderr, "fw serve: --max-resident-models and --max-resident-bytes need --model-repository")
		return 2
	}
	if *maxResident < 0 || *maxResidentBytes < 0 {
		fmt.Fprintln(stderr, "fw serve: --max-resident-models and --max-resident-bytes must be 0 (no bound) or positive")
		return 2
	}
	restrictedHTTP, err := serving.ParseRestrictions(*httpRestricted, "api")
	if err != nil {
		fmt.Fprintf(stderr, "fw serve: --http-restricted-api: %v\n", err)
		return 2
	}
	restrictedGRPC, err := serving.ParseRestrictions(*grpcRestricted, "protocol")
	if err != nil {
		fmt.Fprintf(stderr, "fw serve: --grpc-restricted-protocol: %v\n", err)
		return 2
	}
	tset, err := triton.resolve(*host, logLevel, noAuto, grpcPort, metricsPort)
	if err != nil {
		fmt.Fprintf(stderr, "fw serve: %v\n", err)
		return 2
	}
	if *pollSecs < 1 {
		fmt.Fprintln(stderr, "fw serve: --repository-poll-secs must be at least 1")
		return 2
	}
	if *model != "" {
		modelPath, err := modelFile(*model)
		if err != nil {
			fmt.Fprintf(stderr, "fw serve: %v\n", err)
			return 2
		}
		*model = modelPath
	}
	logTo := stderr
	if tset.logFile != "" {
		f, err := os.OpenFile(tset.logFile, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
		if err != nil {
			fmt.Fprintf(stderr, "fw serve: --log-file: %v\n", err)
			return 2
		}
		defer f.Close()
		logTo = f
	}
	log, logSeverities, logLines, err := newLevelLogger(logTo, *logFormat, *logLevel)
	if err != nil {
		fmt.Fprintf(stderr, "fw serve: %v\n", err)
		return 2
	}
	if tset.logSwitches != nil {
		logSeverities.Set(*tset.logSwitches)
	}
	tset.logNotes(log)
	hosts, err := hostguard.New(tset.httpHost, hostguard.ParseList(*allowedHosts))
	if err != nil {
		fmt.Fprintf(stderr, "fw serve: %v\n", err)
		return 2
	}
	keys, err := loadAPIKeys(*keysFile)
	if err != nil {
		fmt.Fprintf(stderr, "fw serve: %v\n", err)
		return 2
	}
	delayScheduler, err := delaySchedulerFrom("TRITONSERVER_DELAY_SCHEDULER", os.Getenv("TRITONSERVER_DELAY_SCHEDULER"))
	if err != nil {
		fmt.Fprintf(stderr, "fw serve: %v\n", err)
		return 2
	}
	backlogDelay, err := delaySchedulerFrom("TRITONSERVER_BACKLOG_DELAY_SCHEDULER", os.Getenv("TRITONSERVER_BACKLOG_DELAY_SCHEDULER"))
	if err != nil {
		fmt.Fprintf(stderr, "fw serve: %v\n", err)
		return 2
	}
	if *instances < 1 || *maxBatch < 1 || *maxQueue < 1 || *port < 0 || *port > 65535 || *grpcPort < 0 || *grpcPort > 65535 {
		fmt.Fprintln(stderr, "fw serve: --instances, --max-batch-size and --max-queue must be at least 1, --port and --grpc-port within 0..65535")
		return 2
	}
	cpus := engine.AvailableCPUs()
	perCall := *threads
	if perCall == 0 {
		perCall = max(1, cpus / *instances)
	}

	ln, ok := listen("fw serve", tset.httpHost, *port, stderr)
	if !ok {
		return 1
	}
	var gln, mln net.Listener
	if *grpcPort > 0 {
		if gln, ok = listenFlag("fw serve", "--grpc-port", tset.grpcHost, *grpcPort, stderr); !ok {
			ln.Close()
			return 1
		}
	}
	if *metricsPort > 0 {
		if mln, ok = listenFlag("fw serve", "--metrics-port", tset.metricsHost, *metricsPort, stderr); !ok {
			ln.Close()
			if gln != nil {
				gln.Close()
			}
			return 1
		}
		defer mln.Close()
	}

	base, cancelBase := context.WithCancel(context.Background())
	defer cancelBase()
	reg := prometheus.NewRegistry()
	metrics := httpapi.NewMetrics(reg)
	pyMetrics := pybackend.NewMetrics("fw_", "nv_", "go_", "process_", "promhttp_") // Python models' custom metrics, beside the server's own
	reg.MustRegister(pyMetrics)
	engineOpts := withLibraries(engine.Options{Device: engine.Device(*device), Threads: perCall, GraphOptimization: *graphOpt,
		AllowNonFinite: *allowNonFinite, Spin: *spin})
	batchCfg := batcher.Config{MaxBatchRows: *maxBatch, MaxDelay: *maxDelay, Instances: *instances, MaxQueue: *maxQueue, CallerRuns: true}
	tracer, tritonOTel, err := traceConfig(*traceConfigs, *traceFile, *traceLevel, *traceRate, *traceCount, *traceFreq)
	if err != nil {
		ln.Close()
		if gln != nil {
			gln.Close()
		}
		fmt.Fprintf(stderr, "fw serve: %v\n", err)
		return 2
	}
	defer func() {
		if err := tracer.Close(); err != nil {
			log.Error("writing the traces", "err", err)
		}
	}()
	getenv := os.Getenv
	if tritonOTel != nil { // tritonserver's --trace-config mode=opentelemetry; --otel-* flags still win
		getenv = tritonOTel.otelEnv(os.Getenv)
	}
	otel, err := otelTracer(getenv, *otelEndpoint, *otelProtocol, *otelRate, "fw-serve", version, log)
	if err != nil {
		ln.Close()
		if gln != nil {
			gln.Close()
		}
		fmt.Fprintf(stderr, "fw serve: %v\n", err)
		return 2
	}
	defer stopTracer(otel, log) // a nil tracer has nothing to send
	// The models' lifecycle owns what the transports read: what serves now
	// and whether it is ready. One file is a modelhost.Host; a repository
	// is a modelrepo.Repository of hosts.
	var life lifecycle
	var models serving.Models
	if *model != "" {
		// A few sample pictures: a reload of the watched file finds its
		// image test case's tensor when the picture is unchanged.
		mh := modelhost.New(modelhost.Config{Path: *model, Engine: engineOpts, Batcher: batchCfg, SkipWarmup: *noWarmup, Tracer: otel,
			TryOneThread: *threads == 0, Threads: &modelhost.ThreadMemo{},
			ImageSamples: imageprep.NewSampleCache(8 << 20)}, metrics, log)
		life, models = mh, serving.One(mh)
	} else {
		if *threads == 0 {
			engineOpts.Threads = 0 // each model splits the CPUs between its own instances
		}
		if delayScheduler > 0 || backlogDelay > 0 {
			log.Warn("TRITONSERVER_DELAY_SCHEDULER or TRITONSERVER_BACKLOG_DELAY_SCHEDULER is set: each dynamically batched model, and each direct sequence model, forms its first batch only once that many requests are queued (Triton's test hooks; unset them in production)",
				"requests", delayScheduler, "backlog_requests", backlogDelay)
		}
		repo, err := modelrepo.New(modelrepo.Config{
			Roots: *repos, Mode: mode, LoadModels: *loadModels, PollInterval: time.Duration(*pollSecs) * time.Second,
			DisableAutoComplete: *noAuto, ConfigName: tset.configName, ResponseCache: responseCache(tset.cacheBytes), Engine: engineOpts, CPUs: cpus, Batcher: batchCfg, SkipWarmup: *noWarmup, Tracer: otel,
			MaxResidentModels: *maxResident, MaxResidentBytes: *maxResidentBytes, LoadWait: *timeout,
			Python: cmp.Or(*pythonBin, pythonPath()), KeepGoing: !*exitOnError, PythonMetrics: pyMetrics,
			DelayScheduler: delayScheduler, BacklogDelay: backlogDelay,
		}, metrics, log)
		if err != nil {
			ln.Close()
			if gln != nil {
				gln.Close()
			}
			fmt.Fprintf(stderr, "fw serve: %v\n", err)
			return 2
		}
		life, models = repo, repo
	}
	logSettings := serving.NewLogSettings(logSeverities, *logFormat, tset.logFile, logLines) // Triton's logging extension, both front ends
	payloads, err := payloadLogger(*logPayloads, *logPayloadsTo, *logPayloadsRedact, *logPayloadsSpool, *logPayloadsDeployment, os.Getenv("FW_PAYLOADS_TOKEN"), reg, log)
	if err != nil {
		fmt.Fprintf(stderr, "fw serve: %v\n", err)
		return 2
	}
	if payloads != nil {
		defer func() {
			cctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if err := payloads.Close(cctx); err != nil {
				log.Error("sending the last payload records", "err", err)
			}
		}()
	}
	var shm *sharedmem.Registry // one registry for both front ends
	if *shmMode == "system" {
		shm = sharedmem.New("", *allowClientShm.p)
		defer shm.Close()
	}
	srv := httpapi.New(base, httpapi.Config{
		MaxBodyBytes: *maxBody, MaxRows: *maxRows, MaxImagePixels: *maxPixels, Timeout: *timeout,
		APIKeys: keys, AccessLog: *accessLog, Version: version, Name: tset.name, ForwardHeaders: tset.httpForward, Hosts: hosts, SharedMemory: shm, Logging: logSettings,
		Restricted: restrictedHTTP, Tracer: tracer, Telemetry: otel, Payloads: payloads, Pprof: *pprofOn,
	}, models, metrics, log, reg)
	hs := &fasthttp.Server{
		Handler:            srv.Handler,
		Name:               "fw",
		MaxRequestBodySize: int(min(*maxBody, int64(1<<31-1))),
		// Request heads up to 16 KiB (fasthttp's default is 4 KiB), as the
		// dashboard's: a long query string reaches the handler, which names
		// the bad parameter with 400, instead of a bare 431 (schemathesis
		// sent one to /predict/image).
		ReadBufferSize:               16 << 10,
		StreamRequestBody:            true,
		DisablePreParseMultipartForm: true,
		ReadTimeout:                  60 * time.Second,
		IdleTimeout:                  120 * time.Second,
		CloseOnShutdown:              true,
		Logger:                       slogPrintf{log},
	}
	serveErr := make(chan error, 3)
	go func() { serveErr <- hs.Serve(ln) }()
	reg.MustRegister(httpapi.NewTritonCollector(models))
	if mln != nil {
		ms := &fasthttp.Server{Handler: httpapi.MetricsOnly(reg), Name: "fw", ReadTimeout: 60 * time.Second, IdleTimeout: 120 * time.Second, Logger: slogPrintf{log}}
		go func() {
			if err := ms.Serve(mln); err != nil {
				serveErr <- fmt.Errorf("metrics: %w", err)
			}
		}()
		defer func() { _ = ms.Shutdown() }()
		fmt.Fprintf(stdout, "fw serve: metrics on http://%s/metrics\n", mln.Addr())
	}
	url := "http://" + ln.Addr().String()
	log.Info("listening", "url", url, "model", *model, "model_repository", strings.Join(*repos, ","))
	var gs *grpc.Server
	var gsrv *grpcapi.Server
	if gln != nil {
		gsrv = grpcapi.New(base, grpcapi.Config{
			MaxMessageBytes: int(min(*maxBody, int64(1<<31-1))), MaxRows: *maxRows, Timeout: *timeout,
			APIKeys: keys, Version: version, Name: tset.name, ForwardHeaders: tset.grpcForward, SharedMemory: shm, Logging: logSettings, Restricted: restrictedGRPC, Tracer: tracer, Telemetry: otel, Payloads: payloads,
		}, models, reg, log)
		gs = grpc.NewServer(append(gsrv.ServerOptions(), tset.grpcOptions...)...)
		gsrv.Register(gs)
		go func() {
			if err := gs.Serve(gln); err != nil {
				serveErr <- fmt.Errorf("gRPC: %w", err)
			}
		}()
		log.Info("listening (gRPC)", "addr", gln.Addr().String())
		fmt.Fprintf(stdout, "fw serve: gRPC (Open Inference Protocol) on %s\n", gln.Addr())
	}

	if err := life.Start(ctx); err != nil {
		fmt.Fprintf(stderr, "fw serve: %v\n", err)
		hs.Shutdown()
		if gs != nil {
			gs.Stop()
		}
		_ = life.Shutdown(context.Background(), *shutdownTimeout)
		return 1
	}
	// Ready: tritonserver's lines, which scripts and tools written for it
	// wait for in its log, in the order and at the moment it writes them.
	if gln != nil {
		log.Info("Started GRPCInferenceService at " + gln.Addr().String())
	}
	log.Info("Started HTTPService at " + ln.Addr().String())
	if mln != nil {
		log.Info("Started Metrics Service at " + mln.Addr().String())
	}
	if inst := srv.Current(); inst != nil {
		fmt.Fprintf(stdout, "fw serve: %s ready on %s (docs: %s/docs)\n", inst.Name(), url, url)
	} else {
		fmt.Fprintf(stdout, "fw serve: %d models ready on %s (docs: %s/docs)\n", len(models.Loaded()), url, url)
	}
	if *watch {
		if mh, ok := life.(*modelhost.Host); ok {
			go mh.Watch(base, *watchEvery)
		}
	}
	if repo, ok := life.(*modelrepo.Repository); ok && mode == modelrepo.ModePoll {
		go repo.Watch(base)
	}

	select {
	case <-ctx.Done():
	case err := <-serveErr:
		if err != nil {
			fmt.Fprintf(stderr, "fw serve: %v\n", err)
			return 1
		}
	}
	// Draining, in tritonserver's sentence.
	log.Info("Waiting for in-flight requests to complete.", "drain_delay", *drainDelay, "timeout", *shutdownTimeout)
	life.BeginShutdown() // from here no reload makes /health 200 again
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
	if err := life.Shutdown(sctx, *shutdownTimeout); err != nil {
		log.Warn("shutdown: the model did not drain in time", "err", err)
		code = 1
	}
	cancelBase()
	log.Info("stopped")
	return code
}

// responseCache is the server's response cache of bytes (nil for 0).
func responseCache(bytes int64) *respcache.Cache {
	if bytes <= 0 {
		return nil
	}
	return respcache.New(bytes)
}

// lifecycle is what loads, serves and drains the models: a modelhost.Host
// for one file, a modelrepo.Repository for a repository.
type lifecycle interface {
	Start(ctx context.Context) error
	BeginShutdown()
	Shutdown(ctx context.Context, timeout time.Duration) error
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
	modelExts := engine.ModelFileExts()
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
	log, _, _, err := newLevelLogger(w, format, level)
	return log, err
}

// newLevelLogger is newLogger with each severity switched on and off at
// run time (Triton's logging extension, logswitch), and the switch of its
// format: tritonserver's (default, ISO8601: its own line layout, tritonlog),
// or fw's own (text, json: tritonlog.Native) until the extension asks for
// one of tritonserver's.
func newLevelLogger(w io.Writer, format, level string) (*slog.Logger, *logswitch.Switches, *tritonlog.Switch, error) {
	var lv slog.Level
	if err := lv.UnmarshalText([]byte(level)); err != nil {
		return nil, nil, nil, fmt.Errorf("--log-level %q: use debug, info, warn or error", level)
	}
	sev := logswitch.New(lv)
	all := &slog.HandlerOptions{Level: slog.LevelDebug} // the switches choose
	var native slog.Handler
	switch format {
	case "text":
		native = slog.NewTextHandler(w, all)
	case "json":
		native = slog.NewJSONHandler(w, all)
	}
	if native != nil { // fw's own lines, until the logging extension asks for tritonserver's
		sw := new(tritonlog.Switch)
		sw.Set(tritonlog.Native)
		return slog.New(logswitch.Wrap(tritonlog.NewSwitched(native, w, slog.LevelDebug, sw), sev)), sev, sw, nil
	}
	if f, ok := tritonlog.ParseFormat(format); ok {
		sw := new(tritonlog.Switch)
		sw.Set(f)
		return slog.New(logswitch.Wrap(tritonlog.New(w, slog.LevelDebug, sw), sev)), sev, sw, nil
	}
	return nil, nil, nil, fmt.Errorf("--log-format %q: use text or json, or tritonserver's default or ISO8601", format)
}

// slogPrintf adapts slog to fasthttp's Logger.
type slogPrintf struct{ log *slog.Logger }

func (l slogPrintf) Printf(format string, args ...any) { l.log.Warn(fmt.Sprintf(format, args...)) }

// defaultGCPercent is fw serve's garbage collector target (--gc-percent).
const defaultGCPercent = 400

// setGCPercent sets the collector's target to percent unless GOGC is set
// and neither --gc-percent nor FW_GC_PERCENT is (then Go's runtime has
// taken GOGC already).
func setGCPercent(fs *flag.FlagSet, percent int) error {
	if percent < 25 || percent > 10000 {
		return fmt.Errorf("--gc-percent %d: give 25 to 10000 (GOGC's percent; Go's default is 100, fw serve's %d)", percent, defaultGCPercent)
	}
	given := false
	fs.Visit(func(f *flag.Flag) { given = given || f.Name == "gc-percent" })
	_, fromEnv := os.LookupEnv("FW_GC_PERCENT")
	if _, gogc := os.LookupEnv("GOGC"); gogc && !given && !fromEnv {
		return nil
	}
	debug.SetGCPercent(percent)
	return nil
}
