package api

import (
	"context"

	"github.com/fw-serve/fw/dashboard/replica"
	"github.com/valyala/fasthttp"
)

// ReplicaLister lists the dashboard replicas sharing the database
// (*replica.Member does).
type ReplicaLister interface {
	Self() replica.Info
	Replicas(ctx context.Context) ([]replica.Replica, error)
}

// SetReplicas enables GET /api/system/replicas (503 until then). Call it
// before serving.
func (s *Server) SetReplicas(r ReplicaLister) { s.replicas = r }

// replicaList answers GET /api/system/replicas: every dashboard replica
// with a lease in the database, whether it is alive, and which one
// answered.
func (s *Server) replicaList(ctx *fasthttp.RequestCtx) {
	if s.replicas == nil {
		writeError(ctx, apiErr(503, CodeUnavailable, "replica information is not available on this server"))
		return
	}
	list, err := s.replicas.Replicas(s.base)
	if err != nil {
		writeError(ctx, fromError(s.log, err))
		return
	}
	if list == nil {
		list = []replica.Replica{}
	}
	writeJSON(ctx, 200, map[string]any{"self": s.replicas.Self().ID, "replicas": list})
}
