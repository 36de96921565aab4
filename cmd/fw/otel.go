package main

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"time"

	"github.com/fw-serve/fw/telemetry"
)

// otelTracer reads OpenTelemetry's standard environment (through getenv)
// and the --otel-* flags (which win; "" when not given) into a tracer for
// service; nil when neither asks for tracing.
func otelTracer(getenv func(string) string, endpoint, protocol, sampleRate, service, version string, log *slog.Logger) (*telemetry.Tracer, error) {
	cfg, on, err := telemetry.FromEnv(getenv, endpoint, protocol)
	if err != nil {
		return nil, fmt.Errorf("tracing: %w", err)
	}
	if sampleRate != "" {
		r, err := strconv.ParseFloat(sampleRate, 64)
		if err != nil || !(r >= 0 && r <= 1) {
			return nil, fmt.Errorf("--otel-sample-rate %q: give the fraction of requests to trace, from 0 to 1 (a request whose caller traced it is traced too)", sampleRate)
		}
		cfg.Sampler = telemetry.Sampler{ParentBased: true, Ratio: r}
	}
	if !on {
		return nil, nil
	}
	cfg.Service, cfg.Version = service, version
	t, err := telemetry.New(cfg, log)
	if err != nil {
		return nil, err
	}
	c := t.Config()
	log.Info("tracing (OpenTelemetry)", "receiver", c.Export.Description, "sampler", c.Sampler.String())
	return t, nil
}

// stopTracer sends t's last spans (at most 5 seconds); for a defer.
func stopTracer(t *telemetry.Tracer, log *slog.Logger) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := t.Shutdown(ctx); err != nil {
		log.Error("sending the last traces", "err", err)
	}
}
