package stream

import (
	"bytes"
	"encoding/json"
	"strconv"
	"time"
)

// AppendJSONString appends s as encoding/json writes a string: quoted,
// with <, > and & escaped for HTML. Plain ASCII is copied as is; anything
// else goes through encoding/json so the bytes stay exactly its.
func AppendJSONString(dst []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= 0x7f || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			q, _ := json.Marshal(s) // a string always marshals
			return append(dst, q...)
		}
	}
	dst = append(dst, '"')
	dst = append(dst, s...)
	return append(dst, '"')
}

// appendEvent appends json.Marshal(ev)'s bytes without reflection: the
// live stream encodes every stored metrics event, so this runs per event
// at ingest rates. It reports false when encoding/json is needed (data that
// would be reformatted or is invalid, a time it cannot write).
func appendEvent(dst []byte, ev *Event) ([]byte, bool) {
	if bytes.ContainsAny(ev.Data, " \t\r\n<>&\u2028\u2029") || !json.Valid(ev.Data) {
		return dst, false
	}
	t, err := ev.Time.MarshalJSON()
	if err != nil {
		return dst, false
	}
	dst = append(dst, `{"type":`...)
	dst = AppendJSONString(dst, ev.Type)
	dst = append(dst, `,"run_id":`...)
	dst = AppendJSONString(dst, ev.RunID)
	dst = append(dst, `,"seq":`...)
	dst = strconv.AppendInt(dst, ev.Seq, 10)
	dst = append(dst, `,"time":`...)
	dst = append(dst, t...)
	dst = append(dst, `,"data":`...)
	dst = append(dst, ev.Data...)
	return append(dst, '}'), true
}

// encodeOne is json.Marshal(ev), with the zero time taken as now and data
// that is empty or invalid written as {}.
func encodeOne(ev *Event) []byte {
	if ev.Time.IsZero() {
		ev.Time = time.Now()
	}
	if len(ev.Data) == 0 {
		ev.Data = json.RawMessage("{}")
	}
	if b, ok := appendEvent(make([]byte, 0, 96+len(ev.Data)), ev); ok {
		return b
	}
	b, err := json.Marshal(ev)
	if err != nil { // invalid Data: keep the event, drop its data
		ev.Data = json.RawMessage("{}")
		b, _ = json.Marshal(ev)
	}
	return b
}
