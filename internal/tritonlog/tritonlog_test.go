package tritonlog

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"regexp"
	"strings"
	"testing"
)

// Triton's L0_logging patterns for one record (log_format_test.py).
var (
	defaultLine = regexp.MustCompile(`^(?P<level>\w)(?P<month>\d{2})(?P<day>\d{2}) (?P<timestamp>\d{2}:\d{2}:\d{2}\.\d{6}) (?P<pid>\d+) (?P<file>[\w\.]+):(?P<line>\d+)] (?P<message>.*)$`)
	isoLine     = regexp.MustCompile(`^(?P<ts>\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}Z) (?P<level>\w+) (?P<pid>\d+) (?P<file>.+):(?P<line>\d+)] (?P<message>.*)$`)
)

func logged(t *testing.T, f Format, level slog.Level, do func(*slog.Logger)) []string {
	t.Helper()
	var buf bytes.Buffer
	var sw Switch
	sw.Set(f)
	lv := new(slog.LevelVar)
	lv.Set(level)
	do(slog.New(New(&buf, lv, &sw)))
	return strings.Split(strings.TrimSuffix(buf.String(), "\n"), "\n")
}

func message(t *testing.T, re *regexp.Regexp, line string) (level, file, msg string) {
	t.Helper()
	m := re.FindStringSubmatch(line)
	if m == nil {
		t.Fatalf("%q is not a %s line", line, re)
	}
	get := func(name string) string { return m[re.SubexpIndex(name)] }
	var s string
	if err := json.Unmarshal([]byte(get("message")), &s); err != nil {
		t.Fatalf("message %q is not a JSON string: %v", get("message"), err)
	}
	return get("level"), get("file"), s
}

func TestFormats(t *testing.T) {
	for _, c := range []struct {
		f  Format
		re *regexp.Regexp
	}{{Default, defaultLine}, {ISO8601, isoLine}} {
		lines := logged(t, c.f, slog.LevelDebug, func(l *slog.Logger) {
			l.Info("loading model", "model", "simple", "version", 1)
			l.Warn("slow")
			l.Error("failed", "err", "no such file")
			l.Debug("verbose")
			l.With("model", "a b").WithGroup("req").Info("done", "id", 7)
		})
		want := []struct{ level, msg string }{
			{"I", "loading model model=simple version=1"}, {"W", "slow"}, {"E", `failed err="no such file"`},
			{"I", "verbose"}, {"I", `done model="a b" req.id=7`},
		}
		if len(lines) != len(want) {
			t.Fatalf("%s: %d lines: %q", c.f, len(lines), lines)
		}
		for i, line := range lines {
			level, file, msg := message(t, c.re, line)
			if level != want[i].level || msg != want[i].msg || file != "tritonlog_test.go" {
				t.Errorf("%s line %d: level %s, file %s, message %q; want %s %q", c.f, i, level, file, msg, want[i].level, want[i].msg)
			}
		}
	}
}

// A message cannot forge a line: newlines and control characters stay
// escaped within the record's JSON string.
func TestInjectionEscaped(t *testing.T) {
	forged := "I0205 18:34:18.707423 1 file.cc:123] \"THIS ENTRY WAS INJECTED\""
	lines := logged(t, Default, slog.LevelInfo, func(l *slog.Logger) {
		l.Warn("unknown input \n" + forged + "\n\x1b[31m\a")
	})
	if len(lines) != 1 {
		t.Fatalf("one record became %d lines: %q", len(lines), lines)
	}
	if _, _, msg := message(t, defaultLine, lines[0]); msg != "unknown input \n"+forged+"\n\x1b[31m\a" {
		t.Fatalf("message %q", msg)
	}
}

// TRITON_SERVER_ESCAPE_LOG_MESSAGES=0 writes messages as they are.
func TestUnescaped(t *testing.T) {
	t.Setenv("TRITON_SERVER_ESCAPE_LOG_MESSAGES", "0")
	lines := logged(t, ISO8601, slog.LevelInfo, func(l *slog.Logger) { l.Info(`a "quoted" word`) })
	m := isoLine.FindStringSubmatch(lines[0])
	if m == nil || m[isoLine.SubexpIndex("message")] != `a "quoted" word` {
		t.Fatalf("%q", lines)
	}
}

// The level filters; the format switches at run time.
func TestLevelAndSwitch(t *testing.T) {
	var buf bytes.Buffer
	var sw Switch
	lv := new(slog.LevelVar)
	lv.Set(slog.LevelWarn)
	l := slog.New(New(&buf, lv, &sw))
	l.Info("hidden")
	l.Warn("shown")
	sw.Set(ISO8601)
	l.Warn("iso")
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 2 || !defaultLine.MatchString(lines[0]) || !isoLine.MatchString(lines[1]) {
		t.Fatalf("%q", lines)
	}
	if f, ok := ParseFormat("ISO8601"); !ok || f != ISO8601 || f.String() != "ISO8601" {
		t.Fatal(f, ok)
	}
	if _, ok := ParseFormat("iso8601"); ok {
		t.Fatal("formats are case-sensitive, as tritonserver's")
	}
}

// FuzzAppendQuoted: any message, valid UTF-8 or not, becomes one line's
// JSON string: no newline, and it decodes to the message (invalid bytes
// replaced).
func FuzzAppendQuoted(f *testing.F) {
	f.Add([]byte("plain"))
	f.Add([]byte("a\nI0205 18:34:18.707423 1 file.cc:123] \"forged\"\r\n\x1b[31m\a\x7f"))
	f.Add([]byte("caf\xc3\xa9 \xff\xfe \\ \""))
	f.Fuzz(func(t *testing.T, msg []byte) {
		out := appendQuoted(nil, msg)
		if bytes.ContainsAny(out, "\n\r") {
			t.Fatalf("%q holds a line break", out)
		}
		var s string
		if err := json.Unmarshal(out, &s); err != nil {
			t.Fatalf("%q is not a JSON string: %v", out, err)
		}
		if want := strings.ToValidUTF8(string(msg), "\ufffd"); s != want && !strings.Contains(string(msg), "\ufffd") {
			// ToValidUTF8 folds a run of invalid bytes into one replacement; appendQuoted replaces each byte.
			if strings.ReplaceAll(s, "\ufffd", "") != strings.ReplaceAll(want, "\ufffd", "") {
				t.Fatalf("%q decodes to %q, want %q", msg, s, want)
			}
		}
	})
}

// NewSwitched writes through fw's own handler while the switch says
// Native and tritonserver's lines otherwise; loggers derived with
// attributes and groups carry them into both.
func TestNativeSwitch(t *testing.T) {
	var buf bytes.Buffer
	sw := new(Switch)
	sw.Set(Native)
	native := slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug})
	log := slog.New(NewSwitched(native, &buf, slog.LevelDebug, sw)).With("k", "v").WithGroup("g")
	log.Info("one", "a", 1)
	sw.Set(ISO8601)
	log.Info("two", "a", 2)
	sw.Set(Native)
	log.Info("three", "a", 3)
	lines := strings.Split(strings.TrimSuffix(buf.String(), "\n"), "\n")
	if len(lines) != 3 || !strings.Contains(lines[0], "msg=one k=v g.a=1") || !strings.Contains(lines[2], "msg=three k=v g.a=3") {
		t.Fatalf("fw's own lines: %q", lines)
	}
	if !regexp.MustCompile(`^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ I \d+ tritonlog_test.go:\d+\] "two k=v g.a=2"$`).MatchString(lines[1]) {
		t.Fatalf("tritonserver's line: %q", lines[1])
	}
	if Native.String() != "default" {
		t.Fatal("Native reports the format tritonserver starts with")
	}
}
