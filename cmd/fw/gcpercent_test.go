package main

import (
	"flag"
	"io"
	"runtime/debug"
	"testing"
)

// --gc-percent sets the collector's target; GOGC alone is left to Go's
// runtime, the flag or FW_GC_PERCENT win over it; out of range is refused.
func TestSetGCPercent(t *testing.T) {
	orig := debug.SetGCPercent(100)
	defer debug.SetGCPercent(orig)
	current := func() int { v := debug.SetGCPercent(-1); debug.SetGCPercent(v); return v }
	parse := func(args ...string) (*flag.FlagSet, int) {
		fs := flag.NewFlagSet("serve", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		p := fs.Int("gc-percent", defaultGCPercent, "")
		if err := fs.Parse(args); err != nil {
			t.Fatal(err)
		}
		return fs, *p
	}

	fs, v := parse()
	if err := setGCPercent(fs, v); err != nil || current() != defaultGCPercent {
		t.Fatalf("default: %v, GC percent %d, want %d", err, current(), defaultGCPercent)
	}
	debug.SetGCPercent(100)
	t.Setenv("GOGC", "150")
	fs, v = parse()
	if err := setGCPercent(fs, v); err != nil || current() != 100 {
		t.Fatalf("GOGC set, no flag: %v, GC percent %d, want Go's own (100 here)", err, current())
	}
	fs, v = parse("--gc-percent", "800")
	if err := setGCPercent(fs, v); err != nil || current() != 800 {
		t.Fatalf("the flag over GOGC: %v, GC percent %d, want 800", err, current())
	}
	for _, bad := range []string{"0", "24", "10001", "-1"} {
		fs, v = parse("--gc-percent", bad)
		if err := setGCPercent(fs, v); err == nil {
			t.Errorf("--gc-percent %s accepted", bad)
		}
	}
}
