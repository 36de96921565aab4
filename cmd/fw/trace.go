package main

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/fw-serve/fw/reqtrace"
)

// tritonOTel is what tritonserver's `--trace-config mode=opentelemetry`
// asks for, as OpenTelemetry's environment variables (layered over the
// process's by otelEnv): the receiver (opentelemetry,url=), the resource
// (opentelemetry,resource=K=V), the batch span processor
// (opentelemetry,bsp_*), and the sampling its trace rate and level give.
type tritonOTel map[string]string

// otelEnv is getenv with t's variables first.
func (t tritonOTel) otelEnv(getenv func(string) string) func(string) string {
	return func(k string) string {
		if v, ok := t[k]; ok {
			return v
		}
		return getenv(k)
	}
}

// traceConfig reads tritonserver's trace flags into a tracer: each
// --trace-config entry is [triton,|opentelemetry,]SETTING=VALUE (file,
// log-frequency, rate, level, count, mode; with opentelemetry, url,
// resource and bsp_*), and the older --trace-file, --trace-level,
// --trace-rate, --trace-count, --trace-log-frequency are the same
// settings ("" when not given). Later entries win. With mode=opentelemetry
// it also returns the OpenTelemetry settings (nil otherwise); the rate and
// level then decide the sampling at start (changing them while serving
// changes Triton's trace files only).
func traceConfig(entries []string, file, level, rate, count, freq string) (*reqtrace.Tracer, tritonOTel, error) {
	set := map[string]string{}
	otel := tritonOTel{}
	var resources []string
	for _, e := range entries {
		e = strings.TrimSpace(e)
		if mode, rest, ok := strings.Cut(e, ","); ok && !strings.Contains(mode, "=") {
			switch mode {
			case "triton":
			case "opentelemetry":
				k, v, ok := strings.Cut(rest, "=")
				if !ok {
					return nil, nil, fmt.Errorf("--trace-config %q: give opentelemetry,SETTING=VALUE (url, resource, bsp_max_queue_size, bsp_schedule_delay, bsp_max_export_batch_size)", e)
				}
				switch k {
				case "url":
					otel["OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"] = v
				case "resource":
					resources = append(resources, v)
				case "bsp_max_queue_size":
					otel["OTEL_BSP_MAX_QUEUE_SIZE"] = v
				case "bsp_schedule_delay":
					otel["OTEL_BSP_SCHEDULE_DELAY"] = v
				case "bsp_max_export_batch_size":
					otel["OTEL_BSP_MAX_EXPORT_BATCH_SIZE"] = v
				default:
					return nil, nil, fmt.Errorf("--trace-config %q: unknown OpenTelemetry setting %q; fw reads url, resource, bsp_max_queue_size, bsp_schedule_delay and bsp_max_export_batch_size", e, k)
				}
				continue
			default:
				return nil, nil, fmt.Errorf("--trace-config %q: trace mode %q: fw has modes triton (Triton's trace files) and opentelemetry (OTLP)", e, mode)
			}
			e = rest
		}
		if e == "triton" || e == "opentelemetry" {
			continue
		}
		k, v, ok := strings.Cut(e, "=")
		if !ok {
			return nil, nil, fmt.Errorf("--trace-config %q: give [triton,]SETTING=VALUE, e.g. triton,file=/tmp/trace.json or rate=100", e)
		}
		if k == "mode" && v != "triton" && v != "opentelemetry" {
			return nil, nil, fmt.Errorf("--trace-config %q: trace mode %q: fw has modes triton (Triton's trace files) and opentelemetry (OTLP)", e, v)
		}
		set[k] = v
	}
	for k, v := range map[string]string{"file": file, "level": level, "rate": rate, "count": count, "log-frequency": freq} {
		if v != "" {
			if _, dup := set[k]; !dup {
				set[k] = v
			}
		}
	}
	var s reqtrace.Settings
	for k, v := range set {
		switch k {
		case "file", "mode":
		case "level":
			l := strings.ToUpper(v)
			if l == "MIN" { // tritonserver's older name of TIMESTAMPS
				l = reqtrace.LevelTimestamps
			}
			s.Level = &l
		case "rate":
			n, err := strconv.ParseUint(v, 10, 32)
			if err != nil {
				return nil, nil, fmt.Errorf("trace rate %q: give a whole number of requests per trace", v)
			}
			r := uint32(n)
			s.Rate = &r
		case "count":
			n, err := strconv.ParseInt(v, 10, 32)
			if err != nil {
				return nil, nil, fmt.Errorf("trace count %q: give -1 (no limit) or a number of traces", v)
			}
			c := int32(n)
			s.Count = &c
		case "log-frequency":
			n, err := strconv.ParseUint(v, 10, 32)
			if err != nil {
				return nil, nil, fmt.Errorf("trace log frequency %q: give a number of traces per file (0: one file, at shutdown)", v)
			}
			f := uint32(n)
			s.LogFrequency = &f
		default:
			return nil, nil, fmt.Errorf("--trace-config: unknown trace setting %q; the settings are file, log-frequency, rate, level, count and mode", k)
		}
	}
	if set["mode"] != "opentelemetry" {
		if len(otel) > 0 || len(resources) > 0 {
			return nil, nil, errors.New("--trace-config opentelemetry,...: add --trace-config mode=opentelemetry to trace over OTLP (the default mode writes Triton's trace files)")
		}
		t, err := reqtrace.New(set["file"], s)
		if err != nil {
			return nil, nil, fmt.Errorf("--trace-config: %w", err)
		}
		return t, nil, nil
	}
	// OpenTelemetry, as tritonserver does it: OTLP/HTTP to url (default
	// localhost:4318), one request in rate traced while the level is not
	// OFF (Triton's default level is OFF: nothing is traced).
	if set["file"] != "" {
		return nil, nil, errors.New("--trace-config mode=opentelemetry: file is for Triton's trace files (mode triton); give opentelemetry,url=URL")
	}
	if _, ok := otel["OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"]; !ok {
		otel["OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"] = "http://localhost:4318/v1/traces"
	}
	otel["OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"] = "http/protobuf"
	if len(resources) > 0 {
		otel["OTEL_RESOURCE_ATTRIBUTES"] = strings.Join(resources, ",")
	}
	ratio := 0.0
	if s.Level != nil && *s.Level != reqtrace.LevelOff {
		ratio = 1 / 1000.0 // Triton's default rate
		if s.Rate != nil && *s.Rate > 0 {
			ratio = 1 / float64(*s.Rate)
		}
	}
	otel["OTEL_TRACES_SAMPLER"] = "parentbased_traceidratio"
	otel["OTEL_TRACES_SAMPLER_ARG"] = strconv.FormatFloat(ratio, 'g', -1, 64)
	// The trace settings still answer /v2/trace/setting, for Triton's trace
	// files, which this mode does not write: their level is OFF.
	off := reqtrace.LevelOff
	s.Level = &off
	t, err := reqtrace.New("", s)
	if err != nil {
		return nil, nil, fmt.Errorf("--trace-config: %w", err)
	}
	return t, otel, nil
}
