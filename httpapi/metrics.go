package httpapi

import (
	"strconv"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
)

// Metrics are the model server's Prometheus metrics, registered on the
// registry given to NewMetrics (never the global one).
type Metrics struct {
	requests     *prometheus.CounterVec
	latency      *prometheus.HistogramVec
	batchRows    prometheus.Histogram
	batchReqs    prometheus.Histogram
	queueDepth   prometheus.Gauge
	queueCap     prometheus.Gauge
	queueWait    prometheus.Histogram
	inference    prometheus.Histogram
	rows         prometheus.Counter
	batchErrors  prometheus.Counter
	loadSeconds  prometheus.Gauge
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
var endpointLabels = []string{"predict", "predict_image", "predict_batch", "v2_infer", "v2", "health", "model", "metrics", "docs", "other"}

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
		batchRows: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "fw_batch_size_rows", Help: "Rows per engine call (dynamic batching).",
			Buckets: []float64{1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024},
		}),
		batchReqs: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "fw_batch_size_requests", Help: "Requests coalesced per engine call.",
			Buckets: []float64{1, 2, 4, 8, 16, 32, 64, 128, 256},
		}),
		queueDepth: prometheus.NewGauge(prometheus.GaugeOpts{Name: "fw_queue_depth", Help: "Requests waiting for an engine call."}),
		queueCap: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "fw_queue_capacity", Help: "Requests allowed to wait (--max-queue); fw_queue_depth / fw_queue_capacity is the queue's saturation, 503 at 1.",
		}),
		queueWait: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "fw_queue_wait_seconds", Help: "Time a batch's first request waited before its engine call.",
			Buckets: []float64{.00005, .0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .5, 1},
		}),
		inference: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "fw_inference_duration_seconds", Help: "Engine time per batch.",
			Buckets: []float64{.00001, .000025, .00005, .0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5},
		}),
		rows:        prometheus.NewCounter(prometheus.CounterOpts{Name: "fw_rows_total", Help: "Rows computed by the engine; rate() gives rows per second."}),
		batchErrors: prometheus.NewCounter(prometheus.CounterOpts{Name: "fw_batch_errors_total", Help: "Engine calls that failed."}),
		loadSeconds: prometheus.NewGauge(prometheus.GaugeOpts{Name: "fw_model_load_seconds", Help: "Time the serving model took to load and warm up."}),
		modelInfo: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "fw_model_info", Help: "The model being served (value 1).",
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

// observeRequest records one finished request. Label children are resolved
// once per endpoint and code, so the steady state allocates nothing.
func (m *Metrics) observeRequest(endpoint string, code int, d time.Duration) {
	m.endpointObs[endpoint].Observe(d.Seconds())
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

// BatchRun implements batcher.Stats.
func (m *Metrics) BatchRun(rows, requests int, queueWait, inference time.Duration, err error) {
	m.batchRows.Observe(float64(rows))
	m.batchReqs.Observe(float64(requests))
	m.queueWait.Observe(queueWait.Seconds())
	m.inference.Observe(inference.Seconds())
	if err != nil {
		m.batchErrors.Inc()
		return
	}
	m.rows.Add(float64(rows))
}

// SetQueueCapacity sets fw_queue_capacity: the requests allowed to wait
// (batcher.Config.MaxQueue), against which fw_queue_depth saturates.
func (m *Metrics) SetQueueCapacity(n int) { m.queueCap.Set(float64(n)) }

// QueueDepth implements batcher.Stats.
func (m *Metrics) QueueDepth(n int) { m.queueDepth.Set(float64(n)) }

// ModelLoaded records a (re)load's result and the model now served.
func (m *Metrics) ModelLoaded(name, version, format, device string, took time.Duration) {
	m.modelInfo.Reset()
	m.modelInfo.WithLabelValues(name, version, format, device).Set(1)
	m.loadSeconds.Set(took.Seconds())
}

// Reload counts a hot-reload attempt by result ("ok" or "failed").
func (m *Metrics) Reload(result string) { m.reloads.WithLabelValues(result).Inc() }
