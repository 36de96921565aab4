package serving

import (
	"fmt"
	"math"
	"sync"

	"github.com/fw-serve/fw/internal/logswitch"
	"github.com/fw-serve/fw/internal/tritonlog"
)

// LogSettings are the server's log settings as Triton's logging extension
// reads and changes them (GET/POST /v2/logging, the LogSettings call): the
// severity switches drive the logger's at run time, each on its own, and so does
// log_format the format of the lines: tritonserver's default or ISO8601, or
// fw's own (text, json) reported as "default", the format it started with,
// and set again by "default"; the log file is fixed by the command line,
// and a request to move it is refused with the reason.
type LogSettings struct {
	mu  sync.Mutex
	sev *logswitch.Switches
	// format is the --log-format in force ("text", "json", or
	// tritonserver's "default" or "ISO8601").
	format string
	// lines switches the format of the lines (nil: fixed).
	lines *tritonlog.Switch
	// file is --log-file ("": standard error).
	file string
}

// NewLogSettings wraps the logger's severity switches; format is
// --log-format, file --log-file ("" for standard error), lines the
// logger's format switch (tritonlog; nil when its format is fixed).
func NewLogSettings(sev *logswitch.Switches, format, file string, lines *tritonlog.Switch) *LogSettings {
	return &LogSettings{sev: sev, format: format, file: file, lines: lines}
}

// tritonFormat is the format in Triton's names.
func (l *LogSettings) tritonFormat() string {
	if l.lines != nil {
		return l.lines.Get().String()
	}
	return "default" // text or json: Triton's default names them
}

// Get returns the settings in Triton's names.
func (l *LogSettings) Get() map[string]any {
	l.mu.Lock()
	defer l.mu.Unlock()
	v := l.sev.Get()
	return map[string]any{
		"log_file":          l.file,
		"log_info":          v.Info,
		"log_warning":       v.Warning,
		"log_error":         v.Error,
		"log_verbose_level": int(v.Verbose),
		"log_format":        l.tritonFormat(),
	}
}

// Set applies Triton's settings (bool for log_info, log_warning and
// log_error, each switching its severity alone, an integer for
// log_verbose_level, above 0 writing debug records; log_file and
// log_format are accepted as they are, and refused otherwise). Nothing
// changes unless every setting is valid.
func (l *LogSettings) Set(in map[string]any) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	next := l.sev.Get()
	var format *tritonlog.Format // applied with the switches, once every setting is read
	for k, v := range in {
		switch k {
		case "log_info", "log_warning", "log_error":
			b, ok := v.(bool)
			if !ok {
				return fmt.Errorf("setting %q must be true or false", k)
			}
			switch k {
			case "log_info":
				next.Info = b
			case "log_warning":
				next.Warning = b
			case "log_error":
				next.Error = b
			}
		case "log_verbose_level":
			n, ok := v.(float64)
			if !ok || n < 0 || n > math.MaxInt32 || n != math.Trunc(n) {
				return fmt.Errorf("setting \"log_verbose_level\" must be an integer from 0 to %d", math.MaxInt32)
			}
			next.Verbose = int32(n)
		case "log_file":
			if s, ok := v.(string); !ok || s != l.file {
				return fmt.Errorf("log file location can not be updated through network protocol (fw: it is --log-file, %q, fixed at start)", l.file)
			}
		case "log_format":
			s, _ := v.(string)
			if l.lines == nil {
				if s != l.tritonFormat() {
					return fmt.Errorf("setting \"log_format\": the format is --log-format (%s) and cannot be changed at run time; start fw serve with --log-format default or ISO8601 to change between those", l.format)
				}
				continue
			}
			f, ok := tritonlog.ParseFormat(s)
			if !ok {
				return fmt.Errorf("invalid argument for log_format: %q; use \"default\" or \"ISO8601\"", v)
			}
			if f == tritonlog.Default && (l.format == "text" || l.format == "json") {
				f = tritonlog.Native // "default" is the format it started with: fw's own lines again
			}
			format = &f
		default:
			return fmt.Errorf("unknown setting %q; the settings are log_file, log_info, log_warning, log_error, log_verbose_level and log_format", k)
		}
	}
	if format != nil {
		l.lines.Set(*format)
	}
	l.sev.Set(next)
	return nil
}
