//go:build unix

package tracking

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/fw-serve/fw/dashboard/store"
)

func TestSpoolImporterRespectsWriterLock(t *testing.T) {
	dir := t.TempDir()
	st, err := store.Open(context.Background(), store.Config{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	spool := filepath.Join(dir, "spool")
	os.MkdirAll(spool, 0o755)
	name := filepath.Join(spool, "r1-w1.jsonl")
	f, err := os.OpenFile(name, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	fmt.Fprintln(f, `{"type":"run_start","run_id":"r1","writer":"w1","seq":1,"experiment":"e"}`)
	fmt.Fprint(f, `{"type":"metrics","run_id":"r1","writer":"w1","seq":2,"step":1,"values":{"loss":1}}`) // line not finished yet
	im := &SpoolImporter{Dir: spool, Store: st, Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	f2 := func(wantApplied, wantRemoved int) {
		t.Helper()
		s, err := im.ImportAll(context.Background())
		if err != nil || s.Applied != wantApplied || s.Removed != wantRemoved || s.Duplicates != 0 {
			t.Fatalf("import: %+v %v, want applied %d removed %d", s, err, wantApplied, wantRemoved)
		}
	}
	f2(1, 0) // run_start only: the half line is still being written, the file is locked
	fmt.Fprintln(f, "")
	fmt.Fprintln(f, `{"type":"metrics","run_id":"r1","writer":"w1","seq":3,"step":2,"values":{"loss":2}}`)
	f2(2, 0)  // only what follows the previous pass
	f.Close() // the writer is gone: the file can go
	f2(0, 1)
	if _, err := os.Stat(name); !os.IsNotExist(err) {
		t.Fatalf("spool file kept after its writer closed it: %v", err)
	}
	r, err := st.GetRun(context.Background(), "r1")
	if err != nil || r.Metrics["loss"].Count != 2 {
		t.Fatalf("run %+v %v", r.Metrics, err)
	}
	// Names the SDK does not write are left alone.
	os.WriteFile(filepath.Join(spool, "Bad Name.jsonl"), []byte("{}\n"), 0o644)
	if s, _ := im.ImportAll(context.Background()); s.Files != 0 {
		t.Fatalf("a foreign file name was read: %+v", s)
	}
}
