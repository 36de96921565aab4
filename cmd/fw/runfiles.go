package main

import (
	"log/slog"

	"github.com/fw-serve/fw/dashboard/blob"
	"github.com/fw-serve/fw/dashboard/mlflow"
	"github.com/fw-serve/fw/dashboard/runfiles"
)

// runFileStores are where a dashboard with object storage keeps and reads
// the runs' files (docs/replicas.md, "Object storage"); all nil without.
type runFileStores struct {
	// artifacts: the bucket's artifacts/, then this host's artifact
	// directory (uploads through the API go to the bucket).
	artifacts blob.Store
	// checkpoints: this host's checkpoint directory, then the bucket's
	// checkpoints/ (for downloads).
	checkpoints blob.Store
	// checkpointBucket: the bucket's checkpoints/ (what an export or a
	// resume fetches when the file is not on this host).
	checkpointBucket blob.Store
	// mirror copies the files of stored events from this host's
	// directories to the bucket.
	mirror *runfiles.Mirror
}

func newRunFileStores(bucket *blob.S3, ckptDir, artDir string, log *slog.Logger) (runFileStores, error) {
	var rf runFileStores
	ckSub, err := blob.Sub(bucket, "checkpoints")
	if err != nil {
		return rf, err
	}
	artSub, err := blob.Sub(bucket, "artifacts")
	if err != nil {
		return rf, err
	}
	localCk, err := blob.NewDir(ckptDir)
	if err != nil {
		return rf, err
	}
	localArt, err := blob.NewDir(artDir)
	if err != nil {
		return rf, err
	}
	rf.artifacts = blob.Layered(artSub, localArt)
	rf.checkpoints = blob.Layered(localCk, ckSub)
	rf.checkpointBucket = ckSub
	rf.mirror = runfiles.New(runfiles.Config{LocalCheckpoints: localCk, LocalArtifacts: localArt, Checkpoints: ckSub, Artifacts: artSub,
		APIWriter: mlflow.Writer, Log: log})
	return rf, nil
}
