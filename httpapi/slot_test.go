package httpapi

import (
	"context"
	"log/slog"
	"path/filepath"
	"sync/atomic"

	"github.com/fw-serve/fw/batcher"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/fw-serve/fw/serving"
)

// TestSlot is a Slot the tests fill by hand, doing what modelhost.Host does
// in fw serve (install an instance, set readiness).
type TestSlot struct {
	metrics *Metrics
	stats   serving.Stats
	cur     atomic.Pointer[serving.Instance]
	st      atomic.Pointer[testReadiness]
}

type testReadiness struct {
	state  serving.State
	reason string
}

// Current implements Slot.
func (s *TestSlot) Current() *serving.Instance { return s.cur.Load() }

// State implements Slot.
func (s *TestSlot) State() (serving.State, string) {
	if r := s.st.Load(); r != nil {
		return r.state, r.reason
	}
	return serving.StateStarting, "loading the model"
}

// NewTestServer is New over a TestSlot, its metrics registered on reg.
func NewTestServer(base context.Context, cfg Config, log *slog.Logger, reg *prometheus.Registry) *Server {
	m := NewMetrics(reg)
	ts := &TestSlot{metrics: m}
	srv := New(base, cfg, serving.One(ts), m, log, reg)
	srv.testSlot = ts
	return srv
}

// Swap installs inst in a test server's slot and returns the previous one.
// An instance without Stats gets the slot's, one without Config the one
// completed from its model, as modelhost does.
func (s *Server) Swap(inst *serving.Instance) *serving.Instance {
	if inst != nil && inst.Stats == nil {
		inst.Stats = &s.testSlot.(*TestSlot).stats
	}
	if inst != nil && inst.Config.Name == "" {
		inst.Config = serving.Config(inst, filepath.Base(inst.Model.Path))
	}
	return s.testSlot.(*TestSlot).cur.Swap(inst)
}

// BatchStats is what a test server's batcher reports to: the model's
// metrics and the slot's statistics, as modelhost wires them.
func (s *Server) BatchStats() batcher.Stats {
	return serving.Tee{s.metrics.Model("test", "1"), &s.testSlot.(*TestSlot).stats}
}

// SetState sets a test server's readiness (and fw_ready, as modelhost does).
func (s *Server) SetState(st serving.State, reason string) {
	ts := s.testSlot.(*TestSlot)
	ts.st.Store(&testReadiness{st, reason})
	ts.metrics.SetReady(st == serving.StateReady)
}
