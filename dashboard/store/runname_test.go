package store

import (
	"context"
	"testing"
)

// A run started without a name gets a readable one derived from its ID (the
// same on every backend and replay), valid under the name rule; a given
// name is kept.
func TestRunNameWhenNoneGiven(t *testing.T) {
	seen := map[string]bool{}
	for i := range 2000 {
		id := NewID()
		n := RunName(id)
		if n != RunName(id) {
			t.Fatalf("RunName(%s) is not deterministic", id)
		}
		if err := ValidateName(n); err != nil {
			t.Fatalf("RunName(%s) = %q: %v", id, n, err)
		}
		if i < 200 {
			seen[n] = true
		}
	}
	if len(seen) < 190 {
		t.Errorf("only %d different names for 200 runs", len(seen))
	}
	forEach(t, func(t *testing.T, open func(Config) Store) {
		s := open(Config{})
		ctx := context.Background()
		e := &ev{run: "run1"}
		mustApply(t, s, e.next(Event{Type: EventRunStart, Experiment: "exp"}))
		named := &ev{run: "run2"}
		mustApply(t, s, named.next(Event{Type: EventRunStart, Experiment: "exp", Name: "mine"}))
		r, err := s.GetRun(ctx, "run1")
		if err != nil || r.Name != RunName("run1") || r.ID != "run1" {
			t.Fatalf("unnamed run: %+v %v, want name %q", r, err, RunName("run1"))
		}
		if r, err := s.GetRun(ctx, "run2"); err != nil || r.Name != "mine" {
			t.Fatalf("named run: %+v %v", r, err)
		}
	})
}
