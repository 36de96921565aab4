package jobs

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fw-serve/fw/internal/testleak"

	"github.com/fw-serve/fw/dashboard/store"
)

func TestMain(m *testing.M) { testleak.Main(m) }

// noisyChild is the "Python" of the test jobs: a real child process (sh)
// that prints ordinary lines, a 3 MiB line, 20000 tqdm-style redraws of a
// progress bar (2 MiB with no newline at all, on stderr like tqdm), its
// final state and a newline, then more lines on both streams, a last
// redraw state that no newline ever ends, and exits 3. Its arguments (the
// recipe's -m MODULE --run-id ...) are ignored.
const noisyChild = `#!/bin/sh
echo before-1
echo before-2
head -c 3145728 /dev/zero | tr '\0' x
echo
i=0
while [ $i -lt 20000 ]; do
	printf '\r%5d/20000 |##################################################| %s' $i 'it/s ................................'
	i=$((i+1))
done >&2
printf '\rdone 20000/20000\n' >&2
i=0
while [ $i -lt 100 ]; do echo "after-$i"; i=$((i+1)); done
echo err-after >&2
printf 'half\rlast state, no newline' >&2
exit 3
`

// startJob runs one job of a manager over a real SQLite store with script
// as its interpreter and returns the run's log lines of both streams once
// it has ended.
func startJob(t *testing.T, script string) (store.Run, []store.LogLine) {
	t.Helper()
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	st, err := store.Open(ctx, store.Config{Dir: filepath.Join(dir, "experiments")})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	py := filepath.Join(dir, "python")
	if err := os.WriteFile(py, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	m := New(st, []Recipe{{Name: "noisy", Module: "noisy"}}, Config{Python: py, WorkDir: dir}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	defer m.Shutdown(ctx)
	info, err := m.Start(ctx, StartRequest{Recipe: "noisy", Experiment: "capture"})
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Wait(ctx, info.RunID); err != nil {
		t.Fatalf("the job did not end within the deadline (is the pipe still read?): %v", err)
	}
	run, err := st.GetRun(ctx, info.RunID)
	if err != nil {
		t.Fatal(err)
	}
	lines, err := st.Logs(ctx, info.RunID, store.LogQuery{Limit: 100000})
	if err != nil {
		t.Fatal(err)
	}
	return run, lines
}

// TestJobOutputSurvivesLongLinesAndRedraws: a 3 MiB line and 2 MiB of
// carriage-return redraws lose none of the output that follows them; the
// long line is kept cut with a marker that says how much was cut, a redrawn
// line keeps its last state, and a redraw state at EOF is kept too.
func TestJobOutputSurvivesLongLinesAndRedraws(t *testing.T) {
	run, lines := startJob(t, noisyChild)
	var out, errs []string
	for _, l := range lines {
		if len(l.Line) > store.MaxLogLine {
			t.Errorf("a %s line of %d bytes is over the store's %d", l.Stream, len(l.Line), store.MaxLogLine)
		}
		if l.Stream == "stdout" {
			out = append(out, l.Line)
		} else {
			errs = append(errs, l.Line)
		}
	}
	if len(out) != 103 {
		t.Fatalf("%d stdout lines, want 103 (2 before, the long one, 100 after); last: %.80q", len(out), out[len(out)-1])
	}
	if out[0] != "before-1" || out[1] != "before-2" {
		t.Errorf("first lines %q %q", out[0], out[1])
	}
	long := out[2]
	k := strings.Index(long, "… [truncated ")
	if k < 0 || strings.Trim(long[:k], "x") != "" || long[k:] != fmt.Sprintf("… [truncated %d bytes]", 3<<20-k) {
		t.Errorf("the long line (%d bytes) is not x's then the marker of how many were cut: ...%q", len(long), long[max(0, len(long)-60):])
	}
	for i := 0; i < 100; i++ {
		if want := fmt.Sprintf("after-%d", i); out[3+i] != want {
			t.Fatalf("stdout line %d is %.80q, want %q", 3+i, out[3+i], want)
		}
	}
	want := []string{"done 20000/20000", "err-after", "last state, no newline"}
	if strings.Join(errs, "\n") != strings.Join(want, "\n") {
		t.Errorf("stderr lines %.200q, want %q", errs, want)
	}
	if run.Status != store.StatusFailed || !strings.Contains(run.Error, "exited with code 3") {
		t.Errorf("run ended %s: %.300q", run.Status, run.Error) // the tail interleaves the two streams in no fixed order
	}
}
