package jobs

import (
	"errors"
	"fmt"
	"io"
	"unicode/utf8"
)

// readLines reads r to its end and calls emit with each log line of it, in
// memory bounded by max whatever r holds, so a job's output is never lost
// after an odd line and the child never blocks on a full pipe:
//   - "\n" ends a line ("\r\n" too);
//   - "\r" not followed by "\n" is a terminal redraw (tqdm's progress bar):
//     the text after it replaces the line, so a redrawn line is kept in its
//     last state, emitted when a newline ends it or at the end of r;
//   - a line longer than max bytes is cut to at most max bytes ending with
//     "… [truncated N bytes]" (N counts what was cut), at a UTF-8 boundary.
//
// max must leave room for the marker (at least 64). It returns the read
// error that ended r, nil at EOF.
func readLines(r io.Reader, max int, emit func(string)) error {
	var (
		cur     = make([]byte, 0, min(max, 4096))
		dropped int64 // bytes of the current line beyond max
		cr      bool  // the last byte was "\r": a redraw unless "\n" follows
	)
	line := func() {
		emit(cutLine(cur, dropped, max))
		cur, dropped = cur[:0], 0
	}
	buf := make([]byte, 32<<10)
	for {
		n, err := r.Read(buf)
		for _, b := range buf[:n] {
			if cr {
				cr = false
				if b == '\n' {
					line()
					continue
				}
				cur, dropped = cur[:0], 0 // redraw
			}
			switch b {
			case '\n':
				line()
			case '\r':
				cr = true
			default:
				if len(cur) < max {
					cur = append(cur, b)
				} else {
					dropped++
				}
			}
		}
		if err != nil {
			if len(cur) > 0 || dropped > 0 {
				line()
			}
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		}
	}
}

// cutLine is the line cur (followed by dropped more bytes) as at most max
// bytes: cut with the truncation marker when it is longer.
func cutLine(cur []byte, dropped int64, max int) string {
	if dropped == 0 {
		return string(cur)
	}
	total := int64(len(cur)) + dropped
	keep := max - len(truncMarker(total)) // the marker of a smaller count is no longer
	for keep > 0 && keep < len(cur) && !utf8.RuneStart(cur[keep]) {
		keep--
	}
	return string(cur[:keep]) + truncMarker(total-int64(keep))
}

func truncMarker(n int64) string { return fmt.Sprintf("… [truncated %d bytes]", n) }
