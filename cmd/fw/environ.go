package main

import (
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/fw-serve/fw/dashboard/blob"
	"github.com/fw-serve/fw/dashboard/store"
	"github.com/fw-serve/fw/engine"
)

// The environment is read here, in cmd/fw, and passed down as values: the
// library packages (engine, store) read none of it.

// withLibraries sets where the engines' native libraries are from
// FW_ORT_LIB (libonnxruntime.so.1, e.g. a CUDA build) and FW_TORCH_SHIM
// (libfwtorch.so); unset, the engine looks next to the binary and above the
// working directory.
func withLibraries(o engine.Options) engine.Options {
	if o.ORTLibrary == "" {
		o.ORTLibrary = os.Getenv("FW_ORT_LIB")
	}
	if o.TorchShim == "" {
		o.TorchShim = os.Getenv("FW_TORCH_SHIM")
	}
	return o
}

// storeConfigFromEnv reads the tracking store's settings: FW_DATABASE_URL
// (PostgreSQL; SQLite when unset), FW_EXPERIMENT_DIR (default
// ./experiments), FW_CHECKPOINT_DIR and FW_ARTIFACT_DIR.
func storeConfigFromEnv() store.Config {
	c := store.Config{
		DatabaseURL:   os.Getenv("FW_DATABASE_URL"),
		Dir:           os.Getenv("FW_EXPERIMENT_DIR"),
		CheckpointDir: os.Getenv("FW_CHECKPOINT_DIR"),
		ArtifactDir:   os.Getenv("FW_ARTIFACT_DIR"),
	}
	if c.Dir == "" {
		c.Dir = "experiments"
	}
	return c
}

// s3ConfigFromEnv reads how to reach an S3-compatible store
// (FW_ARTIFACT_URI=s3://...): FW_S3_ENDPOINT (else AWS_ENDPOINT_URL;
// default AWS), AWS_REGION, AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY
// (unset: the machine's IAM role), FW_S3_PATH_STYLE=1 for servers that
// address buckets by path (MinIO, moto).
func s3ConfigFromEnv() blob.S3Config {
	c := blob.S3Config{
		Endpoint:  os.Getenv("FW_S3_ENDPOINT"),
		Region:    os.Getenv("AWS_REGION"),
		AccessKey: os.Getenv("AWS_ACCESS_KEY_ID"),
		SecretKey: os.Getenv("AWS_SECRET_ACCESS_KEY"),
		PathStyle: os.Getenv("FW_S3_PATH_STYLE") == "1",
	}
	if c.Endpoint == "" {
		c.Endpoint = os.Getenv("AWS_ENDPOINT_URL")
	}
	return c
}

// delaySchedulerFrom reads TRITONSERVER_DELAY_SCHEDULER, Triton's test
// hook that holds each dynamic batcher's first batch until that many
// requests are queued: empty or 0 is off. name is the variable, for
// TRITONSERVER_BACKLOG_DELAY_SCHEDULER too (sequence models' backlog).
func delaySchedulerFrom(name, v string) (int, error) {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 || n > 1<<20 {
		return 0, fmt.Errorf("%s is %q: it must be a count of requests from 0 (off) to %d", name, v, 1<<20)
	}
	return n, nil
}
