// Package modelhost owns the serving model's lifecycle: it loads a model
// file into an engine with a batcher in front, warms it up (the embedded test
// vector must match, then a few batches of common sizes), installs it in the
// HTTP server, and with Watch replaces it when the file changes on disk,
// loading the new one beside the old and swapping without dropping requests.
package modelhost

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/fw-serve/fw/batcher"
	"github.com/fw-serve/fw/engine"
	"github.com/fw-serve/fw/httpapi"
)

// Config says what to load and how to batch it.
type Config struct {
	Path    string
	Engine  engine.Options
	Batcher batcher.Config
	// SkipWarmup starts serving without the warm-up batches (the test vector
	// still runs when present).
	SkipWarmup bool
}

// Host loads models for one httpapi.Server.
type Host struct {
	cfg    Config
	server *httpapi.Server
	log    *slog.Logger
}

// New creates a host for server.
func New(cfg Config, server *httpapi.Server, log *slog.Logger) *Host {
	return &Host{cfg: cfg, server: server, log: log}
}

// Start loads and warms up the model and makes the server ready.
func (h *Host) Start(ctx context.Context) error {
	inst, err := h.load(ctx)
	if err != nil {
		h.server.SetState(httpapi.StateBroken, err.Error())
		return err
	}
	h.server.Swap(inst)
	h.server.SetState(httpapi.StateReady, "")
	return nil
}

// load builds one warmed-up instance.
func (h *Host) load(ctx context.Context) (*httpapi.Instance, error) {
	start := time.Now()
	m, err := engine.Load(ctx, h.cfg.Path, h.cfg.Engine)
	if err != nil {
		return nil, err
	}
	if err := warmup(ctx, m, h.cfg.Batcher.MaxBatchRows, h.cfg.SkipWarmup); err != nil {
		m.Close()
		return nil, fmt.Errorf("warm up %s: %w", h.cfg.Path, err)
	}
	b := batcher.New(m.Forward, h.cfg.Batcher, h.server.Metrics())
	took := time.Since(start)
	h.server.Metrics().ModelLoaded(m.Name(), m.Version(), string(m.Format), string(m.Device), took)
	h.log.Info("model ready", "name", m.Name(), "version", m.Version(), "format", m.Format, "device", m.Device,
		"threads", m.Threads(), "load_ms", took.Milliseconds(), "path", h.cfg.Path)
	return &httpapi.Instance{Model: m, Batcher: b}, nil
}

// warmup runs the test vector (it must match) and, unless skipped, batches of
// a few common sizes so the first requests do not pay for lazy initialisation.
func warmup(ctx context.Context, m *engine.Model, maxBatch int, skip bool) error {
	res, err := m.Verify(ctx)
	switch {
	case errors.Is(err, engine.ErrNoTestVector):
		// Files exported without fw metadata: nothing to compare with.
	case err != nil:
		return err
	case !res.Passed:
		return fmt.Errorf("%w: the embedded test vector does not match (max abs error %g; %s)", errTestVector, res.MaxAbsError, res.Worst)
	}
	if skip {
		return nil
	}
	sizes := []int{1, 8}
	if maxBatch > 8 {
		sizes = append(sizes, maxBatch)
	}
	for _, n := range sizes {
		in, err := m.ExampleInputs(n)
		if err != nil {
			return nil // no test vector: nothing realistic to warm up with
		}
		if _, err := m.Run(ctx, in); err != nil {
			return fmt.Errorf("warm-up batch of %d: %w", n, err)
		}
	}
	return nil
}

var errTestVector = errors.New("test vector mismatch")

// fileStamp identifies a version of the model file.
type fileStamp struct {
	size int64
	mod  time.Time
	ino  uint64
}

func stamp(path string) (fileStamp, error) {
	st, err := os.Stat(path)
	if err != nil {
		return fileStamp{}, err
	}
	return fileStamp{size: st.Size(), mod: st.ModTime(), ino: inode(st)}, nil
}

// Watch polls the model file every interval until ctx ends. When it has
// changed and then stayed the same for one more poll (so a file being written
// is not read half-way), the new file is loaded and warmed up beside the old
// one and swapped in; the old instance drains its queue and closes. A file
// that fails to load is logged and counted, and the old model keeps serving.
func (h *Host) Watch(ctx context.Context, interval time.Duration) {
	last, _ := stamp(h.cfg.Path)
	var seen fileStamp
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		cur, err := stamp(h.cfg.Path)
		if err != nil || cur == last {
			seen = cur
			continue
		}
		if cur != seen { // changed since the last poll: wait until it settles
			seen = cur
			continue
		}
		last = cur
		h.Reload(ctx)
	}
}

// Reload loads the file again and swaps it in; on failure the old model stays.
func (h *Host) Reload(ctx context.Context) error {
	h.log.Info("model file changed: loading the new version beside the old", "path", h.cfg.Path)
	inst, err := h.load(ctx)
	if err != nil {
		h.server.Metrics().Reload("failed")
		h.log.Error("reload refused: the old model keeps serving", "err", err)
		return err
	}
	old := h.server.Swap(inst)
	h.server.SetState(httpapi.StateReady, "")
	h.server.Metrics().Reload("ok")
	if old != nil {
		go Drain(context.Background(), old, 30*time.Second, h.log)
	}
	return nil
}

// Drain closes an instance's batcher (finishing what it accepted) and then its model.
func Drain(ctx context.Context, inst *httpapi.Instance, timeout time.Duration, log *slog.Logger) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if err := inst.Batcher.Close(ctx); err != nil {
		log.Warn("drain: batcher did not finish in time", "err", err)
	}
	if err := inst.Model.Close(); err != nil {
		log.Warn("close model", "err", err)
	}
}
