package pybackend

import (
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
)

// Metric kinds, as pb_utils.MetricFamily numbers them.
const (
	kindCounter   = 0
	kindGauge     = 1
	kindHistogram = 2
)

// maxSeries bounds the label sets of one family (a model labelling by
// request would otherwise grow the scrape without end).
const maxSeries = 10000

var (
	metricName = regexp.MustCompile(`^[a-zA-Z_:][a-zA-Z0-9_:]*$`)
	labelName  = regexp.MustCompile(`^[a-zA-Z_][a-zA-Z0-9_]*$`)
)

// Metrics holds the metrics Python models define (Triton's custom metrics:
// pb_utils.MetricFamily and its Metric's increment, set, observe) and
// exports them as a prometheus.Collector beside fw's own. A family keeps
// its name, kind, description and label names; families live as long as
// the server, so a reloaded model counts on.
type Metrics struct {
	reserved []string // name prefixes that are fw's or Triton's own

	mu       sync.Mutex
	families map[string]*family
}

type family struct {
	help    string
	kind    int
	buckets []float64
	labels  []string // sorted; fixed by the first Metric
	desc    *prometheus.Desc
	series  map[string]*series
}

type series struct {
	values []string // in family.labels' order
	value  float64  // counter or gauge; histogram sum
	count  uint64   // histogram
	counts []uint64 // histogram, per bucket (cumulative at collection)
}

// NewMetrics makes the holder of Python models' metrics; names beginning
// with reserved prefixes (fw's and Triton's series) are refused.
func NewMetrics(reserved ...string) *Metrics {
	return &Metrics{reserved: reserved, families: map[string]*family{}}
}

// Family declares a metric family; declaring it again is accepted when
// nothing differs.
func (m *Metrics) Family(name, help string, kind int, buckets []float64) error {
	if !metricName.MatchString(name) {
		return fmt.Errorf("metric family name %q is not a Prometheus metric name ([a-zA-Z_:][a-zA-Z0-9_:]*)", name)
	}
	for _, p := range m.reserved {
		if strings.HasPrefix(name, p) {
			return fmt.Errorf("metric family name %q: names beginning with %q are the server's own", name, p)
		}
	}
	if kind != kindCounter && kind != kindGauge && kind != kindHistogram {
		return fmt.Errorf("metric family %q: kind %d is not COUNTER, GAUGE or HISTOGRAM", name, kind)
	}
	if kind == kindHistogram && (len(buckets) == 0 || len(buckets) > 100 || !slices.IsSorted(buckets)) {
		return fmt.Errorf("metric family %q: a histogram needs 1 to 100 bucket bounds in increasing order", name)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if f, ok := m.families[name]; ok {
		if f.kind != kind || f.help != help || !slices.Equal(f.buckets, buckets) {
			return fmt.Errorf("metric family %q exists with another kind, description or buckets", name)
		}
		return nil
	}
	m.families[name] = &family{help: help, kind: kind, buckets: slices.Clone(buckets), series: map[string]*series{}}
	return nil
}

// Update changes one metric of a family: action "create" (a Metric with
// these labels, at 0), "inc", "set" or "observe".
func (m *Metrics) Update(name string, labels map[string]string, action string, value float64) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	f, ok := m.families[name]
	if !ok {
		return fmt.Errorf("no metric family %q", name)
	}
	keys := slices.Sorted(maps.Keys(labels))
	if f.labels == nil {
		for _, k := range keys {
			if !labelName.MatchString(k) || strings.HasPrefix(k, "__") {
				return fmt.Errorf("metric family %q: label %q is not a Prometheus label name", name, k)
			}
		}
		f.labels = keys
		f.desc = prometheus.NewDesc(name, f.help, keys, nil)
	} else if !slices.Equal(keys, f.labels) {
		return fmt.Errorf("metric family %q has labels %v; a metric of it cannot have %v", name, f.labels, keys)
	}
	values := make([]string, len(keys))
	for i, k := range keys {
		values[i] = labels[k]
	}
	key := strings.Join(values, "\x00")
	s, ok := f.series[key]
	if !ok {
		if len(f.series) >= maxSeries {
			return fmt.Errorf("metric family %q has %d label sets; at most %d", name, len(f.series), maxSeries)
		}
		s = &series{values: values}
		if f.kind == kindHistogram {
			s.counts = make([]uint64, len(f.buckets))
		}
		f.series[key] = s
	}
	switch {
	case action == "create":
	case action == "inc" && f.kind != kindHistogram:
		if f.kind == kindCounter && value < 0 {
			return fmt.Errorf("metric family %q: a counter only increases (increment by %v)", name, value)
		}
		s.value += value
	case action == "set" && f.kind == kindGauge:
		s.value = value
	case action == "observe" && f.kind == kindHistogram:
		s.value += value
		s.count++
		for i, b := range f.buckets {
			if value <= b {
				s.counts[i]++
			}
		}
	default:
		return fmt.Errorf("metric family %q: %s does not apply to its kind", name, action)
	}
	return nil
}

// Describe sends nothing: the families come and go with the models, an
// unchecked collector's right.
func (m *Metrics) Describe(chan<- *prometheus.Desc) {}

// Collect sends every metric's current value.
func (m *Metrics) Collect(ch chan<- prometheus.Metric) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, f := range m.families {
		if f.desc == nil {
			continue
		}
		for _, s := range f.series {
			var metric prometheus.Metric
			var err error
			switch f.kind {
			case kindCounter:
				metric, err = prometheus.NewConstMetric(f.desc, prometheus.CounterValue, s.value, s.values...)
			case kindGauge:
				metric, err = prometheus.NewConstMetric(f.desc, prometheus.GaugeValue, s.value, s.values...)
			default:
				buckets := make(map[float64]uint64, len(f.buckets))
				for i, b := range f.buckets {
					buckets[b] = s.counts[i]
				}
				metric, err = prometheus.NewConstHistogram(f.desc, s.count, s.value, buckets, s.values...)
			}
			if err == nil {
				ch <- metric
			}
		}
	}
}
