package main

import (
	"fmt"
	"log/slog"
	"strconv"
	"strings"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/fw-serve/fw/dashboard/blob"
	"github.com/fw-serve/fw/payloadlog"
)

// payloadLogger reads the --log-payloads flags into a logger whose counts
// are served on reg (fw_payloads_total{result}); nil when the rate is 0.
func payloadLogger(rate, dest, redact, spool, deployment, token string, reg prometheus.Registerer, log *slog.Logger) (*payloadlog.Logger, error) {
	r, err := strconv.ParseFloat(strings.TrimSpace(rate), 64)
	if err != nil || !(r >= 0 && r <= 1) {
		return nil, fmt.Errorf("--log-payloads %q: give the fraction of requests to log, from 0 (off) to 1", rate)
	}
	if r == 0 {
		return nil, nil
	}
	if dest == "" {
		return nil, fmt.Errorf("--log-payloads %s: also give --log-payloads-to, the dashboard's URL or a directory", rate)
	}
	var names []string
	for _, n := range strings.Split(redact, ",") {
		if n = strings.TrimSpace(n); n != "" {
			names = append(names, n)
		}
	}
	cfg := payloadlog.Config{Rate: r, Dest: dest, Token: token, Deployment: deployment, Redact: names, SpoolDir: spool}
	if strings.HasPrefix(dest, "s3://") {
		bucket, err := blob.Open(dest, "", s3ConfigFromEnv())
		if err != nil {
			return nil, fmt.Errorf("--log-payloads-to: %w", err)
		}
		cfg.Objects = bucket
	}
	l, err := payloadlog.New(cfg, log)
	if err != nil {
		return nil, err
	}
	for _, res := range []struct {
		name string
		get  func(payloadlog.Counts) uint64
	}{
		{"logged", func(c payloadlog.Counts) uint64 { return c.Logged }},
		{"sent", func(c payloadlog.Counts) uint64 { return c.Sent }},
		{"spooled", func(c payloadlog.Counts) uint64 { return c.Spooled }},
		{"dropped", func(c payloadlog.Counts) uint64 { return c.Dropped }},
	} {
		reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "fw_payloads_total", Help: "Logged request/response records (--log-payloads) by what became of them: logged (sampled and queued), sent, spooled (the dashboard was away), dropped.",
			ConstLabels: prometheus.Labels{"result": res.name},
		}, func() float64 { return float64(res.get(l.Counts())) }))
	}
	log.Info("logging payloads", "rate", r, "to", dest, "redacted", names, "spool", spool)
	return l, nil
}
