package main

import (
	"strings"
	"testing"

	"github.com/fw-serve/fw/telemetry"
)

// TestTraceConfigOpenTelemetry: tritonserver's --trace-config
// mode=opentelemetry becomes OpenTelemetry's environment: the receiver,
// the resource, the batch settings, and a sampling of one request in rate
// while the level is not OFF.
func TestTraceConfigOpenTelemetry(t *testing.T) {
	tr, otel, err := traceConfig([]string{"mode=opentelemetry", "opentelemetry,url=http://collector:4318/v1/traces", "opentelemetry,resource=service.name=scorer",
		"opentelemetry,resource=team=ml", "rate=10", "level=TIMESTAMPS", "opentelemetry,bsp_schedule_delay=250"}, "", "", "", "", "")
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	want := map[string]string{
		"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://collector:4318/v1/traces", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "http/protobuf",
		"OTEL_RESOURCE_ATTRIBUTES": "service.name=scorer,team=ml", "OTEL_BSP_SCHEDULE_DELAY": "250",
		"OTEL_TRACES_SAMPLER": "parentbased_traceidratio", "OTEL_TRACES_SAMPLER_ARG": "0.1",
	}
	for k, v := range want {
		if otel[k] != v {
			t.Errorf("%s = %q, want %q", k, otel[k], v)
		}
	}
	env := otel.otelEnv(func(k string) string {
		return map[string]string{"OTEL_SERVICE_NAME": "from-env", "OTEL_TRACES_SAMPLER": "always_on"}[k]
	})
	if env("OTEL_SERVICE_NAME") != "from-env" || env("OTEL_TRACES_SAMPLER") != "parentbased_traceidratio" {
		t.Fatal("Triton's settings are not layered over the environment")
	}
	cfg, on, err := telemetry.FromEnv(env, "", "")
	if err != nil || !on || cfg.Sampler.Ratio != 0.1 || !cfg.Sampler.ParentBased || cfg.Export.Endpoint != "http://collector:4318/v1/traces" || cfg.Export.Delay.Milliseconds() != 250 {
		t.Fatalf("%+v %v %v", cfg, on, err)
	}

	// Triton's default level is OFF: nothing is sampled; the default URL.
	_, otel, err = traceConfig([]string{"mode=opentelemetry"}, "", "", "", "", "")
	if err != nil || otel["OTEL_TRACES_SAMPLER_ARG"] != "0" || otel["OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"] != "http://localhost:4318/v1/traces" {
		t.Fatalf("defaults: %v %v", otel, err)
	}
	// The file mode has no OpenTelemetry settings.
	tr, otel, err = traceConfig([]string{"triton,file=/dev/null", "rate=5"}, "", "", "", "", "")
	if err != nil || otel != nil {
		t.Fatalf("file mode: %v %v", otel, err)
	}
	tr.Close()
	for _, bad := range [][]string{
		{"opentelemetry,url=http://c:4318"},               // no mode=opentelemetry
		{"mode=opentelemetry", "triton,file=/tmp/t.json"}, // a file in OTLP mode
		{"mode=jaeger"}, // an unknown mode
		{"mode=opentelemetry", "opentelemetry,exporter=otlp"}, // an unknown setting
		{"zipkin,url=x"},
	} {
		if _, _, err := traceConfig(bad, "", "", "", "", ""); err == nil || !strings.Contains(err.Error(), "--trace-config") {
			t.Errorf("%v: %v", bad, err)
		}
	}
}

// tritonserver's older --trace-level MIN is TIMESTAMPS (L0_batcher's
// command line); TENSORS is still refused.
func TestTraceLevelMin(t *testing.T) {
	tr, _, err := traceConfig(nil, t.TempDir()+"/trace.json", "MIN", "", "", "")
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	if got := tr.Get("")["trace_level"]; len(got) != 1 || got[0] != "TIMESTAMPS" {
		t.Fatalf("trace_level %v, want [TIMESTAMPS]", got)
	}
	if _, _, err := traceConfig(nil, t.TempDir()+"/trace.json", "TENSORS", "", "", ""); err == nil {
		t.Fatal("TENSORS accepted")
	}
}
