package batcher

import (
	"context"
	"errors"
	"slices"
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
	each := func(ctx context.Context, _ []context.Context, reqs [][]engine.Tensor) ([][]engine.Tensor, []error, error) {
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
	b := NewEachPool([]EachFunc{each}, Config{MaxBatchRows: 64, MaxDelay: 5 * time.Second, PreferredSizes: []int{8}, MaxQueue: 64}, nil)
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

// TestEachPoolStreams: an EachFunc gets each request's own context beside
// the call's; with Streams (a decoupled model, which answers through the
// engine.Responses in those contexts) a request is answered without
// outputs once its call started it, and its own error still reaches it.
func TestEachPoolStreams(t *testing.T) {
	type key struct{}
	var mu sync.Mutex
	var seen []string
	each := func(ctx context.Context, ctxs []context.Context, reqs [][]engine.Tensor) ([][]engine.Tensor, []error, error) {
		errs := make([]error, len(reqs))
		mu.Lock()
		for i, c := range ctxs {
			id, _ := c.Value(key{}).(string)
			seen = append(seen, id)
			if reqs[i][0].Float32s()[0] == 5000 {
				errs[i] = errors.New("refused")
			}
		}
		mu.Unlock()
		return make([][]engine.Tensor, len(reqs)), errs, nil
	}
	b := NewEachPool([]EachFunc{each}, Config{MaxBatchRows: 64, MaxDelay: 5 * time.Second, PreferredSizes: []int{4}, MaxQueue: 64, Streams: true}, nil)
	defer closeOK(t, b)
	a := submitAsync(context.WithValue(context.Background(), key{}, "a"), b, rowsTensor(1, 2, 3))
	c := submitAsync(context.WithValue(context.Background(), key{}, "c"), b, rowsTensor(5, 2, 3))
	if r := <-a; r.err != nil || r.out != nil {
		t.Fatalf("a: %v %v, want no outputs and no error", r.out, r.err)
	}
	if r := <-c; r.err == nil || !strings.Contains(r.err.Error(), "refused") {
		t.Fatalf("c: %v", r.err)
	}
	slices.Sort(seen)
	if !slices.Equal(seen, []string{"a", "c"}) {
		t.Fatalf("contexts seen %v, want each request's own", seen)
	}
}
