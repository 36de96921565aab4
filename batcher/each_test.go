package batcher

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fw-serve/fw/engine"
)

// TestEachPool: requests grouped into one call reach the EachFunc as a
// list, unjoined; each gets its own answer (of any shape) or its own error;
// a wrong count of answers or a panic fails the call for all.
func TestEachPool(t *testing.T) {
	var mu sync.Mutex
	var calls []int
	each := func(ctx context.Context, reqs [][]engine.Tensor) ([][]engine.Tensor, []error, error) {
		mu.Lock()
		calls = append(calls, len(reqs))
		mu.Unlock()
		outs := make([][]engine.Tensor, len(reqs))
		errs := make([]error, len(reqs))
		for i, in := range reqs {
			v := in[0].Float32s()
			switch v[0] {
			case 5000: // this request's error only
				errs[i] = errors.New("request 5 is refused")
			case 6000:
				panic("boom")
			case 7000:
				return outs[:1], errs, nil
			default: // one number per request, whatever its rows
				outs[i] = []engine.Tensor{engine.FromFloat32([]int64{1}, []float32{v[0] + float32(len(reqs))})}
			}
		}
		return outs, errs, nil
	}
	// A batch is held until it has 8 rows.
	b := NewEachPool([]EachFunc{each}, Config{MaxBatchRows: 64, MaxDelay: 5 * time.Second, PreferredRows: 8, MaxQueue: 64}, nil)
	defer closeOK(t, b)
	ctx := context.Background()
	var chans []<-chan result
	for id := 1; id <= 4; id++ {
		chans = append(chans, submitAsync(ctx, b, rowsTensor(id, 2, 3)))
	}
	for id, ch := range chans {
		r := <-ch
		if r.err != nil {
			t.Fatal(r.err)
		}
		if got := r.out[0].Float32s(); len(got) != 1 || got[0] != float32((id+1)*1000+4) {
			t.Fatalf("request %d: %v, want its own answer from a call of 4", id+1, got)
		}
	}
	if len(calls) != 1 || calls[0] != 4 {
		t.Fatalf("calls %v, want one of 4 requests", calls)
	}
	good := submitAsync(ctx, b, rowsTensor(1, 4, 3))
	bad := submitAsync(ctx, b, rowsTensor(5, 4, 3))
	if r := <-bad; r.err == nil || !strings.Contains(r.err.Error(), "request 5 is refused") {
		t.Fatalf("bad: %v", r.err)
	}
	if r := <-good; r.err != nil {
		t.Fatalf("good, batched with bad: %v", r.err)
	}
	for _, id := range []int{6, 7} {
		a := submitAsync(ctx, b, rowsTensor(1, 4, 3))
		c := submitAsync(ctx, b, rowsTensor(id, 4, 3))
		for _, r := range []result{<-a, <-c} {
			if r.err == nil {
				t.Fatalf("id %d: a failed call answered", id)
			}
		}
	}
}
