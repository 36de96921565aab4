package batcher

import (
	"context"
	"testing"

	"github.com/fw-serve/fw/engine"
)

// A request split into parts (an ensemble's first steps side by side)
// is queued, for its source, once every part has queued or been
// released; a part told twice counts once.
func TestSplitTurnTellsTheSourceOnceAllPartsQueued(t *testing.T) {
	told := 0
	ctx := WithTurn(context.Background(), nil, func() { told++ })
	parts := SplitTurn(ctx, 3)
	if len(parts) != 3 {
		t.Fatalf("%d parts, want 3", len(parts))
	}
	b := New(func(_ context.Context, in []engine.Tensor) ([]engine.Tensor, error) { return in, nil }, Config{MaxBatchRows: 4}, nil)
	defer b.Close(context.Background())
	if _, err := b.Submit(parts[0], []engine.Tensor{engine.FromFloat32([]int64{1}, []float32{1})}); err != nil {
		t.Fatal(err)
	}
	ReleaseTurn(parts[0]) // queued already: counts once
	ReleaseTurn(parts[1]) // never queued (a cache's answer, or failed first)
	if told != 0 {
		t.Fatalf("source told after 2 of 3 parts")
	}
	if _, err := b.Submit(parts[2], []engine.Tensor{engine.FromFloat32([]int64{1}, []float32{2})}); err != nil {
		t.Fatal(err)
	}
	if told != 1 {
		t.Fatalf("source told %d times after every part queued, want 1", told)
	}
	if got := SplitTurn(context.Background(), 2); got[0] != context.Background() || got[1] != context.Background() {
		t.Fatal("without a turn the parts are ctx itself")
	}
	ReleaseTurn(context.Background()) // no turn: nothing to tell
}
