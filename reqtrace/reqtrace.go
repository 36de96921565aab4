// Package reqtrace is the model server's request tracing in Triton's form
// (its trace extension): settings kept server-wide and per model (level,
// rate, count, log frequency, file), read and changed through GET/POST
// /v2[/models/{m}]/trace/setting and the TraceSetting gRPC call, that
// sample one request in every `rate` and write each sampled request's
// timestamps to a JSON trace file in Triton's format.
//
// Sampling happens when a request is recorded, after it is answered, from
// the times the transports measure anyway for the statistics extension
// (serving.Request): tracing adds no work to a request that is not sampled
// beyond one atomic load, and a sampled one's trace is appended to a
// buffer that is written out every log_frequency traces (to FILE.N), when
// trace_count reaches 0, and at Close (to FILE when log_frequency is 0).
// The TIMESTAMPS level is recorded; TENSORS is refused with the reason.
package reqtrace

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// Level values as the API spells them.
const (
	LevelOff        = "OFF"
	LevelTimestamps = "TIMESTAMPS"
	LevelTensors    = "TENSORS"
)

// Settings are one set of trace settings: the server's, or a model's own
// (where a field is nil, the model follows the server's).
type Settings struct {
	Level        *string // LevelOff or LevelTimestamps
	Rate         *uint32 // sample one request in Rate (>= 1)
	Count        *int32  // traces left to take; -1: no limit
	LogFrequency *uint32 // write every LogFrequency traces (FILE.N); 0: at Close, to FILE
}

// Defaults are Triton's: tracing off, rate 1000, no count limit, written
// at shutdown.
func Defaults() Settings {
	off, rate, count, freq := LevelOff, uint32(1000), int32(-1), uint32(0)
	return Settings{Level: &off, Rate: &rate, Count: &count, LogFrequency: &freq}
}

// SettingError is a trace setting refused: for its value (HTTP 400,
// gRPC INVALID_ARGUMENT), or, Unsupported, one fw does not change
// (trace_file over the network, the TENSORS level: HTTP 400, gRPC
// UNIMPLEMENTED). Its message begins with Triton's sentence where Triton
// has one.
type SettingError struct {
	Unsupported bool
	Message     string
}

func (e *SettingError) Error() string { return e.Message }

func invalid(format string, args ...any) error {
	return &SettingError{Message: fmt.Sprintf(format, args...)}
}

func unsupported(format string, args ...any) error {
	return &SettingError{Unsupported: true, Message: fmt.Sprintf(format, args...)}
}

// Update is a change of settings as a client sends it: each named setting
// is given values (the API's strings), or none (JSON null, an empty gRPC
// value) to clear a model's own value so that it follows the server's.
type Update map[string][]string

// Tracer holds the settings and the traces taken. Safe for concurrent use.
type Tracer struct {
	file string // where traces are written; "" keeps none

	on atomic.Bool // some settings trace: a quick test for Record

	mu     sync.Mutex
	global state
	models map[string]*state
	buf    []byte // the traces not yet written: JSON objects, comma-separated
	nBuf   int    // traces in buf
	index  int    // the next FILE.N
	nextID uint64
	// begun are the traces Begin gave out whose request has not ended
	// (Record or End); spent says a count ran out since the last write:
	// the file is written once none is outstanding.
	begun  map[uint64]struct{}
	spent  bool
	closed bool
}

// state is one owner's settings and its sampling counters (Triton keeps a
// counter per settings owner: a model with its own settings samples its
// requests apart from the others').
type state struct {
	s    Settings
	seen uint64 // requests recorded under these settings
}

// New makes a tracer writing to file ("" when there is none: the settings
// can be read and changed, but not to a level that traces) with the
// server's settings global (nil fields take Defaults).
func New(file string, global Settings) (*Tracer, error) {
	d := Defaults()
	merged := d
	if global.Level != nil {
		merged.Level = global.Level
	}
	if global.Rate != nil {
		merged.Rate = global.Rate
	}
	if global.Count != nil {
		merged.Count = global.Count
	}
	if global.LogFrequency != nil {
		merged.LogFrequency = global.LogFrequency
	}
	if err := check(merged); err != nil {
		return nil, err
	}
	if file == "" && *merged.Level != LevelOff {
		return nil, invalid("trace level %s needs a trace file (--trace-config triton,file=PATH)", *merged.Level)
	}
	t := &Tracer{file: file, global: state{s: merged}, models: map[string]*state{}}
	t.refresh()
	return t, nil
}

func check(s Settings) error {
	if s.Level != nil && *s.Level != LevelOff && *s.Level != LevelTimestamps {
		return invalid("trace level %q: fw records %s (or %s)", *s.Level, LevelTimestamps, LevelOff)
	}
	if s.Rate != nil && *s.Rate == 0 {
		return invalid("trace rate 0: give a rate >= 1 (one request in every rate is traced)")
	}
	if s.Count != nil && *s.Count < -1 {
		return invalid("trace count %d: give -1 (no limit) or a count >= 0", *s.Count)
	}
	return nil
}

// File is where traces are written ("" when nowhere).
func (t *Tracer) File() string { return t.file }

// refresh sets on from the settings; t.mu held (or t not yet shared).
func (t *Tracer) refresh() {
	on := t.traces(&t.global.s, &t.global.s)
	for _, m := range t.models {
		on = on || t.traces(&m.s, &t.global.s)
	}
	t.on.Store(on)
}

// traces reports whether settings s (a model's, following g where unset)
// take traces.
func (t *Tracer) traces(s, g *Settings) bool {
	e := effective(s, g)
	return *e.Level == LevelTimestamps && *e.Count != 0
}

// effective is s with its unset fields taken from g.
func effective(s, g *Settings) Settings {
	e := *s
	if e.Level == nil {
		e.Level = g.Level
	}
	if e.Rate == nil {
		e.Rate = g.Rate
	}
	if e.Count == nil {
		e.Count = g.Count
	}
	if e.LogFrequency == nil {
		e.LogFrequency = g.LogFrequency
	}
	return e
}

// Get is the settings of model ("" for the server's), as the API answers
// them: the model's own where it has them, else the server's.
func (t *Tracer) Get(model string) map[string][]string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.get(model)
}

func (t *Tracer) get(model string) map[string][]string {
	e := t.global.s
	if m := t.models[model]; model != "" && m != nil {
		e = effective(&m.s, &t.global.s)
	}
	return map[string][]string{
		"trace_level":   {*e.Level},
		"trace_rate":    {strconv.FormatUint(uint64(*e.Rate), 10)},
		"trace_count":   {strconv.FormatInt(int64(*e.Count), 10)},
		"log_frequency": {strconv.FormatUint(uint64(*e.LogFrequency), 10)},
		"trace_file":    {t.file},
		"trace_mode":    {"triton"},
	}
}

// Set applies u to model's settings ("" for the server's) and answers the
// settings after it. Nothing changes when any setting is refused.
func (t *Tracer) Set(model string, u Update) (map[string][]string, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	var own Settings
	if model == "" {
		own = t.global.s
	} else if m := t.models[model]; m != nil {
		own = m.s
	}
	for name, vals := range u {
		if err := apply(&own, name, vals, model == ""); err != nil {
			return nil, err
		}
	}
	if err := check(own); err != nil {
		return nil, err
	}
	if t.file == "" && own.Level != nil && *own.Level != LevelOff {
		return nil, invalid("trace level %s needs a trace file: start fw serve with --trace-config triton,file=PATH", *own.Level)
	}
	if model == "" {
		t.global.s = own
	} else if m := t.models[model]; m != nil {
		m.s = own
	} else {
		t.models[model] = &state{s: own}
	}
	t.refresh()
	return t.get(model), nil
}

// apply sets (or, with no values, clears) one setting of s. The server's
// settings cannot be cleared: a cleared one takes its default.
func apply(s *Settings, name string, vals []string, global bool) error {
	d := Defaults()
	one := func() (string, bool) {
		if len(vals) == 0 {
			return "", false
		}
		return vals[0], true
	}
	switch name {
	case "trace_file":
		return unsupported("trace file location can not be updated through network protocol (fw serve --trace-config triton,file=PATH sets it)")
	case "trace_mode":
		if v, ok := one(); ok && v != "triton" {
			return unsupported("trace mode %q: fw writes Triton's trace files (mode triton)", v)
		}
		return nil
	case "trace_level":
		if len(vals) == 0 {
			s.Level = nil
			if global {
				s.Level = d.Level
			}
			return nil
		}
		level := ""
		for _, v := range vals {
			switch v {
			case LevelOff:
				if len(vals) > 1 {
					return invalid("Expect only one trace level 'OFF' is specified")
				}
				level = LevelOff
			case LevelTimestamps:
				level = LevelTimestamps
			case LevelTensors:
				return unsupported("trace level TENSORS: fw records TIMESTAMPS only")
			default:
				return invalid("trace level %q is not one of OFF, TIMESTAMPS", v)
			}
		}
		s.Level = &level
	case "trace_rate":
		v, ok := one()
		if !ok {
			s.Rate = nil
			if global {
				s.Rate = d.Rate
			}
			return nil
		}
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			return invalid("Unable to parse 'trace_rate', got: %s (give a whole number of requests per trace)", v)
		}
		if n > math.MaxUint32 {
			return invalid("Unable to parse 'trace_rate', value is out of range [ 0, %d ], got: %s", uint64(math.MaxUint32), v)
		}
		r := uint32(n)
		s.Rate = &r
	case "trace_count":
		v, ok := one()
		if !ok {
			s.Count = nil
			if global {
				s.Count = d.Count
			}
			return nil
		}
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return invalid("Unable to parse 'trace_count', got: %s (give -1 or a count of traces)", v)
		}
		if n < -1 {
			return invalid("Unable to parse 'trace_count'. Expecting value >= -1, got:%s", v)
		}
		if n > math.MaxInt32 {
			return invalid("Unable to parse 'trace_count', value is out of range [ -1, %d ], got: %s", math.MaxInt32, v)
		}
		c := int32(n)
		s.Count = &c
	case "log_frequency":
		v, ok := one()
		if !ok {
			s.LogFrequency = nil
			if global {
				s.LogFrequency = d.LogFrequency
			}
			return nil
		}
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			return invalid("Unable to parse 'log_frequency', got: %s (give a whole number of traces, 0 to write at shutdown)", v)
		}
		if n > math.MaxUint32 {
			return invalid("Unable to parse 'log_frequency', value is out of range [ 0, %d ], got: %s", uint64(math.MaxUint32), v)
		}
		f := uint32(n)
		s.LogFrequency = &f
	default:
		return invalid("unknown trace setting %q; the settings are trace_level, trace_rate, trace_count, log_frequency (trace_file and trace_mode are read-only)", name)
	}
	return nil
}

// maxBuffered bounds the traces kept in memory: past it they are written
// to the next FILE.N whatever the log frequency (a server tracing every
// request with log_frequency 0 would otherwise grow until shutdown).
const maxBuffered = 16 << 20

// Request is one answered inference request's times, as the transport
// measured them (serving.Request).
type Request struct {
	Model, Version, ID string
	// Began is when its body was read; Submitted when its inputs went to
	// the batcher; Encoded when its answer was ready.
	Began, Submitted, Encoded time.Time
	// Queue is its wait for an engine call; Compute that call.
	Queue, Compute time.Duration
	// Begun says Begin sampled it, Trace being the ID it gave (0: not
	// traced).
	Begun bool
	Trace uint64
}

// Begin samples a request to model as it goes to its model, under the
// model's settings (one request in every rate is traced while the count
// lasts), and returns its trace ID (0: not traced): IDs count the traced
// requests in the order they went in, as Triton numbers a trace when its
// request arrives, whatever order they are answered in. The request's
// Record then keeps its trace (Request.Trace, Request.Begun). Cheap when
// nothing traces.
func (t *Tracer) Begin(model string) uint64 {
	if t == nil || !t.on.Load() {
		return 0
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return 0
	}
	last, ok := t.sampleLocked(model)
	if !ok {
		return 0
	}
	t.nextID++
	if t.begun == nil {
		t.begun = map[uint64]struct{}{}
	}
	t.begun[t.nextID] = struct{}{}
	t.spent = t.spent || last
	return t.nextID
}

// End forgets a trace Begin gave out whose request ended without an
// answer to record (refused, failed): a count that ran out then writes
// the traces kept so far. id 0 does nothing. An error is a failed write.
func (t *Tracer) End(id uint64) error {
	if t == nil || id == 0 {
		return nil
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.begun, id)
	if t.closed || !t.spent || len(t.begun) > 0 {
		return nil
	}
	t.spent = false
	if t.nBuf == 0 {
		return nil
	}
	return t.writeIndexed()
}

// Record keeps the trace of an answered request: one Begin sampled
// (r.Begun, r.Trace its ID; none when 0), or, for a caller that did not
// call Begin, one sampled now under its model's settings. Cheap when
// nothing traces. An error is a failed write of the trace file.
func (t *Tracer) Record(r Request) error {
	if t == nil || (r.Begun && r.Trace == 0) || (!r.Begun && !t.on.Load()) { // a begun trace is kept even if tracing stopped since
		return nil
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return nil
	}
	st := &t.global
	if m := t.models[r.Model]; m != nil {
		st = m
	}
	e := effective(&st.s, &t.global.s)
	id, last := r.Trace, false
	if r.Begun {
		delete(t.begun, id)
		if last = t.spent && len(t.begun) == 0; last { // the count ran out and this was the last one out
			t.spent = false
		}
	} else {
		var ok bool
		if last, ok = t.sampleLocked(r.Model); !ok {
			return nil
		}
		t.nextID++
		id = t.nextID
	}
	t.append(id, r)
	if last || (*e.LogFrequency > 0 && t.nBuf >= int(*e.LogFrequency)) || len(t.buf) > maxBuffered {
		return t.writeIndexed()
	}
	return nil
}

// sampleLocked decides whether the next request to model is traced and
// takes it from the count; last says it was the count's last.
func (t *Tracer) sampleLocked(model string) (last, ok bool) {
	st := &t.global
	if m := t.models[model]; m != nil {
		st = m
	}
	e := effective(&st.s, &t.global.s)
	if *e.Level != LevelTimestamps || *e.Count == 0 {
		return false, false
	}
	st.seen++
	if st.seen%uint64(*e.Rate) != 0 {
		return false, false
	}
	// Take one from the count of the settings that hold it.
	if *e.Count > 0 {
		holder := &st.s
		if holder.Count == nil {
			holder = &t.global.s
		}
		c := *holder.Count - 1
		holder.Count = &c
		last = c == 0
		t.refresh()
	}
	return last, true
}

// traceHeader and traceTimes are the objects of Triton's trace file.
type traceHeader struct {
	ID           uint64 `json:"id"`
	ModelName    string `json:"model_name"`
	ModelVersion int64  `json:"model_version"`
	RequestID    string `json:"request_id,omitempty"`
}

type traceStamp struct {
	Name string `json:"name"`
	NS   int64  `json:"ns"`
}

type traceTimes struct {
	ID         uint64       `json:"id"`
	Timestamps []traceStamp `json:"timestamps"`
}

// append adds r's trace (as id) to the buffer: its header, then one object
// per timestamp, as Triton writes them. Times are Unix nanoseconds.
func (t *Tracer) append(id uint64, r Request) {
	v, _ := strconv.ParseInt(r.Version, 10, 64)
	compute := r.Submitted.Add(r.Queue)
	stamps := []traceStamp{
		{"REQUEST_START", r.Began.UnixNano()},
		{"QUEUE_START", r.Submitted.UnixNano()},
		{"COMPUTE_START", compute.UnixNano()},
		{"COMPUTE_END", compute.Add(r.Compute).UnixNano()},
		// The answer is complete once encoded (after preserve_ordering's
		// wait for the answers before it).
		{"INFER_RESPONSE_COMPLETE", r.Encoded.UnixNano()},
		{"REQUEST_END", r.Encoded.UnixNano()},
	}
	add := func(v any) {
		b, _ := json.Marshal(v) // plain structs: cannot fail
		if len(t.buf) > 0 {
			t.buf = append(t.buf, ',', '\n')
		}
		t.buf = append(t.buf, b...)
	}
	add(traceHeader{ID: id, ModelName: r.Model, ModelVersion: v, RequestID: r.ID})
	for _, s := range stamps {
		add(traceTimes{ID: id, Timestamps: []traceStamp{s}})
	}
	t.nBuf++
}

// writeIndexed writes the buffered traces to FILE.N and empties the buffer.
func (t *Tracer) writeIndexed() error {
	name := t.file + "." + strconv.Itoa(t.index)
	t.index++
	return t.flushTo(name)
}

func (t *Tracer) flushTo(name string) error {
	if t.nBuf == 0 {
		return nil
	}
	data := make([]byte, 0, len(t.buf)+4)
	data = append(data, '[')
	data = append(data, t.buf...)
	data = append(data, ']', '\n')
	t.buf, t.nBuf = t.buf[:0], 0
	if t.file == "" {
		return nil
	}
	if err := os.WriteFile(name, data, 0o644); err != nil {
		return fmt.Errorf("writing trace file %s: %w", name, err)
	}
	return nil
}

// Close writes the traces not yet written: to FILE when the server's log
// frequency is 0, else to the next FILE.N. Later requests are not traced.
func (t *Tracer) Close() error {
	if t == nil {
		return nil
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return nil
	}
	t.closed = true
	t.on.Store(false)
	if *t.global.s.LogFrequency == 0 {
		return t.flushTo(t.file)
	}
	return t.writeIndexed()
}
