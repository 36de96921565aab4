package tracking

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/fw-serve/fw/dashboard/store"
)

// ReasonVanished is the error of a run whose process is gone from this host.
const ReasonVanished = "process vanished: the training process (source.pid on this host) is no longer running"

// ReconcileRuns marks failed the running or queued runs whose process is
// gone: a run recorded on this host (source.host == host) whose pid is not
// alive, and, when staleAfter > 0, any run without an event for longer than
// staleAfter (a process on another host cannot be checked). It returns the
// IDs it failed.
func ReconcileRuns(ctx context.Context, st store.Store, host string, staleAfter time.Duration, log *slog.Logger) ([]string, error) {
	gone, err := st.Reconcile(ctx, func(r store.Run) bool {
		if r.Source.Host != host || r.Source.PID <= 0 {
			return true
		}
		return processAlive(r.Source.PID)
	}, ReasonVanished)
	if err != nil {
		return nil, err
	}
	if staleAfter > 0 {
		now := time.Now()
		stale, err := st.Reconcile(ctx, func(r store.Run) bool {
			return now.Sub(r.Updated) <= staleAfter
		}, fmt.Sprintf("process vanished: no event for more than %s (--stale-after)", staleAfter))
		if err != nil {
			return gone, err
		}
		gone = append(gone, stale...)
	}
	for _, id := range gone {
		log.Warn("run marked failed: its process is gone", "run_id", id)
	}
	return gone, nil
}
