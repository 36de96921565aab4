package benchserve

import (
	"errors"
	"testing"
	"time"
)

// Every client runs until the deadline; failed calls are counted, not timed.
func TestClosedLoop(t *testing.T) {
	seen := make([]bool, 3)
	lat, failed := ClosedLoop(3, 30*time.Millisecond, func(client, i int) (time.Duration, error) {
		seen[client] = true // each client writes only its own slot
		time.Sleep(time.Millisecond)
		if i%2 == 1 {
			return 0, errors.New("odd")
		}
		return time.Duration(i+1) * time.Millisecond, nil
	})
	if len(lat) == 0 || failed == 0 || !seen[0] || !seen[1] || !seen[2] {
		t.Fatalf("%d timed, %d failed, clients %v", len(lat), failed, seen)
	}
	if n := int64(len(lat)); failed < n-3 || failed > n {
		t.Fatalf("%d timed and %d failed: every other call fails", n, failed)
	}
}

func TestPercentileMs(t *testing.T) {
	lat := []time.Duration{4 * time.Millisecond, time.Millisecond, 3 * time.Millisecond, 2 * time.Millisecond}
	if p := PercentileMs(lat, 0.5); p != 3 {
		t.Fatalf("p50 %g", p)
	}
	if p := PercentileMs(lat, 0.99); p != 4 {
		t.Fatalf("p99 %g", p)
	}
	if lat[0] != 4*time.Millisecond {
		t.Fatal("the input was sorted in place")
	}
	if PercentileMs(nil, 0.5) != 0 {
		t.Fatal("no latencies")
	}
}
