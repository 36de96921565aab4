// Package payloadlog is fw serve's request/response logging: a sample of
// the inferences it serves (the inputs, the outputs, the model version,
// the latency) recorded and sent to the dashboard (POST /api/payloads),
// where a deployment's traffic is compared with a reference to flag drift,
// or written to JSONL files.
//
// The serving path never waits on it: sampling is decided when a request
// arrives (Sample), a sampled inference's record is built from its tensors
// (copied, or summarized beyond MaxValues) and queued without blocking; one
// goroutine sends batches. When the dashboard does not take them, records
// go to a spool directory (bounded in bytes) and are sent again, oldest
// first, once it answers; what fits neither the queue nor the spool is
// dropped and counted.
package payloadlog

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"log/slog"
	"math"
	mrand "math/rand/v2"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/fw-serve/fw/engine"
	"github.com/fw-serve/fw/internal/worker"
)

// Record is one logged inference, as the dashboard stores it.
type Record struct {
	ID         string    `json:"id"` // random, 32 hex digits: a record sent twice is stored once
	Time       time.Time `json:"time"`
	Deployment string    `json:"deployment,omitempty"`
	Model      string    `json:"model"`
	Version    string    `json:"version"`
	LatencyMs  float64   `json:"latency_ms"`
	Error      string    `json:"error,omitempty"`
	Inputs     []Tensor  `json:"inputs"`
	Outputs    []Tensor  `json:"outputs"`
}

// Tensor is one input or output of a Record: its values (numbers, or
// strings for BYTES), or, for a tensor of more than MaxValues elements, a
// summary of them; a redacted one keeps its name, type and shape only.
type Tensor struct {
	Name     string    `json:"name"`
	Datatype string    `json:"datatype"`
	Shape    []int64   `json:"shape"`
	Data     []float64 `json:"data,omitempty"`
	Strings  []string  `json:"strings,omitempty"`
	Summary  *Summary  `json:"summary,omitempty"`
	Redacted bool      `json:"redacted,omitempty"`
	// NonFinite counts NaN and infinite values, written as 0 in Data (JSON
	// has no NaN) and left out of a Summary.
	NonFinite int `json:"nonfinite,omitempty"`
}

// MarshalJSON writes t with the values of a float32, float16 or bfloat16
// tensor in their own precision's shortest form (0.1, not
// 0.10000000149011612): the same numbers, half the bytes.
func (t Tensor) MarshalJSON() ([]byte, error) {
	type plain Tensor // the same fields, without this method
	if len(t.Data) == 0 || (t.Datatype != "float32" && t.Datatype != "float16" && t.Datatype != "bfloat16") {
		return json.Marshal(plain(t))
	}
	data := t.Data
	t.Data = nil
	head, err := json.Marshal(plain(t))
	if err != nil {
		return nil, err
	}
	out := make([]byte, 0, len(head)+len(data)*10+10)
	out = append(out, head[:len(head)-1]...)
	out = append(out, `,"data":[`...)
	for i, v := range data {
		if i > 0 {
			out = append(out, ',')
		}
		out = strconv.AppendFloat(out, v, 'g', -1, 32)
	}
	return append(out, "]}"...), nil
}

// Summary describes a tensor too large to log whole.
type Summary struct {
	N    int     `json:"n"`
	Mean float64 `json:"mean"`
	Std  float64 `json:"std"`
	Min  float64 `json:"min"`
	Max  float64 `json:"max"`
}

// Config is how a server logs payloads.
type Config struct {
	// Rate is the fraction of requests logged, from 0 to 1.
	Rate float64
	// Dest is the dashboard's URL (http(s)://HOST:PORT: records are POSTed
	// to its /api/payloads), a bucket (s3://bucket/prefix, with Objects
	// opened on it: an NDJSON object a batch, under
	// payloads/YYYY/MM/DD/HH/), or a directory (JSONL files, one an hour).
	Dest string
	// Objects is the bucket Dest names (s3://...); nil otherwise.
	Objects Objects
	// Token is the dashboard's bearer token ("" for none).
	Token string
	// Deployment names this server in the records (the dashboard's
	// deployment ID when it started it).
	Deployment string
	// Redact names the inputs and outputs whose values are never logged.
	Redact []string
	// MaxValues is the most elements of a tensor logged as values
	// (default 4096); a larger tensor is summarized. MaxStringBytes clips
	// each BYTES element (default 256).
	MaxValues, MaxStringBytes int
	// SpoolDir keeps records the dashboard did not take ("": none, they
	// are dropped), at most SpoolBytes (default 64 MiB).
	SpoolDir   string
	SpoolBytes int64
	// Queue is the most records waiting to be sent (default 4096).
	Queue int
	// FlushEvery is the longest a record waits to be sent (default 1 s).
	FlushEvery time.Duration
}

func (c *Config) defaults() {
	if c.MaxValues <= 0 {
		c.MaxValues = 4096
	}
	if c.MaxStringBytes <= 0 {
		c.MaxStringBytes = 256
	}
	if c.SpoolBytes <= 0 {
		c.SpoolBytes = 64 << 20
	}
	if c.Queue <= 0 {
		c.Queue = 4096
	}
	if c.FlushEvery <= 0 {
		c.FlushEvery = time.Second
	}
}

// Counts are what a Logger did with the records it built.
type Counts struct {
	Logged  uint64 `json:"logged"`  // built and queued
	Sent    uint64 `json:"sent"`    // taken by the dashboard or written to a file
	Spooled uint64 `json:"spooled"` // written to the spool (sent later: they count in Sent again then)
	Dropped uint64 `json:"dropped"` // lost: the queue or the spool was full, or the dashboard refused them
}

// Logger samples and logs payloads. Safe for concurrent use; a nil
// *Logger logs nothing.
type Logger struct {
	cfg    Config
	bound  uint64 // a draw below it is sampled
	redact map[string]bool
	log    *slog.Logger
	out    sink

	queue chan *Record
	stop  chan struct{}
	flush chan chan struct{}
	done  chan struct{}
	once  sync.Once

	logged, sent, spooled, dropped atomic.Uint64
}

// sink is where batches of records go: the dashboard (with a spool) or
// files.
type sink interface {
	write(ctx context.Context, recs []*Record) error
	// retry sends what waits in the spool, if anything; quick when empty.
	retry(ctx context.Context)
	close()
}

// New starts a Logger for cfg; its errors are logged to log.
func New(cfg Config, log *slog.Logger) (*Logger, error) {
	cfg.defaults()
	if !(cfg.Rate >= 0 && cfg.Rate <= 1) {
		return nil, fmt.Errorf("payload logging rate %v: give a fraction from 0 to 1", cfg.Rate)
	}
	l := &Logger{cfg: cfg, log: log, redact: map[string]bool{}, queue: make(chan *Record, cfg.Queue),
		stop: make(chan struct{}), flush: make(chan chan struct{}), done: make(chan struct{})}
	for _, n := range cfg.Redact {
		if n = strings.TrimSpace(n); n != "" {
			l.redact[n] = true
		}
	}
	switch {
	case cfg.Rate >= 1:
		l.bound = math.MaxUint64
	case cfg.Rate > 0:
		l.bound = uint64(cfg.Rate * float64(math.MaxUint64))
	}
	if cfg.Objects != nil {
		s, err := newObjectSink(cfg, l)
		if err != nil {
			return nil, err
		}
		l.out = s
	} else if u, err := url.Parse(cfg.Dest); err == nil && (u.Scheme == "http" || u.Scheme == "https") && u.Host != "" {
		s, err := newDashboardSink(cfg, u, l)
		if err != nil {
			return nil, err
		}
		l.out = s
	} else if strings.Contains(cfg.Dest, "://") {
		return nil, fmt.Errorf("payload destination %q: give the dashboard's http(s)://HOST:PORT, a bucket s3://BUCKET/PREFIX, or a directory", cfg.Dest)
	} else {
		s, err := newFileSink(l, cfg.Dest, cfg.SpoolBytes)
		if err != nil {
			return nil, err
		}
		l.out = s
	}
	go l.run()
	return l, nil
}

// Sample decides whether the request arriving now is logged: one random
// draw, no allocation.
func (l *Logger) Sample() bool {
	if l == nil || l.bound == 0 {
		return false
	}
	return l.bound == math.MaxUint64 || mrand.Uint64() < l.bound
}

// Counts reports what the logger did so far.
func (l *Logger) Counts() Counts {
	if l == nil {
		return Counts{}
	}
	return Counts{Logged: l.logged.Load(), Sent: l.sent.Load(), Spooled: l.spooled.Load(), Dropped: l.dropped.Load()}
}

type ctxKey struct{}

// With returns ctx marking its request as sampled for l.
func With(ctx context.Context, l *Logger) context.Context {
	if l == nil {
		return ctx
	}
	return context.WithValue(ctx, ctxKey{}, l)
}

// From is the logger of a sampled request, or nil.
func From(ctx context.Context) *Logger {
	l, _ := ctx.Value(ctxKey{}).(*Logger)
	return l
}

// Log records one inference of model version: its inputs and outputs with
// the specs that name them (the client's view), how long it took, and its
// error. It copies what it keeps, so the tensors may be reused once it
// returns, and never blocks: a full queue drops the record, counted.
func (l *Logger) Log(model, version string, inSpecs []engine.TensorSpec, in []engine.Tensor, outSpecs []engine.TensorSpec, out []engine.Tensor, took time.Duration, err error) {
	if l == nil {
		return
	}
	r := &Record{ID: newID(), Time: time.Now().UTC(), Deployment: l.cfg.Deployment, Model: model, Version: version,
		LatencyMs: float64(took.Microseconds()) / 1000}
	if err != nil {
		r.Error = Clip(err.Error(), 1024)
	}
	r.Inputs = l.tensors(inSpecs, in)
	r.Outputs = l.tensors(outSpecs, out)
	l.logged.Add(1)
	select {
	case l.queue <- r:
	default:
		l.dropped.Add(1)
	}
}

func (l *Logger) tensors(specs []engine.TensorSpec, ts []engine.Tensor) []Tensor {
	out := make([]Tensor, 0, len(ts))
	for i, t := range ts {
		if t.Absent() { // an optional input the request left out
			continue
		}
		name := fmt.Sprintf("%d", i)
		if i < len(specs) {
			name = specs[i].Name
		}
		out = append(out, l.tensor(name, t))
	}
	return out
}

// tensor is t as a record keeps it.
func (l *Logger) tensor(name string, t engine.Tensor) Tensor {
	o := Tensor{Name: name, Datatype: t.DType.String(), Shape: slices.Clone(t.Shape)}
	if l.redact[name] {
		o.Redacted = true
		return o
	}
	if t.DType == engine.String {
		strs, err := t.Strings()
		if err != nil {
			return o
		}
		for i, s := range strs {
			if i == l.cfg.MaxValues {
				break
			}
			o.Strings = append(o.Strings, Clip(string(s), l.cfg.MaxStringBytes))
		}
		return o
	}
	n := t.Len()
	if n > l.cfg.MaxValues {
		var sum, sq float64
		mn, mx := math.Inf(1), math.Inf(-1)
		finite := 0
		for i := range n {
			v := t.At(i)
			if math.IsNaN(v) || math.IsInf(v, 0) {
				o.NonFinite++
				continue
			}
			finite++
			sum += v
			sq += v * v
			mn, mx = min(mn, v), max(mx, v)
		}
		s := &Summary{N: n}
		if finite > 0 {
			s.Mean = sum / float64(finite)
			s.Std = math.Sqrt(max(0, sq/float64(finite)-s.Mean*s.Mean))
			s.Min, s.Max = mn, mx
		}
		o.Summary = s
		return o
	}
	o.Data = make([]float64, n)
	for i := range n {
		v := t.At(i)
		if math.IsNaN(v) || math.IsInf(v, 0) {
			o.NonFinite++
			v = 0
		}
		o.Data[i] = v
	}
	return o
}

func newID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// Clip cuts s to at most n bytes at a character boundary, and replaces
// what is not UTF-8 (for text taken from requests into records and spans).
func Clip(s string, n int) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

// run is the sending goroutine: a batch goes out when it holds 256
// records, when its oldest has waited FlushEvery, on Flush and at Close;
// the spool is retried every 5 seconds.
func (l *Logger) run() {
	defer close(l.done)
	var batch []*Record
	tick := time.NewTicker(l.cfg.FlushEvery)
	defer tick.Stop()
	lastRetry := time.Now()
	send := func() {
		if len(batch) == 0 {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		if err := l.out.write(ctx, batch); err != nil {
			l.log.Warn("payload logging: a batch was not written", "records", len(batch), "err", err)
		}
		cancel()
		clear(batch)
		batch = batch[:0]
	}
	drain := func() {
		for {
			select {
			case r := <-l.queue:
				batch = append(batch, r)
				if len(batch) >= 256 {
					send()
				}
			default:
				send()
				return
			}
		}
	}
	for {
		select {
		case r := <-l.queue:
			batch = append(batch, r)
			if len(batch) >= 256 {
				send()
			}
		case <-tick.C:
			send()
			if time.Since(lastRetry) >= 5*time.Second {
				lastRetry = time.Now()
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				l.out.retry(ctx)
				cancel()
			}
		case ch := <-l.flush:
			drain()
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			l.out.retry(ctx)
			cancel()
			close(ch)
		case <-l.stop:
			drain()
			l.out.close()
			return
		}
	}
}

// Flush sends what is queued and what waits in the spool (if the
// destination takes it), waiting for it or ctx.
func (l *Logger) Flush(ctx context.Context) error {
	if l == nil {
		return nil
	}
	if err := worker.Ask(ctx, l.flush, l.done); err != nil {
		return fmt.Errorf("flushing payload records: %w", err)
	}
	return nil
}

// Close sends what is queued (to the spool when the dashboard does not
// take it) and stops; ctx bounds the wait.
func (l *Logger) Close(ctx context.Context) error {
	if l == nil {
		return nil
	}
	l.once.Do(func() { close(l.stop) })
	select {
	case <-l.done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("payload records still queued at shutdown: %w", ctx.Err())
	}
}
