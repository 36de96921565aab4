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
