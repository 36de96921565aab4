package serving

import (
	"log/slog"
	"strings"
	"testing"

	"github.com/fw-serve/fw/internal/logswitch"
	"github.com/fw-serve/fw/internal/tritonlog"
)

// log_verbose_level is an integer from 0 to 2^31-1 (the documented schema's
// bound): schemathesis sent 7.6e34, which the old check let through to an
// overflowing conversion and answered with a message the schema contradicted.
func TestLogVerboseLevelBounds(t *testing.T) {
	l := NewLogSettings(logswitch.New(slog.LevelInfo), "text", "", nil)
	for _, ok := range []float64{0, 1, 2147483647} {
		if err := l.Set(map[string]any{"log_verbose_level": ok}); err != nil {
			t.Errorf("%g: %v", ok, err)
		}
	}
	for _, bad := range []any{-1.0, 2147483648.0, 7.6e34, 1.5, "1", true} {
		err := l.Set(map[string]any{"log_verbose_level": bad})
		if err == nil || !strings.Contains(err.Error(), "from 0 to 2147483647") {
			t.Errorf("%v: %v", bad, err)
		}
	}
}

// The log file and format are --log-file and --log-format: reported in
// Triton's names, taken back unchanged, refused otherwise with Triton's
// sentence.
func TestLogFileAndFormatAreFixed(t *testing.T) {
	l := NewLogSettings(logswitch.New(slog.LevelInfo), "json", "/var/log/fw.log", nil)
	if got := l.Get(); got["log_file"] != "/var/log/fw.log" || got["log_format"] != "default" {
		t.Fatalf("Get() = %v", got)
	}
	if err := l.Set(map[string]any{"log_file": "/var/log/fw.log", "log_format": "default"}); err != nil {
		t.Fatal(err)
	}
	err := l.Set(map[string]any{"log_file": "other.log"})
	if err == nil || !strings.Contains(err.Error(), "log file location can not be updated through network protocol") {
		t.Fatalf("changing the file: %v", err)
	}
	if err := l.Set(map[string]any{"log_format": "ISO8601"}); err == nil {
		t.Fatal("changing fw's json format was accepted")
	}
}

// With tritonserver's lines (--log-format default or ISO8601) log_format
// switches between them at run time, applied with the other settings only
// when every one is valid.
func TestLogFormatSwitches(t *testing.T) {
	var sw tritonlog.Switch
	l := NewLogSettings(logswitch.New(slog.LevelInfo), "default", "", &sw)
	if err := l.Set(map[string]any{"log_format": "ISO8601"}); err != nil || sw.Get() != tritonlog.ISO8601 || l.Get()["log_format"] != "ISO8601" {
		t.Fatalf("%v %v %v", err, sw.Get(), l.Get())
	}
	if err := l.Set(map[string]any{"log_format": "default", "log_error": "no"}); err == nil || sw.Get() != tritonlog.ISO8601 {
		t.Fatalf("a refused request changed the format: %v %v", err, sw.Get())
	}
	for _, bad := range []any{"iso8601", "text", 1.0} {
		if err := l.Set(map[string]any{"log_format": bad}); err == nil || !strings.Contains(err.Error(), "invalid argument for log_format") {
			t.Errorf("%v: %v", bad, err)
		}
	}
}

// Each severity switches alone, as Triton's (L0_logging starts tritonserver
// with --log-warning=false and reads log_info true, log_warning false):
// errors can be switched off too, the verbose level is kept as given, and
// a request with one invalid setting changes nothing.
func TestLogSeveritiesSwitchAlone(t *testing.T) {
	sev := logswitch.New(slog.LevelInfo)
	l := NewLogSettings(sev, "text", "", nil)
	if err := l.Set(map[string]any{"log_warning": false}); err != nil {
		t.Fatal(err)
	}
	if g := l.Get(); g["log_info"] != true || g["log_warning"] != false || g["log_error"] != true || g["log_verbose_level"] != 0 {
		t.Fatalf("warnings off: %v", g)
	}
	if sev.Enabled(slog.LevelWarn) || !sev.Enabled(slog.LevelInfo) || !sev.Enabled(slog.LevelError) {
		t.Fatal("the logger's switches do not follow")
	}
	if err := l.Set(map[string]any{"log_error": false, "log_verbose_level": 3.0}); err != nil {
		t.Fatal(err)
	}
	if g := l.Get(); g["log_error"] != false || g["log_verbose_level"] != 3 || sev.Enabled(slog.LevelError) || !sev.Enabled(slog.LevelDebug) {
		t.Fatalf("errors off, verbose 3: %v", g)
	}
	if err := l.Set(map[string]any{"log_info": false, "log_warning": "maybe"}); err == nil || l.Get()["log_info"] != true {
		t.Fatalf("a refused request changed a setting: %v %v", err, l.Get())
	}
}

// A server logging fw's own lines (text, json) reports log_format
// "default", switches to tritonserver's ISO8601 lines when asked (Triton's
// logging_endpoint_test does) and back to its own on "default".
func TestLogFormatFromFwsOwn(t *testing.T) {
	sw := new(tritonlog.Switch)
	sw.Set(tritonlog.Native)
	l := NewLogSettings(logswitch.New(slog.LevelInfo), "text", "", sw)
	if got := l.Get()["log_format"]; got != "default" {
		t.Fatalf("initial: %v", got)
	}
	if err := l.Set(map[string]any{"log_format": "ISO8601"}); err != nil || sw.Get() != tritonlog.ISO8601 || l.Get()["log_format"] != "ISO8601" {
		t.Fatalf("to ISO8601: %v %v", err, sw.Get())
	}
	if err := l.Set(map[string]any{"log_format": "default"}); err != nil || sw.Get() != tritonlog.Native || l.Get()["log_format"] != "default" {
		t.Fatalf("back: %v %v", err, sw.Get())
	}
}
