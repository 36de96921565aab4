package api

import (
	"os"
	"runtime"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/valyala/fasthttp"
	"github.com/valyala/fasthttp/fasthttpadaptor"

	"github.com/fw-serve/fw/dashboard/jobs"
	"github.com/fw-serve/fw/dashboard/sysinfo"
	"github.com/fw-serve/fw/telemetry"
)

// DeploymentCounter reports deployments by state (e.g. {"running": 2});
// the server works without one (see SetDeployments).
type DeploymentCounter interface {
	DeploymentCounts() map[string]int
}

// promState is what SetMetrics installs.
type promState struct {
	handler  fasthttp.RequestHandler
	requests *prometheus.CounterVec
	panics   prometheus.Counter
	// ingested counts POST /api/ingest's events by result; ingestLag is how
	// long after its own time an event reached the store (ingest.go).
	ingested  *prometheus.CounterVec
	ingestLag prometheus.Histogram
}

// SetSystem enables GET /api/system/status and the resource gauges of
// /metrics (503 and absent until then). Call it before serving.
func (s *Server) SetSystem(sm *sysinfo.Sampler) { s.sampler = sm }

// SetDeployments adds deployment counts to the system status and /metrics;
// without it they are reported as absent. Call it before serving.
func (s *Server) SetDeployments(d DeploymentCounter) { s.deployCounter = d }

// SetMetrics registers the dashboard's metrics on reg (never the global
// registry): the resource gauges (fw_dashboard_*), Go and process
// collectors, and HTTP requests by route pattern; GET /metrics serves reg
// without the token, like /health. Call it before serving.
func (s *Server) SetMetrics(reg *prometheus.Registry) {
	p := &promState{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "fw_dashboard_http_requests_total", Help: "HTTP requests by route pattern, method and status code.",
		}, []string{"route", "method", "code"}),
		panics: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "fw_dashboard_http_panics_total", Help: "Requests whose handler panicked (a bug); each was answered 500 internal and logged with its stack.",
		}),
		ingested: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "fw_dashboard_ingest_events_total", Help: "Events received on POST /api/ingest by result: applied, duplicate (already stored) or refused.",
		}, []string{"result"}),
		ingestLag: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "fw_dashboard_ingest_lag_seconds",
			Help:    "Ingest lag: from an event's own time (when the training process logged it) to its acceptance on POST /api/ingest; events sent without a time are not counted.",
			Buckets: []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800, 3600},
		}),
	}
	for _, r := range []string{"applied", "duplicate", "refused"} {
		p.ingested.WithLabelValues(r) // listed at 0 before the first event, so rate() works from the start
	}
	reg.MustRegister(p.requests, p.panics, p.ingested, p.ingestLag, collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}), &resourceCollector{s: s})
	p.handler = fasthttpadaptor.NewFastHTTPHandler(promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	s.prom = p
}

func (s *Server) serveMetrics(c *call) {
	if s.prom == nil {
		writeError(c.rc, apiErr(404, CodeNotFound, "metrics are not enabled on this server"))
		return
	}
	s.prom.handler(c.rc)
}

// countRequest counts a finished request under its route pattern, and
// ends its span when it was traced.
func (s *Server) countRequest(ctx *fasthttp.RequestCtx, path string) {
	span, _ := ctx.UserValue(spanKey{}).(*telemetry.Span)
	if s.prom == nil && span == nil {
		return
	}
	method := string(ctx.Method())
	switch method {
	case "GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS":
	default:
		method = "OTHER"
	}
	label := s.patternOf(path)
	for _, m := range s.cfg.Mounts {
		if path != otlpTracesPath && m.Owns(path) {
			label = m.RoutePattern(path)
			break
		}
	}
	code := ctx.Response.StatusCode()
	if s.prom != nil {
		s.prom.requests.WithLabelValues(label, method, strconv.Itoa(code)).Inc()
	}
	if span != nil {
		endSpan(ctx, span, method, path, label, code)
	}
}

// patternOf is the pattern of the route table that path matches (any
// method), "other" for none: the request metrics' route label, a bounded
// set, so scanners cannot blow up the label space.
func (s *Server) patternOf(path string) string {
	segs := pathSegs(path)
	for i := range s.routes {
		if segsMatch(s.routes[i].segs, segs) {
			return s.routes[i].pattern
		}
	}
	return "other"
}

// jobCounts counts the training jobs by state (nil without a job manager).
func (s *Server) jobCounts() map[string]int {
	m := s.jobManager()
	if m == nil {
		return nil
	}
	c := map[string]int{jobs.StateRunning: 0, jobs.StateQueued: 0}
	for _, j := range m.Manager().List() { // this process's jobs, like the rest of the status
		c[j.State]++
	}
	return c
}

func (s *Server) deploymentCounts() map[string]int {
	if s.deployCounter == nil {
		return nil
	}
	return s.deployCounter.DeploymentCounts()
}

// systemStatus answers GET /api/system/status from the sampler's latest
// snapshot (it never samples on the request).
func (s *Server) systemStatus(c *call) (any, error) {
	if s.sampler == nil {
		return nil, apiErr(503, CodeUnavailable, "system status is not enabled on this server")
	}
	snap := s.sampler.Latest()
	return map[string]any{
		"time":   snap.Time,
		"cpu":    snap.CPU,
		"load":   snap.Load,
		"memory": snap.Memory,
		"disks":  snap.Disks,
		"gpus":   snap.GPUs,
		"errors": snap.Errors,
		"process": map[string]any{
			"version":        s.cfg.Version,
			"pid":            os.Getpid(),
			"started":        s.started,
			"uptime_seconds": time.Since(s.started).Seconds(),
			"rss_bytes":      snap.RSS,
			"goroutines":     runtime.NumGoroutine(),
		},
		"jobs":        s.jobCounts(),
		"deployments": s.deploymentCounts(),
	}, nil
}

// systemHistory answers GET /api/system/history: the kept samples, oldest
// first, optionally only those of the last ?seconds.
func (s *Server) systemHistory(c *call) (any, error) {
	ctx := c.rc
	if s.sampler == nil {
		return nil, apiErr(503, CodeUnavailable, "system status is not enabled on this server")
	}
	secs, e := queryInt(ctx, "seconds", 0, 1, 86400)
	if e != nil {
		return nil, e
	}
	var since time.Time
	if secs > 0 {
		since = time.Now().Add(-time.Duration(secs) * time.Second)
	}
	hist := s.sampler.History(since)
	samples := make([]map[string]any, len(hist))
	for i, snap := range hist {
		samples[i] = map[string]any{"time": snap.Time, "cpu": snap.CPU, "load": snap.Load, "memory": snap.Memory, "disks": snap.Disks, "gpus": snap.GPUs}
	}
	return map[string]any{"interval_seconds": s.sampler.Interval().Seconds(), "samples": samples}, nil
}

// resourceCollector exposes the sampler's latest snapshot and the job and
// deployment counts as gauges, read at scrape time.
type resourceCollector struct{ s *Server }

var (
	descCPU       = prometheus.NewDesc("fw_dashboard_cpu_percent", "CPU busy percent over the last second, all cores.", nil, nil)
	descCPUCore   = prometheus.NewDesc("fw_dashboard_cpu_core_percent", "CPU busy percent over the last second, by core.", []string{"core"}, nil)
	descLoad      = prometheus.NewDesc("fw_dashboard_load_average", "Load average by period.", []string{"period"}, nil)
	descMemTotal  = prometheus.NewDesc("fw_dashboard_memory_total_bytes", "Physical memory.", nil, nil)
	descMemUsed   = prometheus.NewDesc("fw_dashboard_memory_used_bytes", "Memory in use.", nil, nil)
	descMemAvail  = prometheus.NewDesc("fw_dashboard_memory_available_bytes", "Memory available to new processes.", nil, nil)
	descDiskFree  = prometheus.NewDesc("fw_dashboard_disk_free_bytes", "Free space of the file system holding a dashboard directory.", []string{"dir", "path"}, nil)
	descGPUUtil   = prometheus.NewDesc("fw_dashboard_gpu_utilization_percent", "GPU utilisation (NVML).", []string{"gpu", "name"}, nil)
	descGPUMem    = prometheus.NewDesc("fw_dashboard_gpu_memory_used_bytes", "GPU memory in use (NVML).", []string{"gpu", "name"}, nil)
	descGPUMemTot = prometheus.NewDesc("fw_dashboard_gpu_memory_total_bytes", "GPU memory (NVML).", []string{"gpu", "name"}, nil)
	descGPUTemp   = prometheus.NewDesc("fw_dashboard_gpu_temperature_celsius", "GPU temperature (NVML).", []string{"gpu", "name"}, nil)
	descJobs      = prometheus.NewDesc("fw_dashboard_jobs", "Training jobs started by this dashboard, by state.", []string{"state"}, nil)
	descDeploy    = prometheus.NewDesc("fw_dashboard_deployments", "Deployments by state.", []string{"state"}, nil)
	descUptime    = prometheus.NewDesc("fw_dashboard_uptime_seconds", "Time since the dashboard started.", nil, nil)
	descInfo      = prometheus.NewDesc("fw_dashboard_info", "The dashboard's version (value 1).", []string{"version"}, nil)
)

func (c *resourceCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descCPU, descCPUCore, descLoad, descMemTotal, descMemUsed, descMemAvail, descDiskFree,
		descGPUUtil, descGPUMem, descGPUMemTot, descGPUTemp, descJobs, descDeploy, descUptime, descInfo} {
		ch <- d
	}
}

func (c *resourceCollector) Collect(ch chan<- prometheus.Metric) {
	g := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	g(descUptime, time.Since(c.s.started).Seconds())
	g(descInfo, 1, c.s.cfg.Version)
	for state, n := range c.s.jobCounts() {
		g(descJobs, float64(n), state)
	}
	for state, n := range c.s.deploymentCounts() {
		g(descDeploy, float64(n), state)
	}
	if c.s.sampler == nil {
		return
	}
	snap := c.s.sampler.Latest()
	g(descCPU, snap.CPU.Percent)
	for i, p := range snap.CPU.PerCore {
		g(descCPUCore, p, strconv.Itoa(i))
	}
	if l := snap.Load; l != nil {
		g(descLoad, l.Load1, "1m")
		g(descLoad, l.Load5, "5m")
		g(descLoad, l.Load15, "15m")
	}
	g(descMemTotal, float64(snap.Memory.Total))
	g(descMemUsed, float64(snap.Memory.Used))
	g(descMemAvail, float64(snap.Memory.Available))
	for _, d := range snap.Disks {
		if d.Error == "" {
			g(descDiskFree, float64(d.Free), d.Name, d.Path)
		}
	}
	for _, gpu := range snap.GPUs {
		i := strconv.Itoa(gpu.Index)
		g(descGPUUtil, gpu.Utilization, i, gpu.Name)
		g(descGPUMem, float64(gpu.MemoryUsed), i, gpu.Name)
		g(descGPUMemTot, float64(gpu.MemoryTotal), i, gpu.Name)
		g(descGPUTemp, gpu.TemperatureC, i, gpu.Name)
	}
}
