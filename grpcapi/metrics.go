package grpcapi

import (
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/codes"
)

// metrics are the gRPC front end's own Prometheus metrics; the batching and
// engine metrics are the model host's, shared with HTTP.
type metrics struct {
	requests *prometheus.CounterVec
	latency  *prometheus.HistogramVec
	panics   prometheus.Counter
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "fw_grpc_requests_total", Help: "gRPC calls by method and status code.",
		}, []string{"method", "code"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "fw_grpc_request_duration_seconds", Help: "gRPC call latency by method (a stream: its whole life).",
			Buckets: []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10},
		}, []string{"method"}),
		panics: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "fw_grpc_panics_total", Help: "gRPC calls that panicked and were answered INTERNAL.",
		}),
	}
	if reg != nil {
		reg.MustRegister(m.requests, m.latency, m.panics)
	}
	return m
}

// methods are the label values of method; anything else counts as "other"
// so that a scanner cannot blow up the label space.
var methods = map[string]bool{
	"ServerLive": true, "ServerReady": true, "ModelReady": true, "ServerMetadata": true, "ModelMetadata": true,
	"ModelInfer": true, "ModelStreamInfer": true, "ModelConfig": true, "ModelStatistics": true, "Check": true, "Watch": true,
}

// observe records one call; trace, when it was traced, is its trace ID,
// kept as the latency's exemplar.
func (m *metrics) observe(fullMethod string, code codes.Code, d time.Duration, trace string) {
	name := fullMethod[strings.LastIndexByte(fullMethod, '/')+1:]
	if !methods[name] {
		name = "other"
	}
	m.requests.WithLabelValues(name, code.String()).Inc()
	o := m.latency.WithLabelValues(name)
	if e, ok := o.(prometheus.ExemplarObserver); ok && trace != "" {
		e.ObserveWithExemplar(d.Seconds(), prometheus.Labels{"trace_id": trace})
		return
	}
	o.Observe(d.Seconds())
}
