package drift

import (
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/fw-serve/fw/payloadlog"
)

// records makes n records an hour apart from start whose input values are
// drawn around mean and whose top class is drawn from classes.
func records(rng *rand.Rand, start time.Time, n int, mean float64, classes []int) []*payloadlog.Record {
	out := make([]*payloadlog.Record, n)
	for i := range out {
		x := make([]float64, 8)
		for j := range x {
			x[j] = mean + rng.NormFloat64()
		}
		logits := make([]float64, 10)
		logits[classes[rng.IntN(len(classes))]] = 5
		out[i] = &payloadlog.Record{Time: start.Add(time.Duration(i) * time.Minute), Model: "m", Version: "1",
			Inputs:  []payloadlog.Tensor{{Name: "x", Datatype: "float32", Shape: []int64{1, 8}, Data: x}},
			Outputs: []payloadlog.Tensor{{Name: "logits", Datatype: "float32", Shape: []int64{1, 10}, Data: logits}}}
	}
	return out
}

func feature(t *testing.T, r Report, name string) Feature {
	t.Helper()
	for _, f := range r.Features {
		if f.Name == name {
			return f
		}
	}
	t.Fatalf("no feature %q in %+v", name, r.Features)
	return Feature{}
}

// TestCompare: the same distribution is stable; a shifted input and a
// changed class mix are drift, and the time buckets show when it began.
func TestCompare(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	t0 := time.Date(2026, 11, 27, 0, 0, 0, 0, time.UTC)
	ref := records(rng, t0, 500, 0, []int{0, 1, 2, 3})
	same := records(rng, t0.Add(24*time.Hour), 500, 0, []int{0, 1, 2, 3})
	r := Compare(ref, same, 6)
	if r.Reference.Records != 500 || r.Current.Records != 500 || r.Statistic == "" {
		t.Fatalf("windows: %+v %+v", r.Reference, r.Current)
	}
	for _, name := range []string{"x mean", "logits class", "logits mean"} {
		if f := feature(t, r, name); f.Level != LevelStable || f.PSI >= 0.1 {
			t.Errorf("%s on the same distribution: PSI %v %s", name, f.PSI, f.Level)
		}
	}
	// The second half shifts: inputs up by one standard deviation of
	// their mean... by 1 (each value), classes 4-5 only.
	drifted := append(records(rng, t0.Add(24*time.Hour), 250, 0, []int{0, 1, 2, 3}), records(rng, t0.Add(24*time.Hour+250*time.Minute), 250, 1, []int{4, 5})...)
	r = Compare(ref, drifted, 4)
	x := feature(t, r, "x mean")
	if x.Level != LevelDrift || x.Kind != "numeric" || *x.Current.Mean < 0.3 {
		t.Fatalf("x mean: %+v", x)
	}
	if len(x.Series) != 4 || x.Series[0].PSI >= 0.1 || x.Series[3].PSI < 0.25 {
		t.Fatalf("x mean over time: %+v", x.Series)
	}
	c := feature(t, r, "logits class")
	if c.Level != LevelDrift || c.Kind != "categorical" || c.Current.Shares["4"] < 0.15 || c.Reference.Shares["4"] != 0 {
		t.Fatalf("class: %+v", c)
	}
	total := 0
	for _, b := range c.Series {
		total += b.Records
	}
	if total != 500 {
		t.Fatalf("buckets hold %d of 500 records", total)
	}
}

// TestCompareEdges: no records, summarized tensors, strings, NaN.
func TestCompareEdges(t *testing.T) {
	if r := Compare(nil, nil, 4); len(r.Features) != 0 || r.Current.Records != 0 {
		t.Fatalf("empty: %+v", r)
	}
	t0 := time.Now()
	mk := func(mean float64, s string) *payloadlog.Record {
		return &payloadlog.Record{Time: t0, Inputs: []payloadlog.Tensor{
			{Name: "img", Summary: &payloadlog.Summary{N: 150528, Mean: mean}},
			{Name: "text", Strings: []string{s}},
			{Name: "bad", Data: []float64{math.NaN()}},
		}}
	}
	ref := []*payloadlog.Record{mk(0.1, "ab"), mk(0.2, "abc"), mk(0.3, "abcd")}
	cur := []*payloadlog.Record{mk(0.9, "abcdefgh"), mk(0.95, "abcdefghi")}
	r := Compare(ref, cur, 3)
	if f := feature(t, r, "img mean"); f.Level != LevelDrift {
		t.Fatalf("summarized image: %+v", f)
	}
	if f := feature(t, r, "text length"); f.Level != LevelDrift {
		t.Fatalf("strings: %+v", f)
	}
	for _, f := range r.Features {
		if math.IsNaN(f.PSI) {
			t.Fatalf("NaN PSI: %+v", f)
		}
	}
}
