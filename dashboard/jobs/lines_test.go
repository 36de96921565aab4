package jobs

import (
	"errors"
	"strings"
	"testing"
	"testing/iotest"
	"unicode/utf8"
)

func collect(t *testing.T, in string, max int, oneByte bool) []string {
	t.Helper()
	var r = iotest.HalfReader(strings.NewReader(in))
	if oneByte {
		r = iotest.OneByteReader(strings.NewReader(in))
	}
	var out []string
	if err := readLines(r, max, func(l string) { out = append(out, l) }); err != nil {
		t.Fatal(err)
	}
	return out
}

func TestReadLines(t *testing.T) {
	long := strings.Repeat("a", 100)
	for _, c := range []struct {
		name, in string
		want     []string
	}{
		{"lines", "a\nb\n\nc", []string{"a", "b", "", "c"}},
		{"crlf", "a\r\nb\r\n", []string{"a", "b"}},
		{"redraw keeps the last state", "\r 1%\r 50%\r100%\ndone\n", []string{"100%", "done"}},
		{"redraw state at EOF", "x\n\r1/3\r2/3", []string{"x", "2/3"}},
		{"CR at EOF", "a\r", []string{"a"}},
		{"empty", "", nil},
		{"long line cut with the marker", long + "\nnext\n", []string{strings.Repeat("a", 33) + "… [truncated 67 bytes]", "next"}},
		{"exactly max", strings.Repeat("b", 58) + "\n", []string{strings.Repeat("b", 58)}},
		{"long redraws keep only the last, short state", long + "\r" + long + "\rshort\n", []string{"short"}},
		{"cut at a rune boundary", "x" + strings.Repeat("é", 40) + "\n", []string{"x" + strings.Repeat("é", 16) + "… [truncated 48 bytes]"}},
	} {
		for _, oneByte := range []bool{false, true} {
			got := collect(t, c.in, 58, oneByte)
			if strings.Join(got, "|") != strings.Join(c.want, "|") || len(got) != len(c.want) {
				t.Errorf("%s (one byte a read %v): got %q, want %q", c.name, oneByte, got, c.want)
			}
		}
	}
}

func TestReadLinesReportsReadErrorsAfterTheLastLine(t *testing.T) {
	boom := errors.New("boom")
	var out []string
	err := readLines(iotest.DataErrReader(iotest.TimeoutReader(strings.NewReader("a\nb"))), 64, func(l string) { out = append(out, l) })
	if !errors.Is(err, iotest.ErrTimeout) && !errors.Is(err, boom) {
		t.Fatalf("err %v", err)
	}
	if strings.Join(out, "|") != "a\nb" && strings.Join(out, "|") != "a|b" {
		t.Errorf("lines %q", out)
	}
}

// FuzzReadLines: no line is over the bound, holds a line break or ends in
// the middle of a character, and output without "\r" or long lines comes
// out as it went in.
func FuzzReadLines(f *testing.F) {
	f.Add("a\nb\r\nc\rd", 64)
	f.Add(strings.Repeat("日本", 50)+"\n", 64)
	f.Fuzz(func(t *testing.T, in string, max int) {
		max = 64 + max%200
		if max < 64 {
			max += 200
		}
		var out []string
		if err := readLines(strings.NewReader(in), max, func(l string) { out = append(out, l) }); err != nil {
			t.Fatal(err)
		}
		for _, l := range out {
			if len(l) > max || strings.ContainsAny(l, "\r\n") {
				t.Fatalf("line %q (max %d)", l, max)
			}
			if utf8.ValidString(in) && !utf8.ValidString(l) {
				t.Fatalf("line %q of valid input is not valid UTF-8", l)
			}
		}
		if !strings.Contains(in, "\r") {
			want := strings.Split(strings.TrimSuffix(in, "\n"), "\n")
			if in == "" {
				want = nil
			}
			short := true
			for _, w := range want {
				short = short && len(w) <= max
			}
			if short && strings.Join(out, "\n") != strings.Join(want, "\n") {
				t.Fatalf("got %q, want %q", out, want)
			}
		}
	})
}
