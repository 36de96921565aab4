package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/valyala/fasthttp"

	"github.com/fw-serve/fw/dashboard/api"
	"github.com/fw-serve/fw/dashboard/blob"
	"github.com/fw-serve/fw/dashboard/jobs"
	"github.com/fw-serve/fw/dashboard/jobs/ray"
	"github.com/fw-serve/fw/dashboard/mlflow"
	"github.com/fw-serve/fw/dashboard/registry"
	"github.com/fw-serve/fw/dashboard/replica"
	"github.com/fw-serve/fw/dashboard/store"
	"github.com/fw-serve/fw/dashboard/stream"
	"github.com/fw-serve/fw/dashboard/sysinfo"
	"github.com/fw-serve/fw/dashboard/tracking"
	"github.com/fw-serve/fw/dashboard/webui"
	"github.com/fw-serve/fw/engine"
	"github.com/fw-serve/fw/internal/hostguard"
)

// isLoopback reports whether host only accepts local connections.
func isLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

func runDashboard(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("dashboard", flag.ContinueOnError)
	fs.SetOutput(stderr)
	de := &envFlags{fs: fs}
	host := de.StringEnv("host", "FW_DASHBOARD_HOST", "127.0.0.1", "address to listen on; anything but loopback requires --token")
	port := de.IntEnv("port", "FW_DASHBOARD_PORT", 8080, "port to listen on")
	token := de.StringEnv("token", "FW_DASHBOARD_TOKEN", "", "when set, every /api route needs `Authorization: Bearer TOKEN` (/health stays open); prefer the environment variable, flags show in ps")
	expDir := de.StringEnv("experiment-dir", "FW_EXPERIMENT_DIR", "experiments", "directory of the SQLite store and the SDK's spool files (spool/*.jsonl); created if missing")
	ckptDir := de.StringEnv("checkpoint-dir", "FW_CHECKPOINT_DIR", "checkpoints", "root of the runs' checkpoints (<dir>/<run id>/...); created if missing")
	spoolEvery := de.DurationEnv("spool-interval", "FW_DASHBOARD_SPOOL_INTERVAL", 2*time.Second, "how often spool files left by offline training processes are imported")
	staleAfter := de.DurationEnv("stale-after", "FW_DASHBOARD_STALE_AFTER", 24*time.Hour, "on start, a running run without an event for this long is marked failed (0: only the pid check on this host)")
	shutdownTimeout := de.DurationEnv("shutdown-timeout", "FW_DASHBOARD_SHUTDOWN_TIMEOUT", 30*time.Second, "on SIGTERM: finish in-flight requests within this time, then close the store")
	maxJobs := de.IntEnv("max-jobs", "FW_DASHBOARD_MAX_JOBS", max(1, runtime.NumCPU()/2), "local training jobs (POST /api/training/start) running at once; the rest wait queued (with --executor ray, Ray queues jobs by their resources)")
	stopGrace := de.DurationEnv("stop-grace", "FW_DASHBOARD_STOP_GRACE", 10*time.Second, "a stopped training job gets SIGTERM, then SIGKILL after this long (on Ray: RAY_JOB_STOP_WAIT_TIME_S)")
	recipesFile := de.StringEnv("recipes", "FW_RECIPES", "", "TOML or YAML (.yaml, .yml) file of user training recipes (see docs/tracking.md, Training jobs)")
	executor := de.StringEnv("executor", "FW_DASHBOARD_EXECUTOR", "local", "where training jobs run: local (child processes of the dashboard) or ray (jobs on a Ray cluster through its Jobs REST API, --ray-address; docs/ray.md)")
	rayAddress := de.StringEnv("ray-address", "FW_RAY_ADDRESS", "", "with --executor ray: the Ray head's dashboard, http(s)://HOST:8265 (the only address of the cluster the dashboard calls)")
	rayPython := de.StringEnv("ray-python", "FW_RAY_PYTHON", "", "with --executor ray: the Python with the fw package on the Ray nodes, run as the jobs' entrypoint (default: the dashboard's own, FW_PYTHON)")
	rayLostAfter := de.DurationEnv("ray-lost-after", "FW_RAY_LOST_AFTER", 60*time.Second, "with --executor ray: a job whose head has not answered for this long is given up and its run failed")
	trackingURI := de.StringEnv("tracking-uri", "FW_DASHBOARD_TRACKING_URI", "", "the URL training jobs send their events to (their FW_TRACKING_URI; default http://<listen address>); set it when jobs run on other machines (--executor ray)")
	streamBuffer := de.IntEnv("stream-buffer", "FW_DASHBOARD_STREAM_BUFFER", stream.DefaultRingEvents, "events kept for the live stream's replay (/api/training/stream, docs/stream.md): in the store's feed table and in this process's memory")
	streamHeartbeat := de.DurationEnv("stream-heartbeat", "FW_DASHBOARD_STREAM_HEARTBEAT", stream.DefaultHeartbeat, "how often the live stream sends a heartbeat with the current cursor")
	allowedHosts := de.StringEnv("allowed-hosts", "FW_DASHBOARD_ALLOWED_HOSTS", "", "comma-separated extra Host names the dashboard answers to (name, name:port, .domain, or * for any); by default only localhost, 127.0.0.1 and ::1 when bound to loopback, and no check on other addresses (the token protects them) unless this is set; /health and /metrics answer any Host")
	corsOrigins := de.StringEnv("cors-origins", "FW_DASHBOARD_CORS_ORIGINS", "", "comma-separated origins (https://ui.example.com) whose pages may call the API from a browser; default none: only the dashboard's own pages may change its data")
	sortIndexRuns := de.IntEnv("sort-index-runs", "FW_DASHBOARD_SORT_INDEX_RUNS", store.DefaultSortIndexRuns, "a finished experiment (no run running or queued) whose metric keys this many runs report gets, once writes pause for 3s, the indexes that serve its run pages sorted by each key's last, min and max value, before anyone sorts (docs/tracking.md, How a page of one experiment's runs is read); 0: only on a key's first sort, which is then a full sort")
	sysInterval := de.DurationEnv("system-interval", "FW_DASHBOARD_SYSTEM_INTERVAL", time.Second, "how often the host's CPU, memory, disk and GPU are sampled (GET /api/system/status, /metrics)")
	sysHistory := de.DurationEnv("system-history", "FW_DASHBOARD_SYSTEM_HISTORY", 5*time.Minute, "how long samples are kept in memory for the home page's charts (GET /api/system/history)")
	maxArtifactMiB := de.IntEnv("max-artifact-mib", "FW_DASHBOARD_MAX_ARTIFACT_MIB", mlflow.DefaultMaxArtifactBytes>>20, "largest file uploaded through MLflow's artifact API (PUT /api/2.0/mlflow-artifacts/artifacts/...) or fw's run-file upload (PUT /api/runs/{id}/files), in MiB")
	uiDir := de.StringEnv("ui-dir", "FW_DASHBOARD_UI_DIR", "", "serve the web UI from this directory (a `vite build --outDir DIR`) instead of the one built into the binary; for working on the UI")
	replicaURL := de.StringEnv("replica-url", "FW_DASHBOARD_REPLICA_URL", "", "with several dashboards on one PostgreSQL (docs/replicas.md): the URL at which the other replicas reach this one's API (requests about a job or deployment it owns are forwarded there); default http://<the listen address>")
	artifactURI := de.StringEnv("artifact-uri", "FW_ARTIFACT_URI", "", "where the model registry's version files are kept: empty for <experiment-dir>/models (a shared directory for replicas), or s3://bucket/prefix for S3-compatible object storage (FW_S3_ENDPOINT, AWS_REGION, AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, FW_S3_PATH_STYLE=1; docs/replicas.md), which also keeps the run artifacts uploaded through MLflow's artifact API and copies of the checkpoints and artifacts training processes write on a replica's host; a deployment, export or resume fetches what it needs from the bucket into <experiment-dir>/cache")
	artifactsDestination := de.StringEnv("artifacts-destination", "FW_DASHBOARD_ARTIFACTS_DESTINATION", "", "MLflow's --artifacts-destination: where the artifact proxy (/api/2.0/mlflow-artifacts/artifacts) keeps what MLflow's clients upload, in MLflow's own layout (a run's files under <experiment id>/<run id>/artifacts/, logged models' and other paths as given), so a directory or bucket an MLflow server wrote reads as it is: a local directory (a path or file:// URI) or s3://bucket/prefix (FW_S3_ENDPOINT, AWS_* as --artifact-uri); runs keep mlflow-artifacts:/ URIs; not with --default-artifact-root; default: MLflow runs' files go into the dashboard's artifact storage (<run id>/<path>) (docs/mlflow.md)")
	defaultArtifactRoot := de.StringEnv("default-artifact-root", "FW_DASHBOARD_DEFAULT_ARTIFACT_ROOT", "", "MLflow's --default-artifact-root without artifact serving: a local directory (a path or file:// URI) or s3://bucket/prefix (reached with FW_S3_ENDPOINT, AWS_* as --artifact-uri): experiments created through MLflow's API get <root>/<experiment id> as their artifact location, MLflow's client writes the runs' files there itself (a shared file system, or the bucket with its own credentials) and the dashboard reads them back from there; default: MLflow runs' files go through the dashboard's artifact proxy into its artifact storage (docs/mlflow.md)")
	leaseTTL := de.DurationEnv("lease-ttl", "FW_DASHBOARD_LEASE_TTL", replica.DefaultTTL, "how long the training jobs and deployments of a dashboard replica that stopped wait before another replica takes them over (renewed every third of it; a replica on the same host whose process is gone is taken over at once)")
	otelEndpoint := de.StringEnv("otel-endpoint", "FW_DASHBOARD_OTEL_ENDPOINT", "", "send OpenTelemetry traces of the API's requests to this OTLP receiver URL (as fw serve's flag; default: OTEL_EXPORTER_OTLP_TRACES_ENDPOINT or OTEL_EXPORTER_OTLP_ENDPOINT; neither: no tracing)")
	otelProtocol := de.StringEnv("otel-protocol", "FW_DASHBOARD_OTEL_PROTOCOL", "", "OTLP protocol, grpc or http/protobuf (default: OTEL_EXPORTER_OTLP_PROTOCOL, else http/protobuf)")
	otelRate := de.StringEnv("otel-sample-rate", "FW_DASHBOARD_OTEL_SAMPLE_RATE", "", "fraction of requests traced, 0 to 1; a request whose traceparent is sampled is always traced (default: OTEL_TRACES_SAMPLER, else every request)")
	deployTraceRate := de.StringEnv("deployment-trace-rate", "FW_DASHBOARD_DEPLOYMENT_TRACE_RATE", "0.01", "fraction of requests the managed deployments trace into the dashboard's trace store (their OpenTelemetry traces, sent to its POST /v1/traces; a request whose caller traced it, and every request through the dashboard's proxy such as the UI's Try it, are traced whatever the rate); off: deployments keep the OTEL_* environment they inherit")
	deployPayloadRate := de.StringEnv("deployment-payload-rate", "FW_DASHBOARD_DEPLOYMENT_PAYLOAD_RATE", "0", "fraction of requests whose inputs and outputs the managed deployments log to the dashboard (fw serve --log-payloads; the model page's Traffic card compares them with a reference for drift); 0: off")
	payloadRetention := de.DurationEnv("payload-retention", "FW_DASHBOARD_PAYLOAD_RETENTION", api.DefaultPayloadRetention, "how long the dashboard keeps the request/response records deployments log")
	payloadMax := de.IntEnv("payload-max-records", "FW_DASHBOARD_PAYLOAD_MAX_RECORDS", api.DefaultPayloadMaxRecords, "most request/response records the dashboard keeps (the oldest received go first)")
	traceRetention := de.DurationEnv("trace-retention", "FW_DASHBOARD_TRACE_RETENTION", api.DefaultTraceRetention, "how long the trace store keeps the spans it receives")
	traceMaxSpans := de.IntEnv("trace-max-spans", "FW_DASHBOARD_TRACE_MAX_SPANS", api.DefaultTraceMaxSpans, "most spans the trace store keeps (the oldest received go first)")
	logFormat := de.StringEnv("log-format", "FW_LOG_FORMAT", "text", "log format: text or json")
	logLevel := de.StringEnv("log-level", "FW_LOG_LEVEL", "info", "log level: debug, info, warn or error")
	fs.Usage = func() {
		fmt.Fprintf(stderr, `Usage: fw dashboard [flags]

Serves the dashboard: the web UI at / (Home, Experiments, Models, Training),
its API under /api (experiments and runs, metrics and logs, compare, training
jobs from registered recipes, run as child processes or, with --executor ray
--ray-address http://HOST:8265, as jobs on a Ray cluster (docs/ray.md), the
model registry with export and deploy,
system status; GET /docs and /openapi.json describe it), the SDK's ingest
endpoint POST /api/ingest, MLflow's tracking REST API under
/api/2.0/mlflow (MLFLOW_TRACKING_URI=http://HOST:PORT; docs/mlflow.md), the
live stream WS /api/training/stream
(docs/stream.md), GET /health and GET /metrics (Prometheus). The store is
SQLite in --experiment-dir, or PostgreSQL when FW_DATABASE_URL is set;
several dashboards on one PostgreSQL (with shared storage) work as replicas
of one service: the registry, jobs and stream are in the database, and what
a replica that stops owned is taken over (docs/replicas.md). Spool
files left by training processes that could not reach the dashboard are
imported on start and every --spool-interval. Every flag can also be set from
the environment variable named in brackets.

Flags:
`)
		fs.PrintDefaults()
	}
	if code, ok := de.parse("fw dashboard", args, stderr); !ok {
		return code
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "fw dashboard: unexpected argument %q; see fw dashboard --help\n", fs.Arg(0))
		return 2
	}
	if *port < 0 || *port > 65535 {
		fmt.Fprintln(stderr, "fw dashboard: --port must be within 0..65535")
		return 2
	}
	if *artifactsDestination != "" && *defaultArtifactRoot != "" {
		fmt.Fprintln(stderr, "fw dashboard: --artifacts-destination is where the artifact proxy stores MLflow's uploads, --default-artifact-root turns the proxy off for MLflow's experiments (clients write there themselves): give one of them")
		return 2
	}
	localRoot, err := localArtifactRoot(*defaultArtifactRoot)
	if err != nil {
		fmt.Fprintf(stderr, "fw dashboard: --default-artifact-root: %v\n", err)
		return 2
	}
	destination, err := localArtifactRoot(*artifactsDestination)
	if err != nil {
		fmt.Fprintf(stderr, "fw dashboard: --artifacts-destination: %v\n", err)
		return 2
	}
	if *sysInterval < 100*time.Millisecond || *sysHistory < *sysInterval || *sysHistory > 24*time.Hour {
		fmt.Fprintln(stderr, "fw dashboard: --system-interval must be at least 100ms and --system-history between it and 24h")
		return 2
	}
	if *sortIndexRuns < 0 || *sortIndexRuns > 1<<30 {
		fmt.Fprintf(stderr, "fw dashboard: --sort-index-runs must be within 0..%d (0: indexes only on a first sort)\n", 1<<30)
		return 2
	}
	if *leaseTTL < 300*time.Millisecond || *leaseTTL > time.Hour {
		fmt.Fprintln(stderr, "fw dashboard: --lease-ttl must be within 300ms..1h")
		return 2
	}
	if *maxArtifactMiB < 1 || *maxArtifactMiB > 1<<20 {
		fmt.Fprintln(stderr, "fw dashboard: --max-artifact-mib must be within 1..1048576")
		return 2
	}
	if !isLoopback(*host) && *token == "" {
		fmt.Fprintf(stderr, "fw dashboard: refusing to listen on %s without a token: the dashboard can start processes on this machine, so anyone who reaches it could run code; set --token (or FW_DASHBOARD_TOKEN) and send `Authorization: Bearer <token>`, or listen on 127.0.0.1\n", *host)
		return 2
	}
	if *executor != "local" && *executor != "ray" {
		fmt.Fprintf(stderr, "fw dashboard: --executor must be local or ray, not %q\n", *executor)
		return 2
	}
	if *executor == "ray" && *rayAddress == "" {
		fmt.Fprintln(stderr, "fw dashboard: --executor ray needs --ray-address http://HOST:8265 (the Ray head's dashboard)")
		return 2
	}
	if *rayLostAfter < time.Second {
		fmt.Fprintln(stderr, "fw dashboard: --ray-lost-after must be at least 1s")
		return 2
	}
	if *rayAddress != "" {
		if _, err := ray.ParseAddress(*rayAddress); err != nil {
			fmt.Fprintf(stderr, "fw dashboard: --ray-address: %v\n", err)
			return 2
		}
	}
	if *trackingURI != "" {
		if _, err := ray.ParseAddress(*trackingURI); err != nil {
			fmt.Fprintf(stderr, "fw dashboard: --tracking-uri must be the dashboard's http(s) URL as the jobs reach it: %v\n", err)
			return 2
		}
	}
	hosts, err := hostguard.New(*host, hostguard.ParseList(*allowedHosts))
	if err == nil {
		err = api.CheckOrigins(hostguard.ParseList(*corsOrigins))
	}
	if err != nil {
		fmt.Fprintf(stderr, "fw dashboard: %v\n", err)
		return 2
	}
	log, err := newLogger(stderr, *logFormat, *logLevel)
	if err != nil {
		fmt.Fprintf(stderr, "fw dashboard: %v\n", err)
		return 2
	}
	spoolDir := filepath.Join(*expDir, "spool")
	for _, d := range []string{*expDir, *ckptDir, spoolDir} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			fmt.Fprintf(stderr, "fw dashboard: cannot create %s: %v\n", d, err)
			return 1
		}
	}

	ln, ok := listen("fw dashboard", *host, *port, stderr)
	if !ok {
		return 1
	}
	defer ln.Close()

	cfg := storeConfigFromEnv()
	cfg.Dir, cfg.CheckpointDir = *expDir, *ckptDir
	cfg.SortIndexRuns = *sortIndexRuns
	if cfg.SortIndexRuns == 0 {
		cfg.SortIndexRuns = -1 // the store's "off"
	}
	// Every event the store stores (ingest, spool import, MLflow's API,
	// training jobs) goes into its change feed too, the live stream's source.
	cfg.Feed, cfg.Log = tracking.FeedOf, log
	st, err := store.Open(ctx, cfg)
	if err != nil {
		fmt.Fprintf(stderr, "fw dashboard: opening the store: %v\n", err)
		return 1
	}
	defer st.Close()
	files, err := openChecked(ctx, *artifactURI, *expDir)
	if err != nil {
		fmt.Fprintf(stderr, "fw dashboard: --artifact-uri: %v\n", err)
		return 1
	}
	var rootStore, destStore blob.Store
	if localRoot != "" {
		if rootStore, err = openLocation(ctx, localRoot); err != nil {
			fmt.Fprintf(stderr, "fw dashboard: --default-artifact-root: %v\n", err)
			return 1
		}
	}
	artDir := cfg.ArtifactDir // as the store resolves it (FW_ARTIFACT_DIR, else <experiment dir>/artifacts)
	if artDir == "" {
		artDir = filepath.Join(*expDir, "artifacts")
	}
	if destination != "" {
		// The proxy writes any path a client names under the destination:
		// never over (or inside) fw's own files and database.
		if what := destinationOverlaps(destination, *artifactURI, *expDir, map[string]string{"the artifact directory": artDir, "the checkpoint directory": *ckptDir}); what != "" {
			fmt.Fprintf(stderr, "fw dashboard: --artifacts-destination %s overlaps %s: MLflow's clients could write over fw's own files there; give a directory or bucket prefix of its own\n", destination, what)
			return 2
		}
		if destStore, err = openLocation(ctx, destination); err != nil {
			fmt.Fprintf(stderr, "fw dashboard: --artifacts-destination: %v\n", err)
			return 1
		}
	}
	// With object storage, the runs' files go to the bucket too: artifacts
	// uploaded through the API are stored there (<prefix>/artifacts/<run
	// id>/<path>), and the checkpoints and artifacts training processes
	// write into this host's directories are copied there when their
	// event is stored here (runfiles.Mirror); downloads read both, and an
	// export or a resume fetches a checkpoint that is not on this host
	// from the bucket.
	var rf runFileStores
	if s3, ok := files.(*blob.S3); ok {
		if rf, err = newRunFileStores(s3, *ckptDir, artDir, log); err != nil {
			fmt.Fprintf(stderr, "fw dashboard: the run file stores: %v\n", err)
			return 1
		}
		st = rf.mirror.Wrap(st)
	}

	// The live stream: the hub follows the store's change feed (shared by
	// every dashboard on the database) from its current end.
	hub := stream.NewHub(stream.Config{RingEvents: *streamBuffer, Heartbeat: *streamHeartbeat})
	tailer := tracking.NewFeedTailer(st, hub, int64(*streamBuffer), log)
	if err := tailer.Start(ctx); err != nil {
		fmt.Fprintf(stderr, "fw dashboard: reading the store's change feed: %v\n", err)
		return 1
	}
	// Spools first (they may hold a run's end), then fail runs whose process is gone.
	im := &tracking.SpoolImporter{Dir: spoolDir, Store: st, Log: log}
	if s, err := im.ImportAll(ctx); err != nil {
		log.Warn("spool import: will retry", "err", err)
	} else if s.Files > 0 {
		log.Info("spool import", "files", s.Files, "applied", s.Applied, "duplicates", s.Duplicates, "refused", s.Refused, "removed", s.Removed)
	}
	hostname, _ := os.Hostname()
	if _, err := tracking.ReconcileRuns(ctx, st, hostname, *staleAfter, log); err != nil {
		log.Warn("reconcile failed", "err", err)
	}
	// This process as a replica of the dashboards sharing the database:
	// it owns what it starts through leases, and takes over what stopped
	// replicas owned (docs/replicas.md). With SQLite it is the only one.
	self := replica.Info{ID: replica.NewID(hostname, os.Getpid()), URL: *replicaURL, Host: hostname, PID: os.Getpid(), Version: version}
	if self.URL == "" {
		self.URL = "http://" + ln.Addr().String()
	}
	member := replica.New(st, self, *leaseTTL, log)
	if err := member.Join(ctx); err != nil {
		fmt.Fprintf(stderr, "fw dashboard: %v\n", err)
		return 1
	}

	var deployTraces *registry.DeploymentTraces
	if v := strings.TrimSpace(*deployTraceRate); v != "off" {
		r, err := strconv.ParseFloat(v, 64)
		if err != nil || !(r >= 0 && r <= 1) {
			fmt.Fprintf(stderr, "fw dashboard: --deployment-trace-rate %q: give a fraction from 0 to 1, or off\n", v)
			return 2
		}
		deployTraces = &registry.DeploymentTraces{Endpoint: "http://" + ln.Addr().String() + "/v1/traces", Token: *token, SampleRate: r,
			ResourceAttributes: os.Getenv("OTEL_RESOURCE_ATTRIBUTES")}
	}
	var deployPayloads *registry.DeploymentPayloads
	if r, err := strconv.ParseFloat(strings.TrimSpace(*deployPayloadRate), 64); err != nil || !(r >= 0 && r <= 1) {
		fmt.Fprintf(stderr, "fw dashboard: --deployment-payload-rate %q: give a fraction from 0 (off) to 1\n", *deployPayloadRate)
		return 2
	} else if r > 0 {
		deployPayloads = &registry.DeploymentPayloads{Rate: r, URL: "http://" + ln.Addr().String(), Token: *token, SpoolDir: filepath.Join(*expDir, "payload-spool")}
	}
	otel, err := otelTracer(os.Getenv, *otelEndpoint, *otelProtocol, *otelRate, "fw-dashboard", version, log)
	if err != nil {
		fmt.Fprintf(stderr, "fw dashboard: %v\n", err)
		return 2
	}
	defer stopTracer(otel, log) // a nil tracer has nothing to send
	base, cancelBase := context.WithCancel(context.Background())
	defer cancelBase()
	ui := webui.New()
	if *uiDir != "" {
		ui = webui.NewDir(*uiDir)
	}
	// MLflow's tracking API is mounted beside fw's own, over the same store
	// and artifacts, behind the same guard and token.
	ml := mlflow.New(base, st, mlflow.Config{Artifacts: rf.artifacts, ArtifactDir: artDir, UploadDir: artDir,
		MaxBodyBytes: api.DefaultMaxBodyBytes, MaxArtifactBytes: int64(*maxArtifactMiB) << 20, DefaultArtifactRoot: localRoot, ArtifactRoot: rootStore, ArtifactsDestination: destStore}, log)
	srv := api.New(base, st, api.Config{Token: *token, Version: version, Hub: hub, UI: ui, CheckpointDir: *ckptDir, ArtifactDir: artDir, Artifacts: rf.artifacts, Checkpoints: rf.checkpoints, CheckpointUploads: rf.checkpointBucket,
		MaxArtifactBytes: int64(*maxArtifactMiB) << 20, Hosts: hosts, CORSOrigins: hostguard.ParseList(*corsOrigins), ReplicaID: self.ID,
		Mounts: []api.Mount{ml}, RunTraces: ml.RunTraces, LoggedModels: ml.LoggedModels, ClientFiles: ml.ClientFiles, Telemetry: otel, TraceRetention: *traceRetention, TraceMaxSpans: *traceMaxSpans, TraceProxied: deployTraces != nil,
		PayloadRetention: *payloadRetention, PayloadMaxRecords: *payloadMax}, log)
	srv.SetReplicas(member)
	sampler := sysinfo.NewSampler([]sysinfo.Dir{{Name: "experiments", Path: *expDir}, {Name: "checkpoints", Path: *ckptDir}}, *sysInterval, *sysHistory, log)
	defer sampler.Close()
	srv.SetSystem(sampler)
	srv.SetMetrics(prometheus.NewRegistry())
	hs := &fasthttp.Server{
		Handler:            srv.Handler,
		Name:               "fw-dashboard",
		MaxRequestBodySize: api.DefaultMaxBodyBytes,
		// Request heads up to 16 KiB (fasthttp's default is 4 KiB): the
		// runs table's filters and sorts travel in the query string, and a
		// long one must reach the handler, which refuses a bad parameter
		// with 400 naming it, instead of a bare 431 (schemathesis sent a
		// 4.7 KB query).
		ReadBufferSize:               16 << 10,
		StreamRequestBody:            true,
		DisablePreParseMultipartForm: true,
		ReadTimeout:                  60 * time.Second,
		IdleTimeout:                  120 * time.Second,
		CloseOnShutdown:              true,
		Logger:                       slogPrintf{log},
	}
	reg := startRegistry(base, st, srv, ml, registry.Config{ExperimentDir: *expDir, CheckpointDir: *ckptDir, Engine: withLibraries(engine.Options{}),
		Python: pythonPath(), StopGrace: *stopGrace, Member: member, Files: files, Checkpoints: rf.checkpointBucket, Traces: deployTraces, Payloads: deployPayloads}, log)
	if reg != nil {
		srv.SetDeployments(reg) // *registry.Service is an api.DeploymentCounter
	}
	jcfg := jobs.Config{Python: pythonPath(), TrackingURI: "http://" + ln.Addr().String(), ExperimentDir: *expDir,
		CheckpointDir: *ckptDir, Token: *token, MaxJobs: *maxJobs, StopGrace: *stopGrace, Host: hostname, Checkpoints: rf.checkpointBucket}
	if *trackingURI != "" {
		jcfg.TrackingURI = *trackingURI
	}
	if *executor == "ray" {
		py := *rayPython
		if py == "" {
			py = absPath(pythonPath())
		}
		ex, err := ray.New(ray.Config{Address: *rayAddress, Python: py, StopGrace: *stopGrace, LostAfter: *rayLostAfter, Log: log})
		if err != nil {
			fmt.Fprintf(stderr, "fw dashboard: %v\n", err)
			return 2
		}
		jcfg.Executor = ex
	}
	fleet := startJobs(ctx, st, srv, member, jcfg, *recipesFile, log)
	// Take over at once what stopped replicas of this host left (the
	// process before a restart: its Ray jobs are re-attached, its local
	// processes marked lost), then renew and sweep every TTL/3.
	member.Sweep(ctx)
	if fleet != nil {
		// Jobs of an executor that outlives the dashboard (Ray) whose lease
		// no replica holds any more are followed again by this one.
		if ids, err := fleet.AdoptOrphans(ctx); err != nil {
			log.Warn("re-attaching training jobs", "err", err)
		} else if len(ids) > 0 {
			log.Info("re-attached training jobs", "runs", len(ids))
		}
	}
	serveErr := make(chan error, 1)
	go func() { serveErr <- hs.Serve(ln) }()
	spoolCtx, stopSpool := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); im.Run(spoolCtx, *spoolEvery) }()
	wg.Add(1)
	go func() { defer wg.Done(); sampler.Run(spoolCtx) }() // /api/system/status and /metrics serve its latest sample
	wg.Add(1)
	go func() { defer wg.Done(); tailer.Run(spoolCtx) }()
	if rf.mirror != nil {
		wg.Add(1)
		go func() { defer wg.Done(); rf.mirror.Run(spoolCtx) }()
	}
	memberCtx, stopMember := context.WithCancel(context.Background())
	memberDone := make(chan struct{})
	go func() { defer close(memberDone); member.Run(memberCtx) }()
	if fleet != nil {
		wg.Add(1)
		go func() { defer wg.Done(); fleet.Run(spoolCtx) }()
	}
	url := "http://" + ln.Addr().String()
	fmt.Fprintf(stdout, "fw dashboard: ready on %s (store: %s)\n", url, storeLabel(cfg))

	code := 0
	select {
	case <-ctx.Done():
	case err := <-serveErr:
		if err != nil {
			fmt.Fprintf(stderr, "fw dashboard: %v\n", err)
			code = 1
		}
	}
	log.Info("shutting down: finishing in-flight requests", "timeout", *shutdownTimeout)
	srv.SetDraining()
	hub.Close() // stream connections get 1001 (hijacked: Shutdown does not wait for them)
	sctx, cancel := context.WithTimeout(context.Background(), *shutdownTimeout)
	defer cancel()
	if fleet != nil {
		fleet.Manager().Shutdown(sctx) // while the API still takes the jobs' last events
		fleet.Sync(sctx)               // their end, recorded and their leases released
	}
	if err := hs.ShutdownWithContext(sctx); err != nil {
		log.Warn("shutdown: connections still open at the deadline", "err", err)
		code = 1
	}
	stopSpool()
	wg.Wait()
	cancelBase()
	if reg != nil {
		reg.Wait() // exports end with base; deployments keep running (re-adopted on the next start)
	}
	// Leave: the other replicas (or this one's next start) take over the
	// deployments at their next sweep instead of after the lease TTL.
	stopMember()
	<-memberDone
	member.Leave(context.Background())
	if err := st.Close(); err != nil {
		log.Warn("closing the store", "err", err)
		code = 1
	}
	log.Info("stopped")
	return code
}

func storeLabel(cfg store.Config) string {
	if cfg.DatabaseURL != "" {
		return "PostgreSQL (FW_DATABASE_URL)"
	}
	return filepath.Join(cfg.Dir, "experiments.db")
}

// startJobs loads the recipe registry and enables the training routes; nil
// (the routes answer 503) when the registry cannot be loaded.
func startJobs(ctx context.Context, st store.Store, srv *api.Server, member *replica.Member, cfg jobs.Config, recipesFile string, log *slog.Logger) *jobs.Fleet {
	for _, d := range []*string{&cfg.ExperimentDir, &cfg.CheckpointDir} {
		if abs, err := filepath.Abs(*d); err == nil {
			*d = abs
		}
	}
	recipes, err := jobs.LoadRecipes(ctx, cfg.Python, recipesFile)
	if err != nil {
		log.Warn("training jobs disabled: the recipe registry did not load", "err", err)
		return nil
	}
	jm := jobs.New(st, recipes, cfg, log)
	fleet := jobs.NewFleet(jm, st, member, log)
	// A replica that takes over the lease of a job whose replica stopped
	// re-attaches to it where the executor can (Ray); else the job is lost.
	fleet.Adopt = jm.Adopt
	srv.SetJobs(fleet)
	return fleet
}

// absPath is p made absolute when it names a file by a path ("python3",
// found on PATH, stays as it is).
func absPath(p string) string {
	if !strings.ContainsRune(p, filepath.Separator) {
		return p
	}
	if a, err := filepath.Abs(p); err == nil {
		return a
	}
	return p
}

// startRegistry opens the model registry and its deployments and enables
// /api/models, /api/deployments and MLflow's registry API; nil (they
// answer 503) when it cannot.
func startRegistry(base context.Context, st store.Store, srv *api.Server, ml *mlflow.Server, cfg registry.Config, log *slog.Logger) *registry.Service {
	exe, err := os.Executable()
	if err != nil {
		log.Warn("model registry disabled: cannot find the fw binary for deployments", "err", err)
		return nil
	}
	cfg.Executable = exe
	svc, err := registry.New(base, st, cfg, log)
	if err != nil {
		log.Warn("model registry disabled", "err", err)
		return nil
	}
	srv.SetRegistry(svc)
	ml.SetRegistry(svc.Reg)
	return svc
}

// openChecked opens the file store uri names (dir for "") and, for a
// bucket, checks that it can be reached, so a wrong endpoint, bucket or key
// fails the start with the reason.
func openChecked(ctx context.Context, uri, dir string) (blob.Store, error) {
	st, err := blob.Open(uri, dir, s3ConfigFromEnv())
	if err != nil {
		return nil, err
	}
	if s3, ok := st.(*blob.S3); ok {
		cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		if err := s3.Check(cctx); err != nil {
			return nil, err
		}
	}
	return st, nil
}

// destinationOverlaps names what of fw's own storage the artifacts
// destination dest (as localArtifactRoot read it) would let clients write
// over: the experiment directory expDir or one of dirs (the directories
// fw writes runs' files into) lying in dest; dest lying in one of dirs, or
// in a directory of expDir fw uses (its database, registry, caches); or
// the bucket prefix of --artifact-uri. "" when none: dest may be a
// directory of its own inside expDir, as MLflow's mlartifacts often sits
// beside its database.
func destinationOverlaps(dest, artifactURI, expDir string, dirs map[string]string) string {
	within := func(a, b string) bool { return a == b || strings.HasPrefix(a, b+"/") }
	if strings.HasPrefix(dest, "s3://") {
		u, err := url.Parse(dest)
		a, aerr := url.Parse(artifactURI)
		if err == nil && aerr == nil && a.Scheme == "s3" && a.Host == u.Host {
			dp, ap := strings.Trim(u.Path, "/"), strings.Trim(a.Path, "/")
			if dp == "" || ap == "" || within(dp, ap) || within(ap, dp) {
				return "the bucket prefix of --artifact-uri"
			}
		}
		return ""
	}
	p := dest
	if u, err := url.Parse(dest); err == nil && u.Scheme == "file" {
		p = u.Path
	}
	p = filepath.Clean(p)
	abs := func(d string) string {
		a, err := filepath.Abs(d)
		if err != nil {
			return filepath.Clean(d)
		}
		return filepath.Clean(a)
	}
	for _, what := range slices.Sorted(maps.Keys(dirs)) {
		if d := abs(dirs[what]); within(p, d) || within(d, p) {
			return what
		}
	}
	exp := abs(expDir)
	if within(exp, p) {
		return "the experiment directory"
	}
	if rest, ok := strings.CutPrefix(p, exp+"/"); ok {
		first, _, _ := strings.Cut(rest, "/")
		if slices.Contains(experimentDirNames(), first) || strings.HasPrefix(first, "experiments.db") {
			return "the experiment directory's " + first
		}
	}
	return ""
}

// experimentDirNames are what the dashboard keeps in its experiment
// directory besides its database (experiments.db*).
func experimentDirNames() []string {
	return []string{"artifacts", "cache", "checkpoints", "deployments", "payload-spool", "registry", "serving", "spool"}
}

// openLocation opens the directory or bucket localArtifactRoot read: an
// absolute path, a file:// URI or s3://bucket/prefix (checked).
func openLocation(ctx context.Context, loc string) (blob.Store, error) {
	if strings.HasPrefix(loc, "/") {
		return blob.NewDir(loc)
	}
	return openChecked(ctx, loc, "")
}

// localArtifactRoot reads --default-artifact-root (and
// --artifacts-destination): "" (none), a local path or a file:// URI of
// one, returned in the form given (a URI or a path), absolute and clean, as
// experiments' locations then begin with it; or s3://bucket/prefix,
// returned without a trailing slash.
func localArtifactRoot(v string) (string, error) {
	if v == "" {
		return "", nil
	}
	p := v
	if strings.HasPrefix(v, "file:") {
		u, err := url.Parse(v)
		if err != nil || (u.Host != "" && u.Host != "localhost") || u.Path == "" {
			return "", fmt.Errorf("%q is not a file:// URI of a local directory (file:///path)", v)
		}
		p = u.Path
	} else if strings.HasPrefix(v, "s3://") {
		u, err := url.Parse(v)
		if err != nil || u.Host == "" || u.RawQuery != "" || u.User != nil {
			return "", fmt.Errorf("%q: name the bucket: s3://bucket/prefix", v)
		}
		return strings.TrimRight(v, "/"), nil // the prefix is checked when the bucket is opened
	} else if strings.Contains(v, "://") {
		return "", fmt.Errorf("%q: use a local directory (a path or file:///path) or s3://bucket/prefix", v)
	}
	abs, err := filepath.Abs(p)
	if err != nil {
		return "", err
	}
	if err := os.MkdirAll(abs, 0o755); err != nil {
		return "", err
	}
	if strings.HasPrefix(v, "file:") {
		return (&url.URL{Scheme: "file", Path: abs}).String(), nil
	}
	return abs, nil
}
