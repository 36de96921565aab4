package api

import (
	"context"

	"github.com/fw-serve/fw/dashboard/replica"
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
func (s *Server) replicaList(c *call) (any, error) {
	if s.replicas == nil {
		return nil, apiErr(503, CodeUnavailable, "replica information is not available on this server")
	}
	list, err := s.replicas.Replicas(c.ctx)
	if err != nil {
		return nil, err
	}
	if list == nil {
		list = []replica.Replica{}
	}
	return map[string]any{"self": s.replicas.Self().ID, "replicas": list}, nil
}
