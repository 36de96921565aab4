package httpapi

import (
	"math/rand/v2"
	"slices"
	"sort"
	"testing"
)

// topIndices (k <= len(scores), as its caller clamps it) answers what a stable sort of every index by descending score
// begins with, ties in index order, for every k (the selection below 65, the
// sort above).
func TestTopIndices(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for trial := 0; trial < 2000; trial++ {
		n := 1 + rng.IntN(300)
		scores := make([]float64, n)
		for i := range scores {
			scores[i] = float64(rng.IntN(1 + n/3)) // many ties
		}
		want := make([]int, n)
		for i := range want {
			want[i] = i
		}
		sort.SliceStable(want, func(a, c int) bool { return scores[want[a]] > scores[want[c]] })
		for _, k := range []int{0, 1, min(n, 5), rng.IntN(n + 1), min(n, 64), min(n, 65), n} {
			got := topIndices(scores, k, make([]int, topIndicesBuf(n, k)))
			if !slices.Equal(got, want[:k]) {
				t.Fatalf("n=%d k=%d: got %v, want %v (scores %v)", n, k, got, want[:k], scores)
			}
		}
	}
}

func BenchmarkTopIndices1000Top5(b *testing.B) {
	rng := rand.New(rand.NewPCG(1, 2))
	scores := make([]float64, 1000)
	for i := range scores {
		scores[i] = rng.Float64()
	}
	buf := make([]int, topIndicesBuf(len(scores), 5))
	for b.Loop() {
		topIndices(scores, 5, buf)
	}
}
