package httpapi

import (
	"strconv"
	"sync/atomic"
	"time"

	"github.com/fw-serve/fw/serving"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
)

// Metrics are the model server's Prometheus metrics, registered on the
// registry given to NewMetrics (never the global one).
type Metrics struct {
	requests     *prometheus.CounterVec
	latency      *prometheus.HistogramVec
	batchRows    *prometheus.HistogramVec
	batchReqs    *prometheus.HistogramVec
	queueDepth   *prometheus.GaugeVec
	queueCap     *prometheus.GaugeVec
	queueWait    *prometheus.HistogramVec
	inference    *prometheus.HistogramVec
	rows         *prometheus.CounterVec
	batchErrors  *prometheus.CounterVec
	loadSeconds  *prometheus.GaugeVec
	modelInfo    *prometheus.GaugeVec
	reloads      *prometheus.CounterVec
	ready        prometheus.Gauge
	inflight     prometheus.Gauge
	panics       prometheus.Counter
	endpointObs  map[string]prometheus.Observer
	endpointCode map[string]*codeCounters
}

// codeCounters caches one endpoint's request counters by status code, created
// on first use so /metrics lists only codes that happened.
type codeCounters [600]atomic.Pointer[prometheus.Counter]

// endpoints are the label values of fw_http_requests_total; unknown paths
// count as "other" so a scanner cannot blow up the label space.
var endpointLabels = []string{"predict", "predict_image", "predict_batch", "v2_infer", "v2_generate", "v2", "health", "model", "metrics", "docs", "debug", "other"}

// NewMetrics creates and registers the metrics, Go runtime and process
// collectors included.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "fw_http_requests_total", Help: "HTTP requests by endpoint and status code.",
		}, []string{"endpoint", "code"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "fw_http_request_duration_seconds", Help: "HTTP request latency by endpoint.",
			Buckets: []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10},
		}, []string{"endpoint"}),
		batchRows: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "fw_batch_size_rows", Help: "Rows per engine call (dynamic batching), by model and version.",
			Buckets: []float64{1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024},
		}, modelLabels),
		batchReqs: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "fw_batch_size_requests", Help: "Requests coalesced per engine call, by model and version.",
			Buckets: []float64{1, 2, 4, 8, 16, 32, 64, 128, 256},
		}, modelLabels),
		queueDepth: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "fw_queue_depth", Help: "Requests waiting for an engine call, by model and version."}, modelLabels),
		queueCap: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "fw_queue_capacity", Help: "Requests allowed to wait (--max-queue), by model and version; fw_queue_depth / fw_queue_capacity is the queue's saturation, 503 at 1.",
		}, modelLabels),
		queueWait: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "fw_queue_wait_seconds", Help: "Time a batch's first request waited before its engine call, by model and version.",
			Buckets: []float64{.00005, .0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .5, 1},
		}, modelLabels),
		inference: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "fw_inference_duration_seconds", Help: "Engine time per batch, by model and version.",
			Buckets: []float64{.00001, .000025, .00005, .0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5},
		}, modelLabels),
		rows:        prometheus.NewCounterVec(prometheus.CounterOpts{Name: "fw_rows_total", Help: "Rows computed by the engine, by model and version; rate() gives rows per second."}, modelLabels),
		batchErrors: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "fw_batch_errors_total", Help: "Engine calls that failed, by model and version."}, modelLabels),
		loadSeconds: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "fw_model_load_seconds", Help: "Time the model version took to load and warm up."}, modelLabels),
		modelInfo: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "fw_model_info", Help: "The models being served (value 1), one series per model version.",
		}, []string{"name", "version", "format", "device"}),
		reloads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "fw_model_reloads_total", Help: "Model file reloads by result (ok, failed).",
		}, []string{"result"}),
		ready:    prometheus.NewGauge(prometheus.GaugeOpts{Name: "fw_ready", Help: "1 when the server is ready to serve predictions."}),
		inflight: prometheus.NewGauge(prometheus.GaugeOpts{Name: "fw_http_inflight_requests", Help: "Requests being handled."}),
		panics: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "fw_http_panics_total", Help: "Requests whose handler panicked (a bug); each was answered 500 internal and logged with its stack.",
		}),
	}
	reg.MustRegister(m.requests, m.latency, m.batchRows, m.batchReqs, m.queueDepth, m.queueCap, m.queueWait, m.inference,
		m.rows, m.batchErrors, m.loadSeconds, m.modelInfo, m.reloads, m.ready, m.inflight, m.panics,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	m.endpointObs = map[string]prometheus.Observer{}
	m.endpointCode = map[string]*codeCounters{}
	for _, ep := range endpointLabels {
		m.endpointObs[ep] = m.latency.WithLabelValues(ep)
		m.endpointCode[ep] = new(codeCounters)
	}
	return m
}

// SetReady sets fw_ready: 1 when the server is ready to serve predictions.
func (m *Metrics) SetReady(ready bool) {
	if ready {
		m.ready.Set(1)
	} else {
		m.ready.Set(0)
	}
}

// observeRequest records one finished request; trace, when the request was
// traced (OpenTelemetry), is its trace ID, kept as the latency's exemplar
// (served in the OpenMetrics format). Label children are resolved
// once per endpoint and code, so the steady state allocates nothing.
func (m *Metrics) observeRequest(endpoint string, code int, d time.Duration, trace string) {
	observe(m.endpointObs[endpoint], d, trace)
	if code < 0 || code >= len(codeCounters{}) {
		m.requests.WithLabelValues(endpoint, strconv.Itoa(code)).Inc()
		return
	}
	slot := &m.endpointCode[endpoint][code]
	c := slot.Load()
	if c == nil {
		counter := m.requests.WithLabelValues(endpoint, strconv.Itoa(code))
		c = &counter
		slot.Store(c)
	}
	(*c).Inc()
}

// modelLabels are the labels of the per-model metrics.
var modelLabels = []string{"model", "version"}

// Model returns the metrics of one model version, created on first use:
// what its batcher reports and its load. Forget removes them on unload.
func (m *Metrics) Model(name, version string) serving.ModelMetrics {
	l := prometheus.Labels{"model": name, "version": version}
	return &modelMetrics{
		m: m, name: name, version: version,
		batchRows: m.batchRows.With(l), batchReqs: m.batchReqs.With(l), queueDepth: m.queueDepth.With(l),
		queueCap: m.queueCap.With(l), queueWait: m.queueWait.With(l), inference: m.inference.With(l),
		rows: m.rows.With(l), batchErrors: m.batchErrors.With(l), loadSeconds: m.loadSeconds.With(l),
	}
}

// Forget removes the series of a model version that is no longer served.
func (m *Metrics) Forget(name, version string) {
	l := prometheus.Labels{"model": name, "version": version}
	for _, v := range []interface{ Delete(prometheus.Labels) bool }{m.batchRows, m.batchReqs, m.queueDepth, m.queueCap, m.queueWait, m.inference, m.rows, m.batchErrors, m.loadSeconds} {
		v.Delete(l)
	}
	m.modelInfo.DeletePartialMatch(prometheus.Labels{"name": name, "version": version})
}

// modelMetrics are one model version's series, resolved once.
type modelMetrics struct {
	m                                          *Metrics
	name, version                              string
	batchRows, batchReqs, queueWait, inference prometheus.Observer
	queueDepth, queueCap, loadSeconds          prometheus.Gauge
	rows, batchErrors                          prometheus.Counter
}

// BatchRun implements batcher.Stats.
func (mm *modelMetrics) BatchRun(rows, requests int, queueWait, inference time.Duration, err error) {
	mm.batchRows.Observe(float64(rows))
	mm.batchReqs.Observe(float64(requests))
	mm.queueWait.Observe(queueWait.Seconds())
	mm.inference.Observe(inference.Seconds())
	if err != nil {
		mm.batchErrors.Inc()
		return
	}
	mm.rows.Add(float64(rows))
}

// SetQueueCapacity sets fw_queue_capacity: the requests allowed to wait
// (batcher.Config.MaxQueue), against which fw_queue_depth saturates.
func (mm *modelMetrics) SetQueueCapacity(n int) { mm.queueCap.Set(float64(n)) }

// QueueDepth implements batcher.Stats.
func (mm *modelMetrics) QueueDepth(n int) { mm.queueDepth.Set(float64(n)) }

// Loaded records a (re)load of the model version: fw_model_info and the time it took.
func (mm *modelMetrics) Loaded(format, device string, took time.Duration) {
	mm.m.modelInfo.DeletePartialMatch(prometheus.Labels{"name": mm.name, "version": mm.version})
	mm.m.modelInfo.WithLabelValues(mm.name, mm.version, format, device).Set(1)
	mm.loadSeconds.Set(took.Seconds())
}

// Reload counts a hot-reload attempt by result ("ok" or "failed").
func (m *Metrics) Reload(result string) { m.reloads.WithLabelValues(result).Inc() }

// observe records d on o, with the trace ID trace as its exemplar when
// there is one.
func observe(o prometheus.Observer, d time.Duration, trace string) {
	if trace != "" {
		if e, ok := o.(prometheus.ExemplarObserver); ok {
			e.ObserveWithExemplar(d.Seconds(), prometheus.Labels{"trace_id": trace})
			return
		}
	}
	o.Observe(d.Seconds())
}
