package httpapi

import (
	"github.com/fw-serve/fw/serving"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/valyala/fasthttp"
	"github.com/valyala/fasthttp/fasthttpadaptor"
)

// TritonCollector exports each served model version's statistics (Triton's
// statistics extension, serving.Stats) under Triton's metric names, so the
// dashboards, alerts and scripts written for tritonserver's /metrics read
// fw's: nv_inference_request_success, _failure, nv_inference_count,
// nv_inference_exec_count, the cumulative durations in microseconds and
// nv_inference_pending_request_count, labelled model and version. They are
// read at scrape time: nothing is counted twice.
type TritonCollector struct {
	models serving.Models
	descs  tritonDescs
}

type tritonDescs struct {
	success, failure, count, exec, request, queue, input, infer, output, pending *prometheus.Desc
}

// NewTritonCollector reads the statistics of models' loaded versions.
func NewTritonCollector(models serving.Models) *TritonCollector {
	labels := []string{"model", "version"}
	d := func(name, help string) *prometheus.Desc { return prometheus.NewDesc(name, help, labels, nil) }
	return &TritonCollector{models: models, descs: tritonDescs{
		success: d("nv_inference_request_success", "Number of successful inference requests, all batch sizes"),
		failure: prometheus.NewDesc("nv_inference_request_failure", "Number of failed inference requests, all batch sizes", []string{"model", "version", "reason"}, nil),
		count:   d("nv_inference_count", "Number of inferences performed (does not include cached requests)"),
		exec:    d("nv_inference_exec_count", "Number of model executions performed (does not include cached requests)"),
		request: d("nv_inference_request_duration_us", "Cumulative inference request duration in microseconds (includes cached requests)"),
		queue:   d("nv_inference_queue_duration_us", "Cumulative inference queuing duration in microseconds (includes cached requests)"),
		input:   d("nv_inference_compute_input_duration_us", "Cumulative compute input duration in microseconds (does not include cached requests)"),
		infer:   d("nv_inference_compute_infer_duration_us", "Cumulative compute inference duration in microseconds (does not include cached requests)"),
		output:  d("nv_inference_compute_output_duration_us", "Cumulative inference compute output duration in microseconds (does not include cached requests)"),
		pending: d("nv_inference_pending_request_count", "Instantaneous number of pending requests awaiting execution per-model."),
	}}
}

// Describe sends the metrics' descriptions.
func (c *TritonCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.descs.success, c.descs.failure, c.descs.count, c.descs.exec, c.descs.request,
		c.descs.queue, c.descs.input, c.descs.infer, c.descs.output, c.descs.pending} {
		ch <- d
	}
}

// Collect reads each loaded version's statistics now.
func (c *TritonCollector) Collect(ch chan<- prometheus.Metric) {
	us := func(ns uint64) float64 { return float64(ns / 1000) }
	for _, inst := range c.models.Loaded() {
		if inst.Stats == nil {
			continue
		}
		s := inst.Stats.Snapshot()
		name, version := inst.Name(), inst.Version()
		counter := func(d *prometheus.Desc, v float64) {
			ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, v, name, version)
		}
		counter(c.descs.success, float64(s.Success.Count))
		for i, n := range s.FailuresByReason {
			ch <- prometheus.MustNewConstMetric(c.descs.failure, prometheus.CounterValue, float64(n), name, version, serving.FailureReason(i))
		}
		counter(c.descs.count, float64(s.InferenceCount))
		counter(c.descs.exec, float64(s.ExecutionCount))
		counter(c.descs.request, us(s.Success.NS+s.Fail.NS))
		counter(c.descs.queue, us(s.Queue.NS))
		counter(c.descs.input, us(s.ComputeInput.NS))
		counter(c.descs.infer, us(s.ComputeInfer.NS))
		counter(c.descs.output, us(s.ComputeOutput.NS))
		pending := 0
		if inst.Batcher != nil {
			pending = inst.Batcher.QueueDepth()
		}
		ch <- prometheus.MustNewConstMetric(c.descs.pending, prometheus.GaugeValue, float64(pending), name, version)
	}
}

// MetricsOnly serves g's metrics at GET /metrics and nothing else: the
// listener of --metrics-port (tritonserver's metrics port, 8002 in
// Triton's examples), beside /metrics on the main port.
func MetricsOnly(g prometheus.Gatherer) fasthttp.RequestHandler {
	h := fasthttpadaptor.NewFastHTTPHandler(promhttp.HandlerFor(g, promhttp.HandlerOpts{EnableOpenMetrics: true}))
	return func(ctx *fasthttp.RequestCtx) {
		if string(ctx.Path()) != "/metrics" {
			writeError(ctx, newError(fasthttp.StatusNotFound, "not_found", "this port serves GET /metrics only", nil))
			return
		}
		if !ctx.IsGet() && !ctx.IsHead() {
			ctx.Response.Header.Set("Allow", "GET, HEAD")
			writeError(ctx, newError(fasthttp.StatusMethodNotAllowed, "method_not_allowed", "use GET /metrics", nil))
			return
		}
		h(ctx)
	}
}
