package tracking

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"time"

	"github.com/fw-serve/fw/dashboard/store"
)

// spoolName is the only file name the importer opens: the SDK writes
// <run id>-<writer>.jsonl, both parts lower-case letters, digits, - and _.
var spoolName = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,160}\.jsonl$`)

// Spool batches stay well inside the store's limits.
const (
	spoolBatchEvents = 5000
	spoolBatchValues = 150000
)

// SpoolStats says what one import pass did.
type SpoolStats struct {
	Files      int // spool files read
	Applied    int // events applied
	Duplicates int // events already applied (by HTTP or an earlier import)
	Refused    int // events the store refused (copied to spool/rejected/)
	Removed    int // files deleted after a complete import
}

// SpoolImporter imports the SDK's spool files, FW_EXPERIMENT_DIR/spool/*.jsonl.
//
// The rule: lines are applied in file order through Store.Apply, so the
// store's per-(run, writer) seq marks make a re-import harmless. A file is
// deleted only when (1) every complete line in it has been applied, found
// to be a duplicate, or refused by the store (refused lines are copied to
// spool/rejected/<name> and logged: re-sending them gets the same error),
// and (2) no process holds it: the SDK keeps an exclusive flock on its spool
// file while it may append, and the importer deletes only while it holds
// that lock itself. A last line without a newline is skipped: while the file
// is locked it is being written; once unlocked it is a torn write (the
// writer died mid-line), logged as a warning and copied to rejected/.
// Nothing else is ever truncated.
type SpoolImporter struct {
	Dir   string
	Store store.Store
	Log   *slog.Logger

	// done remembers, for files still held by a writer, how far they were
	// imported (by inode), so a growing file is not re-read from the start.
	done map[string]spoolMark
}

type spoolMark struct {
	ino uint64
	off int64
}

// Run imports every interval until ctx is cancelled (a pass in progress
// completes first).
func (im *SpoolImporter) Run(ctx context.Context, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if _, err := im.ImportAll(context.WithoutCancel(ctx)); err != nil {
				im.Log.Warn("spool import: will retry", "err", err)
			}
		}
	}
}

// ImportAll makes one pass over the spool directory.
func (im *SpoolImporter) ImportAll(ctx context.Context) (SpoolStats, error) {
	var st SpoolStats
	if im.done == nil {
		im.done = map[string]spoolMark{}
	}
	entries, err := os.ReadDir(im.Dir)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return st, nil
		}
		return st, err
	}
	names := make([]string, 0, len(entries))
	for _, e := range entries {
		if e.IsDir() || filepath.Ext(e.Name()) != ".jsonl" {
			continue
		}
		if !spoolName.MatchString(e.Name()) {
			im.Log.Warn("spool import: ignoring a file whose name the SDK does not write", "file", e.Name())
			continue
		}
		names = append(names, e.Name())
	}
	sort.Strings(names)
	var errs []error
	for _, name := range names {
		if err := im.importFile(ctx, name, &st); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", name, err))
		}
	}
	return st, errors.Join(errs...)
}

func (im *SpoolImporter) importFile(ctx context.Context, name string, st *SpoolStats) error {
	path, err := store.SafeJoin(im.Dir, name)
	if err != nil {
		return err
	}
	fi, err := os.Lstat(path)
	if err != nil || !fi.Mode().IsRegular() {
		return nil // gone meanwhile, or not a plain file: never follow links
	}
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	free := tryLock(f) // false: the SDK still holds it and may append
	defer unlock(f)
	ino := inode(fi)
	start := int64(0)
	if m, ok := im.done[name]; ok && m.ino == ino {
		start = m.off
	}
	if _, err := f.Seek(start, io.SeekStart); err != nil {
		return err
	}
	data, err := io.ReadAll(f)
	if err != nil {
		return err
	}
	st.Files++
	complete := data[:bytes.LastIndexByte(data, '\n')+1]
	tail := data[len(complete):]
	if err := im.applyLines(ctx, name, complete, st); err != nil {
		return err // nothing is marked done: the next pass retries (duplicates are harmless)
	}
	if !free {
		im.done[name] = spoolMark{ino: ino, off: start + int64(len(complete))}
		return nil
	}
	if len(bytes.TrimSpace(tail)) > 0 {
		im.Log.Warn("spool import: skipping a half-written last line (the writer died mid-line); copied to rejected/",
			"file", name, "bytes", len(tail))
		im.reject(name, [][]byte{tail})
	}
	delete(im.done, name)
	if err := os.Remove(path); err != nil {
		return err
	}
	st.Removed++
	im.Log.Info("spool import: file imported and removed", "file", name)
	return nil
}

// applyLines applies complete lines in order, in batches within the limits.
func (im *SpoolImporter) applyLines(ctx context.Context, name string, data []byte, st *SpoolStats) error {
	var batch []store.Event
	var lines [][]byte
	values := 0
	flush := func() error {
		if len(batch) == 0 {
			return nil
		}
		res, err := im.Store.Apply(ctx, batch)
		if err != nil {
			return err
		}
		st.Applied += res.Applied
		st.Duplicates += res.Duplicates
		st.Refused += len(res.Errors)
		var bad [][]byte
		for _, e := range res.Errors {
			im.Log.Warn("spool import: event refused", "file", name, "code", e.Code, "message", e.Msg, "run_id", e.RunID, "seq", e.Seq)
			bad = append(bad, lines[e.Index])
		}
		im.reject(name, bad)
		batch, lines, values = batch[:0], lines[:0], 0
		return nil
	}
	for len(data) > 0 {
		i := bytes.IndexByte(data, '\n')
		line := data[:i]
		data = data[i+1:]
		if len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		evs, err := store.DecodeEvents(line)
		if err != nil || len(evs) != 1 {
			st.Refused++
			im.Log.Warn("spool import: a line is not one event", "file", name, "err", err)
			im.reject(name, [][]byte{line})
			continue
		}
		ev := evs[0]
		n := 1 + len(ev.Values) + len(ev.Lines) + len(ev.Params)
		if len(batch) > 0 && (len(batch)+1 > spoolBatchEvents || values+n > spoolBatchValues) {
			if err := flush(); err != nil {
				return err
			}
		}
		batch = append(batch, ev)
		lines = append(lines, line)
		values += n
	}
	return flush()
}

// reject appends refused lines to spool/rejected/<name> for inspection.
func (im *SpoolImporter) reject(name string, lines [][]byte) {
	if len(lines) == 0 {
		return
	}
	dir := filepath.Join(im.Dir, "rejected")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		im.Log.Warn("spool import: cannot keep refused lines", "err", err)
		return
	}
	path, err := store.SafeJoin(dir, name)
	if err != nil {
		return
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		im.Log.Warn("spool import: cannot keep refused lines", "err", err)
		return
	}
	defer f.Close()
	for _, l := range lines {
		_, _ = f.Write(append(bytes.TrimRight(l, "\n"), '\n'))
	}
}
