package serving

import (
	"log/slog"
	"strings"
	"testing"
)

// log_verbose_level is an integer from 0 to 2^31-1 (the documented schema's
// bound): schemathesis sent 7.6e34, which the old check let through to an
// overflowing conversion and answered with a message the schema contradicted.
func TestLogVerboseLevelBounds(t *testing.T) {
	var lv slog.LevelVar
	l := NewLogSettings(&lv, "text", "")
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
	var lv slog.LevelVar
	l := NewLogSettings(&lv, "ISO8601", "/var/log/fw.log")
	if got := l.Get(); got["log_file"] != "/var/log/fw.log" || got["log_format"] != "ISO8601" {
		t.Fatalf("Get() = %v", got)
	}
	if err := l.Set(map[string]any{"log_file": "/var/log/fw.log", "log_format": "ISO8601"}); err != nil {
		t.Fatal(err)
	}
	err := l.Set(map[string]any{"log_file": "other.log"})
	if err == nil || !strings.Contains(err.Error(), "log file location can not be updated through network protocol") {
		t.Fatalf("changing the file: %v", err)
	}
	if err := l.Set(map[string]any{"log_format": "default"}); err == nil {
		t.Fatal("changing the format was accepted")
	}
}
