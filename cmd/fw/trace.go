package main

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/fw-serve/fw/reqtrace"
)

// traceConfig reads tritonserver's trace flags into a tracer: each
// --trace-config entry is [triton,]SETTING=VALUE (file, log-frequency,
// rate, level, count, mode), and the older --trace-file, --trace-level,
// --trace-rate, --trace-count, --trace-log-frequency are the same
// settings ("" when not given). Later entries win.
func traceConfig(entries []string, file, level, rate, count, freq string) (*reqtrace.Tracer, error) {
	set := map[string]string{}
	for _, e := range entries {
		e = strings.TrimSpace(e)
		if mode, rest, ok := strings.Cut(e, ","); ok && !strings.Contains(mode, "=") {
			if mode != "triton" {
				return nil, fmt.Errorf("--trace-config %q: trace mode %q: fw writes Triton's trace files (mode triton); OpenTelemetry export is not built in", e, mode)
			}
			e = rest
		}
		if e == "triton" {
			continue
		}
		k, v, ok := strings.Cut(e, "=")
		if !ok {
			return nil, fmt.Errorf("--trace-config %q: give [triton,]SETTING=VALUE, e.g. triton,file=/tmp/trace.json or rate=100", e)
		}
		if k == "mode" && v != "triton" {
			return nil, fmt.Errorf("--trace-config %q: trace mode %q: fw writes Triton's trace files (mode triton)", e, v)
		}
		set[k] = v
	}
	for k, v := range map[string]string{"file": file, "level": level, "rate": rate, "count": count, "log-frequency": freq} {
		if v != "" {
			if _, dup := set[k]; !dup {
				set[k] = v
			}
		}
	}
	var s reqtrace.Settings
	for k, v := range set {
		switch k {
		case "file", "mode":
		case "level":
			l := strings.ToUpper(v)
			s.Level = &l
		case "rate":
			n, err := strconv.ParseUint(v, 10, 32)
			if err != nil {
				return nil, fmt.Errorf("trace rate %q: give a whole number of requests per trace", v)
			}
			r := uint32(n)
			s.Rate = &r
		case "count":
			n, err := strconv.ParseInt(v, 10, 32)
			if err != nil {
				return nil, fmt.Errorf("trace count %q: give -1 (no limit) or a number of traces", v)
			}
			c := int32(n)
			s.Count = &c
		case "log-frequency":
			n, err := strconv.ParseUint(v, 10, 32)
			if err != nil {
				return nil, fmt.Errorf("trace log frequency %q: give a number of traces per file (0: one file, at shutdown)", v)
			}
			f := uint32(n)
			s.LogFrequency = &f
		default:
			return nil, fmt.Errorf("--trace-config: unknown trace setting %q; the settings are file, log-frequency, rate, level, count and mode", k)
		}
	}
	t, err := reqtrace.New(set["file"], s)
	if err != nil {
		return nil, fmt.Errorf("--trace-config: %w", err)
	}
	return t, nil
}
