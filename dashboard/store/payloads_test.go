package store

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"
)

// TestPayloads: records are stored once (a spool's resend is ignored),
// read newest or oldest first within a window, by deployment or model
// version, and pruned.
func TestPayloads(t *testing.T) {
	forEach(t, func(t *testing.T, open func(Config) Store) {
		ctx := context.Background()
		st := open(Config{})
		base := time.Date(2026, 11, 27, 9, 0, 0, 0, time.UTC)
		var ps []Payload
		for i := range 6 {
			dep, ver := "dep-a", "1"
			if i >= 4 {
				dep, ver = "shared-server", "2"
			}
			ps = append(ps, Payload{ID: fmt.Sprintf("%032x", i), Deployment: dep, Model: "digits", Version: ver, Time: base.Add(time.Duration(i) * time.Minute),
				Failed: i == 3, Record: json.RawMessage(fmt.Sprintf(`{"id":"%032x","i":%d}`, i, i))})
		}
		if n, err := st.PutPayloads(ctx, ps); err != nil || n != 6 {
			t.Fatalf("put: %d %v", n, err)
		}
		if n, err := st.PutPayloads(ctx, ps[:3]); err != nil || n != 0 {
			t.Fatalf("resent: %d %v", n, err)
		}
		got, err := st.ListPayloads(ctx, PayloadQuery{Deployment: "dep-a", Limit: 2})
		if err != nil || len(got) != 2 || got[0].ID != fmt.Sprintf("%032x", 3) || !got[0].Failed || string(got[0].Record) != `{"id":"00000000000000000000000000000003","i":3}` {
			t.Fatalf("newest: %v %+v", err, got)
		}
		got, err = st.ListPayloads(ctx, PayloadQuery{Deployment: "dep-a", Oldest: true, Since: base.Add(time.Minute), Until: base.Add(3 * time.Minute)})
		if err != nil || len(got) != 2 || got[0].ID != fmt.Sprintf("%032x", 1) || !got[0].Time.Equal(base.Add(time.Minute)) {
			t.Fatalf("window: %v %+v", err, got)
		}
		got, err = st.ListPayloads(ctx, PayloadQuery{Model: "digits", Version: "2"})
		if err != nil || len(got) != 2 || got[0].Deployment != "shared-server" {
			t.Fatalf("a model version's: %v %+v", err, got)
		}
		if n, err := st.PrunePayloads(ctx, time.Now().Add(time.Second), 100); err != nil || n != 6 {
			t.Fatalf("pruned %d: %v", n, err)
		}
		if _, err := st.PutPayloads(ctx, make([]Payload, MaxPayloadsPerBatch+1)); ErrorCode(err) != CodeBatchTooLarge {
			t.Fatalf("an oversized batch: %v", err)
		}
	})
}
