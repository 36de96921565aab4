package benchserve

import (
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// ClosedLoop runs call from clients goroutines back to back for d and
// returns the latencies of the calls that succeeded and the count that
// failed. client is the caller's index (0..clients-1), i its call count.
func ClosedLoop(clients int, d time.Duration, call func(client, i int) (time.Duration, error)) ([]time.Duration, int64) {
	var mu sync.Mutex
	var lat []time.Duration
	var failed atomic.Int64
	deadline := time.Now().Add(d)
	var wg sync.WaitGroup
	for c := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var mine []time.Duration
			for i := 0; time.Now().Before(deadline); i++ {
				dd, err := call(c, i)
				if err != nil {
					failed.Add(1)
					continue
				}
				mine = append(mine, dd)
			}
			mu.Lock()
			lat = append(lat, mine...)
			mu.Unlock()
		}()
	}
	wg.Wait()
	return lat, failed.Load()
}

// Paced is an open loop: each of clients sends at rate/clients requests per
// second for d, a request at each due time (at once when the previous one
// ran late); a latency is from the request's due time, so a server that
// falls behind shows it.
func Paced(clients int, rate float64, d time.Duration, call func(client, i int) (time.Duration, error)) ([]time.Duration, int64) {
	interval := time.Duration(float64(clients) / rate * float64(time.Second))
	start := time.Now()
	end := start.Add(d)
	lats := make([][]time.Duration, clients)
	errs := make([]int64, clients)
	done := make(chan struct{})
	for c := range clients {
		go func() {
			defer func() { done <- struct{}{} }()
			first := start.Add(interval * time.Duration(c) / time.Duration(clients))
			for k := 0; ; k++ {
				due := first.Add(interval * time.Duration(k))
				if due.After(end) {
					return
				}
				if w := time.Until(due); w > 0 {
					time.Sleep(w)
				}
				if _, err := call(c, k); err != nil {
					errs[c]++
					continue
				}
				lats[c] = append(lats[c], time.Since(due))
			}
		}()
	}
	var all []time.Duration
	var n int64
	for range clients {
		<-done
	}
	for c := range clients {
		all = append(all, lats[c]...)
		n += errs[c]
	}
	return all, n
}

// Median is the middle of xs (the upper one of the two for an even count);
// xs is left as it is. Zero for none.
func Median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[len(s)/2]
}

// PercentileMs is the p-quantile (0..1) of lat in milliseconds, 0 for no
// latencies; lat is left as it is.
func PercentileMs(lat []time.Duration, p float64) float64 {
	if len(lat) == 0 {
		return 0
	}
	s := slices.Clone(lat)
	slices.Sort(s)
	return float64(s[min(len(s)-1, int(p*float64(len(s))))].Microseconds()) / 1000
}
