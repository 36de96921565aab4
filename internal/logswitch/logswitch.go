// Package logswitch is a slog.Handler whose severities are switched on and
// off one by one at run time, as Triton's logging extension and
// tritonserver's flags do (log_info, log_warning, log_error,
// log_verbose_level): warnings off while info stays on, errors off too.
package logswitch

import (
	"context"
	"log/slog"
	"sync/atomic"
)

// Switches are the severities a Handler writes. The zero value writes
// nothing; use New.
type Switches struct {
	info, warning, err atomic.Bool
	verbose            atomic.Int32
}

// New returns the switches of a minimum level (--log-level): every
// severity at or above it on, verbose (debug) records at level 1 when it
// is debug.
func New(min slog.Level) *Switches {
	s := new(Switches)
	s.info.Store(min <= slog.LevelInfo)
	s.warning.Store(min <= slog.LevelWarn)
	s.err.Store(min <= slog.LevelError)
	if min <= slog.LevelDebug {
		s.verbose.Store(1)
	}
	return s
}

// Settings are the switches at one moment, in Triton's terms.
type Settings struct {
	Info, Warning, Error bool
	// Verbose is log_verbose_level: above 0, debug records are written.
	Verbose int32
}

// Get reads the switches.
func (s *Switches) Get() Settings {
	return Settings{Info: s.info.Load(), Warning: s.warning.Load(), Error: s.err.Load(), Verbose: s.verbose.Load()}
}

// Set sets all the switches.
func (s *Switches) Set(v Settings) {
	s.info.Store(v.Info)
	s.warning.Store(v.Warning)
	s.err.Store(v.Error)
	s.verbose.Store(max(v.Verbose, 0))
}

// Enabled reports whether records of level l are written: errors (and
// above) by the error switch, warnings by the warning one, info by the
// info one, anything lower while the verbose level is above 0.
func (s *Switches) Enabled(l slog.Level) bool {
	switch {
	case l >= slog.LevelError:
		return s.err.Load()
	case l >= slog.LevelWarn:
		return s.warning.Load()
	case l >= slog.LevelInfo:
		return s.info.Load()
	}
	return s.verbose.Load() > 0
}

// Wrap returns a handler writing through next the records sw lets
// through; next should take every level (HandlerOptions.Level: debug).
func Wrap(next slog.Handler, sw *Switches) slog.Handler { return handler{next: next, sw: sw} }

type handler struct {
	next slog.Handler
	sw   *Switches
}

func (h handler) Enabled(ctx context.Context, l slog.Level) bool {
	return h.sw.Enabled(l) && h.next.Enabled(ctx, l)
}

func (h handler) Handle(ctx context.Context, r slog.Record) error {
	if !h.sw.Enabled(r.Level) {
		return nil
	}
	return h.next.Handle(ctx, r)
}

func (h handler) WithAttrs(as []slog.Attr) slog.Handler {
	return handler{next: h.next.WithAttrs(as), sw: h.sw}
}

func (h handler) WithGroup(name string) slog.Handler {
	return handler{next: h.next.WithGroup(name), sw: h.sw}
}
