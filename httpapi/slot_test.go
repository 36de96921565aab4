package httpapi

import (
	"context"
	"log/slog"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/fw-serve/fw/serving"
)

// TestSlot is a Slot the tests fill by hand, doing what modelhost.Host does
// in fw serve (install an instance, set readiness).
type TestSlot struct {
	metrics *Metrics
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
	return New(base, cfg, &TestSlot{metrics: m}, m, log, reg)
}

// Swap installs inst in a test server's slot and returns the previous one.
func (s *Server) Swap(inst *serving.Instance) *serving.Instance {
	return s.slot.(*TestSlot).cur.Swap(inst)
}

// SetState sets a test server's readiness (and fw_ready, as modelhost does).
func (s *Server) SetState(st serving.State, reason string) {
	ts := s.slot.(*TestSlot)
	ts.st.Store(&testReadiness{st, reason})
	ts.metrics.SetReady(st == serving.StateReady)
}
