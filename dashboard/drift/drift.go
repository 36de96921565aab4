// Package drift compares a deployment's logged traffic (payloadlog
// records) with a reference window of it: per input and output feature,
// the population stability index (PSI) between the reference's
// distribution and the current one, overall and per time bucket.
//
// Features, from each record: for every input and output tensor with
// values, its mean ("x mean"; a summarized tensor's own mean); for an
// output of class scores (a [1, K] or [K] tensor, K >= 2), the class it
// ranks first ("logits class"), categorical. Numeric features are binned at
// the reference's deciles; categorical ones by category. PSI is
// sum((c - r) * ln(c / r)) over the bins, each share floored at 1e-4; the
// usual reading, kept here: below 0.1 stable, 0.1 to 0.25 moderate, 0.25
// and above drift.
package drift

import (
	"math"
	"slices"
	"sort"
	"strconv"
	"time"

	"github.com/fw-serve/fw/payloadlog"
)

// Levels of a PSI.
const (
	LevelStable   = "stable"
	LevelModerate = "moderate"
	LevelDrift    = "drift"
)

// Statistic says how the numbers are made, for the API's answer.
const Statistic = "PSI (population stability index) of the current window against the reference, numeric features binned at the reference's deciles, shares floored at 1e-4; below 0.1 stable, 0.1 to 0.25 moderate, 0.25 and above drift"

// Level reads a PSI.
func Level(psi float64) string {
	switch {
	case psi >= 0.25:
		return LevelDrift
	case psi >= 0.1:
		return LevelModerate
	}
	return LevelStable
}

// Window describes a set of records.
type Window struct {
	From    time.Time `json:"from"`
	To      time.Time `json:"to"`
	Records int       `json:"records"`
}

// Stats describe a feature in a window: mean and standard deviation for a
// numeric one, category shares for a categorical one.
type Stats struct {
	Mean   *float64           `json:"mean,omitempty"`
	Std    *float64           `json:"std,omitempty"`
	Shares map[string]float64 `json:"shares,omitempty"`
}

// Bucket is a feature in one time bucket of the current window.
type Bucket struct {
	Window
	PSI float64 `json:"psi"`
	Stats
}

// Feature is one compared feature.
type Feature struct {
	Name      string   `json:"name"`
	Kind      string   `json:"kind"` // numeric or categorical
	PSI       float64  `json:"psi"`
	Level     string   `json:"level"`
	Reference Stats    `json:"reference"`
	Current   Stats    `json:"current"`
	Series    []Bucket `json:"series"`
}

// Report compares current with reference.
type Report struct {
	Statistic string    `json:"statistic"`
	Reference Window    `json:"reference"`
	Current   Window    `json:"current"`
	Features  []Feature `json:"features"`
}

// Sample is one record's features: what Compare reads of it, a few numbers
// however large the record's tensors (Summarize).
type Sample struct {
	t    time.Time
	num  map[string]float64
	cats map[string]string
}

// Time is when the record was logged.
func (s Sample) Time() time.Time { return s.t }

// Summarize reduces a record to its features, so that many records can be
// held (a training run's data summary) without their values.
func Summarize(r *payloadlog.Record) Sample { return features(r) }

func features(r *payloadlog.Record) Sample {
	s := Sample{t: r.Time, num: map[string]float64{}, cats: map[string]string{}}
	add := func(prefix string, ts []payloadlog.Tensor, classes bool) {
		for _, t := range ts {
			name := prefix + t.Name
			switch {
			case t.Summary != nil && t.Summary.N > 0:
				s.num[name+" mean"] = t.Summary.Mean
			case len(t.Data) > 0:
				var sum float64
				best := 0
				for i, v := range t.Data {
					sum += v
					if v > t.Data[best] {
						best = i
					}
				}
				s.num[name+" mean"] = sum / float64(len(t.Data))
				if classes && isScores(t) {
					s.cats[name+" class"] = strconv.Itoa(best)
				}
			case len(t.Strings) > 0:
				var n float64
				for _, x := range t.Strings {
					n += float64(len(x))
				}
				s.num[name+" length"] = n / float64(len(t.Strings))
			}
		}
	}
	add("", r.Inputs, false)
	add("", r.Outputs, true)
	return s
}

// isScores: one row of K >= 2 class scores.
func isScores(t payloadlog.Tensor) bool {
	k := int64(len(t.Data))
	switch len(t.Shape) {
	case 1:
		return k >= 2 && t.Shape[0] == k
	case 2:
		return k >= 2 && t.Shape[0] == 1 && t.Shape[1] == k
	}
	return false
}

func window(ss []Sample) Window {
	if len(ss) == 0 {
		return Window{}
	}
	w := Window{From: ss[0].t, To: ss[0].t, Records: len(ss)}
	for _, s := range ss {
		if s.t.Before(w.From) {
			w.From = s.t
		}
		if s.t.After(w.To) {
			w.To = s.t
		}
	}
	return w
}

// Compare builds the report of current against reference, with the
// current window split into at most buckets time buckets.
func Compare(reference, current []*payloadlog.Record, buckets int) Report {
	ref := make([]Sample, len(reference))
	for i, r := range reference {
		ref[i] = features(r)
	}
	return CompareSummarized(ref, current, buckets)
}

// CompareSummarized is Compare with the reference already summarized.
func CompareSummarized(ref []Sample, current []*payloadlog.Record, buckets int) Report {
	cur := make([]Sample, len(current))
	for i, r := range current {
		cur[i] = features(r)
	}
	sort.SliceStable(cur, func(i, j int) bool { return cur[i].t.Before(cur[j].t) })
	rep := Report{Statistic: Statistic, Reference: window(ref), Current: window(cur), Features: []Feature{}}
	if len(ref) == 0 || len(cur) == 0 {
		return rep
	}
	groups := split(cur, buckets)
	numNames, catNames := map[string]bool{}, map[string]bool{}
	for _, s := range ref {
		for k := range s.num {
			numNames[k] = true
		}
		for k := range s.cats {
			catNames[k] = true
		}
	}
	for _, name := range slices.Sorted(mapsKeys(catNames)) {
		get := func(ss []Sample) []string {
			var out []string
			for _, s := range ss {
				if v, ok := s.cats[name]; ok {
					out = append(out, v)
				}
			}
			return out
		}
		r := get(ref)
		f := Feature{Name: name, Kind: "categorical", Reference: Stats{Shares: shares(r)}, Series: []Bucket{}}
		c := get(cur)
		f.Current = Stats{Shares: shares(c)}
		f.PSI = psiCats(f.Reference.Shares, f.Current.Shares)
		for _, g := range groups {
			gc := get(g)
			if len(gc) == 0 {
				continue
			}
			b := Bucket{Window: window(g), Stats: Stats{Shares: shares(gc)}}
			b.PSI = psiCats(f.Reference.Shares, b.Shares)
			f.Series = append(f.Series, b)
		}
		f.Level = Level(f.PSI)
		rep.Features = append(rep.Features, f)
	}
	for _, name := range slices.Sorted(mapsKeys(numNames)) {
		get := func(ss []Sample) []float64 {
			var out []float64
			for _, s := range ss {
				if v, ok := s.num[name]; ok && !math.IsNaN(v) && !math.IsInf(v, 0) {
					out = append(out, v)
				}
			}
			return out
		}
		r := get(ref)
		c := get(cur)
		if len(r) == 0 || len(c) == 0 {
			continue
		}
		edges := deciles(r)
		rs := binShares(r, edges)
		f := Feature{Name: name, Kind: "numeric", Reference: meanStd(r), Current: meanStd(c), Series: []Bucket{}}
		f.PSI = psi(rs, binShares(c, edges))
		for _, g := range groups {
			gc := get(g)
			if len(gc) == 0 {
				continue
			}
			b := Bucket{Window: window(g), Stats: meanStd(gc)}
			b.PSI = psi(rs, binShares(gc, edges))
			f.Series = append(f.Series, b)
		}
		f.Level = Level(f.PSI)
		rep.Features = append(rep.Features, f)
	}
	return rep
}

func mapsKeys(m map[string]bool) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

// split cuts time-ordered samples into at most n buckets of equal time
// span (empty ones left out).
func split(ss []Sample, n int) [][]Sample {
	if n < 1 {
		n = 1
	}
	from, to := ss[0].t, ss[len(ss)-1].t
	span := to.Sub(from)
	if span <= 0 {
		return [][]Sample{ss}
	}
	out := make([][]Sample, n)
	for _, s := range ss {
		i := int(float64(s.t.Sub(from)) / float64(span) * float64(n))
		i = min(i, n-1)
		out[i] = append(out[i], s)
	}
	return slices.DeleteFunc(out, func(g []Sample) bool { return len(g) == 0 })
}

// deciles are the reference's inner decile edges, without repeats.
func deciles(v []float64) []float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	var edges []float64
	for q := 1; q < 10; q++ {
		e := s[min(len(s)-1, q*len(s)/10)]
		if len(edges) == 0 || e > edges[len(edges)-1] {
			edges = append(edges, e)
		}
	}
	return edges
}

// binShares are the shares of v in the bins the edges make ((-inf, e0),
// [e0, e1), ..., [ek, +inf)).
func binShares(v []float64, edges []float64) []float64 {
	out := make([]float64, len(edges)+1)
	for _, x := range v {
		out[sort.Search(len(edges), func(i int) bool { return edges[i] > x })]++
	}
	for i := range out {
		out[i] /= float64(len(v))
	}
	return out
}

const floor = 1e-4

func psi(ref, cur []float64) float64 {
	var p float64
	for i := range ref {
		r, c := max(ref[i], floor), max(cur[i], floor)
		p += (c - r) * math.Log(c/r)
	}
	return round(p)
}

func psiCats(ref, cur map[string]float64) float64 {
	keys := map[string]bool{}
	for k := range ref {
		keys[k] = true
	}
	for k := range cur {
		keys[k] = true
	}
	var p float64
	for k := range keys {
		r, c := max(ref[k], floor), max(cur[k], floor)
		p += (c - r) * math.Log(c/r)
	}
	return round(p)
}

func shares(v []string) map[string]float64 {
	out := map[string]float64{}
	for _, x := range v {
		out[x]++
	}
	for k := range out {
		out[k] = round(out[k] / float64(len(v)))
	}
	return out
}

func meanStd(v []float64) Stats {
	var sum, sq float64
	for _, x := range v {
		sum += x
	}
	m := sum / float64(len(v))
	for _, x := range v {
		sq += (x - m) * (x - m)
	}
	sd := math.Sqrt(sq / float64(len(v)))
	m, sd = round(m), round(sd)
	return Stats{Mean: &m, Std: &sd}
}

// round keeps 6 significant digits: enough to read, short to send.
func round(x float64) float64 {
	if x == 0 || math.IsNaN(x) || math.IsInf(x, 0) {
		return x
	}
	v, _ := strconv.ParseFloat(strconv.FormatFloat(x, 'g', 6, 64), 64)
	return v
}
