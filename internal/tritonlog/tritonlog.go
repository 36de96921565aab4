// Package tritonlog writes log records as tritonserver writes its own, so
// that log tooling built for Triton (parsers, alert rules) reads fw serve's
// log unchanged: `--log-format default` and `--log-format ISO8601`.
//
//	default:  I1129 20:25:26.123456 4242 serve.go:441] "message key=value"
//	ISO8601:  2026-11-29T20:25:26Z I 4242 serve.go:441] "message key=value"
//
// The level is E (error), W (warning) or I (info, and verbose records,
// as Triton marks its verbose lines), the time UTC, then the process ID
// and the source file and line that logged. The message is the record's
// message followed by its attributes as key=value, written as a JSON
// string (quoted, with control characters, quotes and backslashes escaped)
// so that no message can forge a line of its own; with
// TRITON_SERVER_ESCAPE_LOG_MESSAGES=0 in the environment it is written as
// it is, as Triton does.
package tritonlog

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"
)

// Format is one of tritonserver's log formats.
type Format int32

// The formats, named as tritonserver's --log-format takes them, and
// Native: the handler writes through the handler it was made with
// (NewSwitched: fw's own text or JSON), until Triton's logging extension
// asks for tritonserver's lines.
const (
	Default Format = iota
	ISO8601
	Native
)

// ParseFormat reads a --log-format value: "default" or "ISO8601".
func ParseFormat(s string) (Format, bool) {
	switch s {
	case "default":
		return Default, true
	case "ISO8601":
		return ISO8601, true
	}
	return 0, false
}

// String is the format's name in Triton's terms: Native reports "default",
// as tritonserver reports the format it starts with.
func (f Format) String() string {
	if f == ISO8601 {
		return "ISO8601"
	}
	return "default"
}

// Switch is the format of a Handler and of the handlers derived from it,
// changeable at run time (Triton's logging extension sets log_format).
type Switch struct{ v atomic.Int32 }

// Set changes the format.
func (s *Switch) Set(f Format) { s.v.Store(int32(f)) }

// Get is the format in force.
func (s *Switch) Get() Format { return Format(s.v.Load()) }

// Handler is a slog.Handler writing tritonserver's lines to one writer.
type Handler struct {
	// native writes the records while the format is Native (nil: none).
	native slog.Handler
	out    *output
	level  slog.Leveler
	format *Switch
	escape bool
	pid    []byte
	attrs  []byte // " key=value" of WithAttrs, rendered once
	group  string // WithGroup's prefix ("a.b.")
}

// output is the writer the handlers derived from one New share, and the
// lock that keeps their lines whole.
type output struct {
	mu sync.Mutex
	w  io.Writer
}

// New returns a handler writing to w records at or above level, in the
// format f holds. Messages are escaped unless the environment sets
// TRITON_SERVER_ESCAPE_LOG_MESSAGES to 0, as tritonserver reads it.
func New(w io.Writer, level slog.Leveler, f *Switch) *Handler {
	return &Handler{out: &output{w: w}, level: level, format: f,
		escape: os.Getenv("TRITON_SERVER_ESCAPE_LOG_MESSAGES") != "0",
		pid:    strconv.AppendInt(nil, int64(os.Getpid()), 10)}
}

// NewSwitched returns a handler writing through native while f holds
// Native, and tritonserver's lines to w (as New's) while it holds Default or
// ISO8601: fw serve's text and JSON logs, which Triton's logging extension
// may switch to tritonserver's lines and back at run time.
func NewSwitched(native slog.Handler, w io.Writer, level slog.Leveler, f *Switch) *Handler {
	h := New(w, level, f)
	h.native = native
	return h
}

// Enabled reports whether records of level l are written.
func (h *Handler) Enabled(_ context.Context, l slog.Level) bool {
	min := slog.LevelInfo
	if h.level != nil {
		min = h.level.Level()
	}
	return l >= min
}

// letter is Triton's level letter.
func letter(l slog.Level) byte {
	switch {
	case l >= slog.LevelError:
		return 'E'
	case l >= slog.LevelWarn:
		return 'W'
	}
	return 'I'
}

// Handle writes one record as one line.
func (h *Handler) Handle(ctx context.Context, r slog.Record) error {
	if h.native != nil && h.format.Get() == Native {
		return h.native.Handle(ctx, r)
	}
	b := make([]byte, 0, 160)
	t := r.Time
	if t.IsZero() {
		t = time.Now()
	}
	t = t.UTC()
	if h.format.Get() == ISO8601 {
		b = t.AppendFormat(b, "2006-01-02T15:04:05Z")
		b = append(b, ' ', letter(r.Level), ' ')
	} else {
		b = append(b, letter(r.Level))
		b = t.AppendFormat(b, "0102 15:04:05.000000")
		b = append(b, ' ')
	}
	b = append(b, h.pid...)
	b = append(b, ' ')
	file, line := "unknown", 0
	if r.PC != 0 {
		fr, _ := runtime.CallersFrames([]uintptr{r.PC}).Next()
		if fr.File != "" {
			file, line = filepath.Base(fr.File), fr.Line
		}
	}
	b = append(b, file...)
	b = append(b, ':')
	b = strconv.AppendInt(b, int64(line), 10)
	b = append(b, "] "...)
	msg := make([]byte, 0, len(r.Message)+len(h.attrs)+32)
	msg = append(msg, r.Message...)
	msg = append(msg, h.attrs...)
	r.Attrs(func(a slog.Attr) bool {
		msg = appendAttr(msg, h.group, a)
		return true
	})
	if h.escape {
		b = appendQuoted(b, msg)
	} else {
		b = append(b, msg...)
	}
	b = append(b, '\n')
	h.out.mu.Lock()
	defer h.out.mu.Unlock()
	_, err := h.out.w.Write(b)
	return err
}

// WithAttrs returns a handler whose records carry attrs too.
func (h *Handler) WithAttrs(attrs []slog.Attr) slog.Handler {
	c := *h
	c.attrs = bytes.Clone(h.attrs)
	for _, a := range attrs {
		c.attrs = appendAttr(c.attrs, h.group, a)
	}
	if h.native != nil {
		c.native = h.native.WithAttrs(attrs)
	}
	return &c
}

// WithGroup returns a handler whose later attributes' keys are qualified
// by name.
func (h *Handler) WithGroup(name string) slog.Handler {
	if name == "" {
		return h
	}
	c := *h
	c.group = h.group + name + "."
	if h.native != nil {
		c.native = h.native.WithGroup(name)
	}
	return &c
}

// appendAttr appends " key=value" (a group's attributes each with the
// group's name before their keys); values with spaces, quotes or equal
// signs are quoted, as slog's text handler does.
func appendAttr(b []byte, group string, a slog.Attr) []byte {
	a.Value = a.Value.Resolve()
	if a.Equal(slog.Attr{}) {
		return b
	}
	if a.Value.Kind() == slog.KindGroup {
		prefix := group
		if a.Key != "" {
			prefix += a.Key + "."
		}
		for _, g := range a.Value.Group() {
			b = appendAttr(b, prefix, g)
		}
		return b
	}
	b = append(b, ' ')
	b = append(b, group...)
	b = append(b, a.Key...)
	b = append(b, '=')
	var v string
	if a.Value.Kind() == slog.KindTime {
		v = a.Value.Time().Format(time.RFC3339Nano)
	} else {
		v = a.Value.String()
	}
	if needsQuote(v) {
		return strconv.AppendQuote(b, v)
	}
	return append(b, v...)
}

func needsQuote(s string) bool {
	if s == "" {
		return true
	}
	for _, c := range []byte(s) {
		if c <= ' ' || c == '"' || c == '=' || c == '\\' || c >= utf8.RuneSelf {
			return true
		}
	}
	return false
}

// appendQuoted appends s as a JSON string: quotes, backslashes and control
// characters escaped, other text (UTF-8) as it is, invalid UTF-8 replaced.
func appendQuoted(b, s []byte) []byte {
	const hex = "0123456789abcdef"
	b = append(b, '"')
	for i := 0; i < len(s); {
		c := s[i]
		if c >= utf8.RuneSelf {
			r, n := utf8.DecodeRune(s[i:])
			if r == utf8.RuneError && n == 1 {
				b = append(b, "\ufffd"...)
			} else {
				b = append(b, s[i:i+n]...)
			}
			i += n
			continue
		}
		switch {
		case c == '"', c == '\\':
			b = append(b, '\\', c)
		case c == '\n':
			b = append(b, '\\', 'n')
		case c == '\r':
			b = append(b, '\\', 'r')
		case c == '\t':
			b = append(b, '\\', 't')
		case c < 0x20 || c == 0x7f:
			b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
		default:
			b = append(b, c)
		}
		i++
	}
	return append(b, '"')
}
