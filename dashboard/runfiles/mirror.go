// Package runfiles copies the files training processes write on a
// dashboard's host (checkpoints into FW_CHECKPOINT_DIR, artifacts into
// FW_ARTIFACT_DIR, through the file system) into object storage, so that
// every dashboard replica can serve them: with FW_ARTIFACT_URI=s3://...,
// the replica that stores a run's checkpoint or artifact event and finds
// the file on its own disk uploads it to the bucket
// (<prefix>/checkpoints/<run id>/<path>, <prefix>/artifacts/<run id>/<path>).
package runfiles

import (
	"context"
	"errors"
	"log/slog"

	"github.com/fw-serve/fw/dashboard/blob"
	"github.com/fw-serve/fw/dashboard/store"
)

// DefaultQueue bounds the files waiting to be uploaded.
const DefaultQueue = 1024

// Config configures a Mirror.
type Config struct {
	// LocalCheckpoints and LocalArtifacts are this host's directories
	// (directory stores of FW_CHECKPOINT_DIR and FW_ARTIFACT_DIR), key
	// <run id>/<path>: a file is read through them, so a path with a
	// symbolic link out of its directory is never read.
	LocalCheckpoints, LocalArtifacts blob.Store
	// Checkpoints and Artifacts are where the files go (the bucket's
	// checkpoints/ and artifacts/ parts, blob.Sub).
	Checkpoints, Artifacts blob.Store
	// APIWriter is the writer of artifact events whose file was uploaded
	// through the API into Artifacts already (MLflow's artifact API:
	// mlflow.Writer): a file of the same path on this host is not copied
	// over it.
	APIWriter string
	// Queue bounds the files waiting (default DefaultQueue); beyond it a
	// file is not mirrored (logged).
	Queue int
	Log   *slog.Logger
}

// Mirror uploads the files of stored checkpoint and artifact events, one
// at a time, in the background (a checkpoint may be large: the event's
// request does not wait for it).
type Mirror struct {
	cfg   Config
	queue chan item
}

type item struct {
	checkpoint bool
	key        string // <run id>/<path>
}

// New creates a mirror; Run uploads what Offer queues.
func New(cfg Config) *Mirror {
	if cfg.Queue <= 0 {
		cfg.Queue = DefaultQueue
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	return &Mirror{cfg: cfg, queue: make(chan item, cfg.Queue)}
}

// Offer queues the files of the checkpoint and artifact events among
// events, except those refused (the indexes of refused). It never blocks.
func (m *Mirror) Offer(events []store.Event, refused []store.EventError) {
	skip := make(map[int]bool, len(refused))
	for _, e := range refused {
		skip[e.Index] = true
	}
	for i, ev := range events {
		if skip[i] || ev.Path == "" || store.ValidateID(ev.RunID) != nil {
			continue
		}
		var it item
		switch ev.Type {
		case store.EventCheckpoint:
			it = item{checkpoint: true, key: ev.RunID + "/" + ev.Path}
		case store.EventArtifact:
			if ev.Writer == m.cfg.APIWriter && ev.Writer != "" {
				continue
			}
			it = item{key: ev.RunID + "/" + ev.Path}
		default:
			continue
		}
		select {
		case m.queue <- it:
		default:
			m.cfg.Log.Warn("run files: the upload queue is full; this file stays on this host only", "key", it.key, "queue", cap(m.queue))
		}
	}
}

// Run uploads queued files until ctx ends.
func (m *Mirror) Run(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case it := <-m.queue:
			if err := m.upload(ctx, it); err != nil {
				m.cfg.Log.Warn("run files: uploading a file to object storage; it stays on this host only", "key", it.key, "checkpoint", it.checkpoint, "err", err)
			}
		}
	}
}

// upload copies one file from this host's directory to object storage;
// a file that is not on this host (written on another) is left alone.
func (m *Mirror) upload(ctx context.Context, it item) error {
	from, to := m.cfg.LocalArtifacts, m.cfg.Artifacts
	if it.checkpoint {
		from, to = m.cfg.LocalCheckpoints, m.cfg.Checkpoints
	}
	if from == nil || to == nil {
		return nil
	}
	r, info, err := from.Get(ctx, it.key)
	if errors.Is(err, blob.ErrNotFound) || errors.Is(err, blob.ErrInvalidKey) {
		return nil
	}
	if err != nil {
		return err
	}
	defer r.Close()
	return to.Put(ctx, it.key, r, info.Size)
}

// Wrap returns st with Apply offering each batch's stored events to m:
// events stored through the API, the spool importer or MLflow's API alike.
func (m *Mirror) Wrap(st store.Store) store.Store { return &mirrored{Store: st, m: m} }

type mirrored struct {
	store.Store
	m *Mirror
}

// Apply stores events, then offers their files to the mirror.
func (s *mirrored) Apply(ctx context.Context, events []store.Event) (store.ApplyResult, error) {
	res, err := s.Store.Apply(ctx, events)
	if err == nil {
		s.m.Offer(events, res.Errors)
	}
	return res, err
}
