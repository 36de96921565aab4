package tracking

import (
	"context"

	"github.com/fw-serve/fw/dashboard/store"
)

// IngestResult is the 200 answer of POST /api/ingest: the store's
// ApplyResult with errors always present (empty when none).
type IngestResult struct {
	Applied    int                `json:"applied"`
	Duplicates int                `json:"duplicates"`
	Acked      []store.Ack        `json:"acked"`
	Errors     []store.EventError `json:"errors"`
}

// Ingest decodes a body (JSON array or JSON lines) and applies it.
func Ingest(ctx context.Context, st store.Store, body []byte) (IngestResult, error) {
	events, err := store.DecodeEvents(body)
	if err != nil {
		return IngestResult{}, err
	}
	return Apply(ctx, st, events)
}

// Apply stores decoded events, answering IngestResult's shape.
func Apply(ctx context.Context, st store.Store, events []store.Event) (IngestResult, error) {
	res, err := st.Apply(ctx, events)
	if err != nil {
		return IngestResult{}, err
	}
	out := IngestResult{Applied: res.Applied, Duplicates: res.Duplicates, Acked: res.Acked, Errors: res.Errors}
	if out.Acked == nil {
		out.Acked = []store.Ack{}
	}
	if out.Errors == nil {
		out.Errors = []store.EventError{}
	}
	return out, nil
}
