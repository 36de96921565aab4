package logswitch

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
)

// Each severity is switched on its own: warnings off leaves info and
// errors; errors off is honoured; debug needs a verbose level; loggers
// derived with attributes or groups follow the same switches.
func TestSwitches(t *testing.T) {
	var buf bytes.Buffer
	sw := New(slog.LevelInfo)
	log := slog.New(Wrap(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}), sw)).With("k", "v").WithGroup("g")
	emit := func() string {
		buf.Reset()
		log.Debug("d")
		log.Info("i")
		log.Warn("w")
		log.Error("e")
		var got []string
		for _, l := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
			if i := strings.Index(l, "msg="); i >= 0 {
				got = append(got, l[i+4:i+5])
			}
		}
		return strings.Join(got, "")
	}
	if got := emit(); got != "iwe" {
		t.Fatalf("info level: %q", got)
	}
	if s := sw.Get(); !s.Info || !s.Warning || !s.Error || s.Verbose != 0 {
		t.Fatalf("settings %+v", s)
	}
	sw.Set(Settings{Info: true, Warning: false, Error: true})
	if got := emit(); got != "ie" {
		t.Fatalf("warnings off: %q", got)
	}
	sw.Set(Settings{Info: false, Warning: true, Error: false, Verbose: 2})
	if got := emit(); got != "dw" {
		t.Fatalf("info and errors off, verbose 2: %q", got)
	}
	if s := New(slog.LevelDebug).Get(); s.Verbose != 1 || !s.Info {
		t.Fatalf("debug: %+v", s)
	}
	if s := New(slog.LevelError).Get(); s.Info || s.Warning || !s.Error {
		t.Fatalf("error: %+v", s)
	}
}
