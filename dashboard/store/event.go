package store

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"time"
)

// Event types.
const (
	EventRunStart   = "run_start"
	EventMetrics    = "metrics"
	EventMetric     = "metric"
	EventParam      = "param"
	EventTag        = "tag"
	EventProgress   = "progress"
	EventLog        = "log"
	EventSystem     = "system"
	EventCheckpoint = "checkpoint"
	EventArtifact   = "artifact"
	EventStatus     = "status"
	EventRunEnd     = "run_end"
	// EventRunResume reopens a finished, failed or stopped run (the same run
	// continues, e.g. from one of its checkpoints): the only way out of a
	// terminal status. See CanResume.
	EventRunResume = "run_resume"
)

// Batch limits: Apply refuses a larger batch whole (code batch_too_large).
const (
	// MaxBatchEvents is the most events in one Apply call.
	MaxBatchEvents = 10000
	// MaxBatchValues is the most metric values plus log lines in one call.
	MaxBatchValues = 200000
	// MaxLogLine is the longest log line kept, in bytes (longer are cut).
	MaxLogLine = 16384
)

// Float is a float64 whose JSON form also accepts the strings "NaN",
// "Infinity" and "-Infinity" (and writes them for those values).
type Float float64

// UnmarshalJSON implements json.Unmarshaler.
func (f *Float) UnmarshalJSON(b []byte) error {
	if len(b) > 0 && b[0] == '"' {
		var s string
		if err := json.Unmarshal(b, &s); err != nil {
			return err
		}
		switch s {
		case "NaN":
			*f = Float(math.NaN())
		case "Infinity", "+Infinity", "inf", "+inf":
			*f = Float(math.Inf(1))
		case "-Infinity", "-inf":
			*f = Float(math.Inf(-1))
		default:
			return &notNumberError{s}
		}
		return nil
	}
	if bytes.Equal(b, []byte("null")) {
		return &notNumberError{"null"}
	}
	v, err := strconv.ParseFloat(string(b), 64)
	if err != nil {
		return &notNumberError{string(b)}
	}
	*f = Float(v)
	return nil
}

// MarshalJSON implements json.Marshaler.
func (f Float) MarshalJSON() ([]byte, error) { return f.AppendJSON(nil), nil }

// AppendJSON appends f's JSON form (MarshalJSON's bytes) to dst.
func (f Float) AppendJSON(dst []byte) []byte {
	v := float64(f)
	switch {
	case math.IsNaN(v):
		return append(dst, `"NaN"`...)
	case math.IsInf(v, 1):
		return append(dst, `"Infinity"`...)
	case math.IsInf(v, -1):
		return append(dst, `"-Infinity"`...)
	}
	return strconv.AppendFloat(dst, v, 'g', -1, 64)
}

type notNumberError struct{ s string }

func (e *notNumberError) Error() string { return fmt.Sprintf("%s is not a number", e.s) }

// Timestamp is a time whose JSON form is either a number (Unix seconds,
// fractional) or an RFC 3339 string. The zero value means "now".
type Timestamp struct{ time.Time }

// UnmarshalJSON implements json.Unmarshaler.
func (t *Timestamp) UnmarshalJSON(b []byte) error {
	if bytes.Equal(b, []byte("null")) {
		return nil
	}
	if len(b) > 0 && b[0] == '"' {
		var s string
		if err := json.Unmarshal(b, &s); err != nil {
			return err
		}
		v, err := time.Parse(time.RFC3339Nano, s)
		if err != nil {
			return fmt.Errorf("time %q is not RFC 3339: %w", s, err)
		}
		t.Time = v
		return nil
	}
	v, err := strconv.ParseFloat(string(b), 64)
	if err != nil || math.IsNaN(v) || math.Abs(v) > 9e9 {
		return &notNumberError{string(b)}
	}
	sec, frac := math.Modf(v)
	t.Time = time.Unix(int64(sec), int64(frac*1e9)).UTC()
	return nil
}

// MarshalJSON writes RFC 3339 with nanoseconds (null for the zero time).
func (t Timestamp) MarshalJSON() ([]byte, error) {
	if t.IsZero() {
		return []byte("null"), nil
	}
	return json.Marshal(t.UTC().Format(time.RFC3339Nano))
}

// Event is one typed message from a training process: the HTTP ingest body
// is a JSON array of them and the SDK's spool file holds one per line.
// Fields that do not apply to a type are ignored. See docs/tracking.md.
type Event struct {
	// Type is one of the Event* constants.
	Type string `json:"type"`
	// RunID is the run's ID, chosen by the client (see ValidateID).
	RunID string `json:"run_id"`
	// Writer names the client process's sequence space ("" = "default").
	Writer string `json:"writer,omitempty"`
	// Seq increases by at least one per event within (RunID, Writer).
	Seq int64 `json:"seq"`
	// Time is when it happened (defaults to when it is applied).
	Time Timestamp `json:"time,omitzero"`

	// run_start: the experiment by name (created when missing), or by
	// ExperimentID (which must exist; it wins over the name).
	Experiment       string         `json:"experiment,omitempty"`
	ExperimentID     string         `json:"experiment_id,omitempty"`
	Name             string         `json:"name,omitempty"`
	Description      string         `json:"description,omitempty"`
	Source           *Source        `json:"source,omitempty"`
	ParentRunID      string         `json:"parent_run_id,omitempty"`
	ParentCheckpoint string         `json:"parent_checkpoint,omitempty"`
	Params           map[string]any `json:"params,omitempty"` // also param
	// Tags are set (run_start, tag); DeleteTags removes keys (tag).
	Tags       map[string]string `json:"tags,omitempty"`
	DeleteTags []string          `json:"delete_tags,omitempty"`

	// metrics, system, checkpoint (values at that point), metric (Key+Value)
	Step   *int64           `json:"step,omitempty"`
	Values map[string]Float `json:"values,omitempty"`
	Key    string           `json:"key,omitempty"`
	Value  *Float           `json:"value,omitempty"`

	// progress (Step too), checkpoint (Step, Epoch)
	TotalSteps  *int64   `json:"total_steps,omitempty"`
	Epoch       *float64 `json:"epoch,omitempty"`
	TotalEpochs *float64 `json:"total_epochs,omitempty"`

	// log
	Stream string   `json:"stream,omitempty"`
	Lines  []string `json:"lines,omitempty"`

	// checkpoint, artifact, run_resume (the checkpoint it continues from)
	Path string `json:"path,omitempty"`
	Size *int64 `json:"size,omitempty"`

	// run_start (initial status), status, run_end, run_resume (queued or running)
	Status    Status `json:"status,omitempty"`
	Error     string `json:"error,omitempty"`
	Traceback string `json:"traceback,omitempty"`
	ExitCode  *int   `json:"exit_code,omitempty"`

	// decodeErr is set by DecodeEvents for an element that did not decode.
	decodeErr *EventError
}

// splitArray splits a valid JSON array into its elements (sub-slices of
// data), counting them as it goes: false when there are more than
// MaxBatchEvents.
func splitArray(data []byte) ([]json.RawMessage, bool) {
	var raws []json.RawMessage
	for i := 1; ; { // after '['
		for i < len(data) && (data[i] == ',' || isSpace(data[i])) {
			i++
		}
		if i >= len(data) || data[i] == ']' {
			return raws, true
		}
		if len(raws) == MaxBatchEvents {
			return nil, false
		}
		end := valueEnd(data, i)
		raws = append(raws, json.RawMessage(data[i:end]))
		i = end
	}
}

// valueEnd is the index just after the value that starts at i, in valid
// JSON.
func valueEnd(data []byte, i int) int {
	depth := 0
	for ; i < len(data); i++ {
		switch c := data[i]; {
		case c == '"':
			for i++; data[i] != '"'; i++ {
				if data[i] == '\\' {
					i++
				}
			}
			if depth == 0 {
				return i + 1
			}
		case c == '{' || c == '[':
			depth++
		case c == '}' || c == ']':
			if depth--; depth == 0 {
				return i + 1
			} else if depth < 0 { // the array's end, after a number or literal
				return i
			}
		case c == ',' || isSpace(c):
			if depth == 0 {
				return i
			}
		}
	}
	return i
}

func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }

// DecodeEvents decodes an ingest body: a JSON array of events, or JSON
// lines (one event per line, blank lines skipped; the spool format). An
// element that is not a valid event does not fail the batch: it comes back
// as a placeholder that Apply reports at its index (code invalid_json or
// invalid_type). Only input that cannot be split into elements is an error.
func DecodeEvents(data []byte) ([]Event, error) {
	trimmed := bytes.TrimSpace(data)
	tooMany := func() error {
		return storeErr(CodeBatchTooLarge, fmt.Sprintf("more than %d events in one batch; the limit is %d", MaxBatchEvents, MaxBatchEvents), nil)
	}
	// Elements are split one at a time and counted as they come, so a body
	// of a million tiny events is refused at the limit instead of first
	// becoming a million slices.
	var raws []json.RawMessage
	if len(trimmed) > 0 && trimmed[0] == '[' && json.Valid(trimmed) {
		// A valid array (checked without allocating) is split in place:
		// json.Decoder's copy of each element was a twentieth of ingest.
		var ok bool
		if raws, ok = splitArray(trimmed); !ok {
			return nil, tooMany()
		}
	} else if len(trimmed) > 0 && trimmed[0] == '[' {
		// Invalid: json.Decoder says where.
		dec := json.NewDecoder(bytes.NewReader(trimmed))
		if _, err := dec.Token(); err != nil {
			return nil, storeErr(CodeInvalidJSON, "decoding event array: "+err.Error(), nil)
		}
		for dec.More() {
			if len(raws) == MaxBatchEvents {
				return nil, tooMany()
			}
			var raw json.RawMessage
			if err := dec.Decode(&raw); err != nil {
				return nil, storeErr(CodeInvalidJSON, fmt.Sprintf("decoding event array, element %d: %v", len(raws), err), nil)
			}
			raws = append(raws, raw)
		}
		if _, err := dec.Token(); err != nil { // the closing ']'
			return nil, storeErr(CodeInvalidJSON, "decoding event array: "+err.Error(), nil)
		}
		if rest := bytes.TrimSpace(trimmed[dec.InputOffset():]); len(rest) > 0 {
			return nil, storeErr(CodeInvalidJSON, "decoding event array: data after the closing ']'", nil)
		}
	} else {
		sc := bufio.NewScanner(bytes.NewReader(trimmed))
		sc.Buffer(make([]byte, 0, 64*1024), 64<<20)
		for sc.Scan() {
			line := bytes.TrimSpace(sc.Bytes())
			if len(line) == 0 {
				continue
			}
			if len(raws) == MaxBatchEvents {
				return nil, tooMany()
			}
			raws = append(raws, json.RawMessage(append([]byte(nil), line...)))
		}
		if err := sc.Err(); err != nil {
			return nil, storeErr(CodeInvalidJSON, "reading event lines: "+err.Error(), nil)
		}
	}
	events := make([]Event, len(raws))
	for i, raw := range raws {
		if decodeEventFast(raw, &events[i]) {
			continue
		}
		events[i] = Event{}
		if err := json.Unmarshal(raw, &events[i]); err != nil {
			// Keep what identifies the event, for the error report.
			var head struct {
				Type  string `json:"type"`
				RunID string `json:"run_id"`
			}
			_ = json.Unmarshal(raw, &head)
			code := CodeInvalidJSON
			var nn *notNumberError
			var te *json.UnmarshalTypeError
			if errors.As(err, &nn) || errors.As(err, &te) {
				code = CodeInvalidType
			}
			events[i] = Event{Type: head.Type, RunID: head.RunID,
				decodeErr: &EventError{Index: i, Code: code, Msg: err.Error()}}
		}
	}
	return events, nil
}
