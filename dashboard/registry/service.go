package registry

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/fw-serve/fw/dashboard/blob"
	"github.com/fw-serve/fw/dashboard/replica"
	"github.com/fw-serve/fw/dashboard/store"
	"github.com/fw-serve/fw/engine"
)

// Store is what the service needs of the tracking store (store.Store has
// it): a run's checkpoints, records to keep its own state in, and the
// change feed its export and deploy events go to (the live stream).
type Store interface {
	Checkpoints(ctx context.Context, runID string) ([]store.Checkpoint, error)
	AppendFeed(ctx context.Context, entries []store.FeedEntry) error
	Records
}

// Config configures a Service.
type Config struct {
	ExperimentDir string
	CheckpointDir string
	Python        string // interpreter with the fw package (fw.export)
	Executable    string // the fw binary started as `fw serve` for deployments
	// ExtraEnv is added to the environment of deployments.
	ExtraEnv []string
	// Traces, when set, makes every deployment send its request traces to
	// the dashboard's trace store (POST /v1/traces).
	Traces *DeploymentTraces
	// Payloads, when set, makes every deployment log a sample of its
	// requests and responses to the dashboard (POST /api/payloads).
	Payloads     *DeploymentPayloads
	ReadyTimeout time.Duration // a deployment's /health/ready must answer within it
	StopGrace    time.Duration // SIGTERM -> SIGKILL
	// Engine is where model files are loaded to be inspected (library paths).
	Engine engine.Options
	// Member, when set, makes deployments and exports owned by this
	// dashboard replica through leases (replicas.go, docs/replicas.md).
	Member *replica.Member
	// Files is where version files live (nil: ExperimentDir; a bucket for
	// FW_ARTIFACT_URI=s3://...), CacheDir where a deployment's file is
	// fetched to from a bucket (default ExperimentDir/cache/models).
	Files    blob.Store
	CacheDir string
	// Checkpoints, when set, is where a run's checkpoint that is not in
	// CheckpointDir on this host is fetched from (key <run id>/<path>; the
	// bucket's checkpoints/ with FW_ARTIFACT_URI=s3://...), into
	// ExperimentDir/cache/checkpoints.
	Checkpoints blob.Store
}

// DeploymentTraces is where deployments send their traces and how many.
type DeploymentTraces struct {
	// Endpoint is the OTLP/HTTP traces URL (the dashboard's /v1/traces).
	Endpoint string
	// Token, when set, is sent as a bearer token.
	Token string
	// SampleRate is the fraction of requests traced (parent-based: a
	// request whose caller traced it is traced).
	SampleRate float64
	// ResourceAttributes are the dashboard's own OTEL_RESOURCE_ATTRIBUTES,
	// which deployments keep.
	ResourceAttributes string
}

// env is the OpenTelemetry environment of deployment id: it overrides the
// traces settings a deployment would inherit, and names the deployment in
// the resource (fw.deployment), keeping the inherited attributes.
func (t *DeploymentTraces) env(id string) []string {
	attrs := "fw.deployment=" + url.PathEscape(id)
	if t.ResourceAttributes != "" {
		attrs = t.ResourceAttributes + "," + attrs // later entries win: an inherited fw.deployment cannot hide this one
	}
	out := []string{
		"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT=" + t.Endpoint,
		"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL=http/protobuf",
		"OTEL_SERVICE_NAME=fw-serve",
		"OTEL_RESOURCE_ATTRIBUTES=" + attrs,
		"OTEL_TRACES_SAMPLER=parentbased_traceidratio",
		"OTEL_TRACES_SAMPLER_ARG=" + strconv.FormatFloat(t.SampleRate, 'g', -1, 64),
		"OTEL_TRACES_EXPORTER=otlp",
		"OTEL_BSP_SCHEDULE_DELAY=1000", // a request shows on the deployment's page within a second or so
		"OTEL_SDK_DISABLED=false",
	}
	if t.Token != "" {
		out = append(out, "OTEL_EXPORTER_OTLP_TRACES_HEADERS=authorization=Bearer%20"+url.PathEscape(t.Token))
	}
	return out
}

// DeploymentPayloads is where deployments log their requests and
// responses (fw serve --log-payloads) and how many.
type DeploymentPayloads struct {
	// Rate is the fraction of requests logged (above 0).
	Rate float64
	// URL is the dashboard's (records go to its /api/payloads); Token its
	// bearer token.
	URL, Token string
	// SpoolDir holds one spool directory per deployment, where records
	// wait while the dashboard is away.
	SpoolDir string
}

// env is the fw serve environment of deployment id's payload logging.
func (p *DeploymentPayloads) env(id string) []string {
	out := []string{
		"FW_LOG_PAYLOADS=" + strconv.FormatFloat(p.Rate, 'g', -1, 64),
		"FW_LOG_PAYLOADS_TO=" + p.URL,
		"FW_LOG_PAYLOADS_DEPLOYMENT=" + id,
		"FW_LOG_PAYLOADS_SPOOL=" + filepath.Join(p.SpoolDir, id),
	}
	if p.Token != "" {
		out = append(out, "FW_PAYLOADS_TOKEN="+p.Token)
	}
	return out
}

// Service is the registry with its export jobs and deployments.
type Service struct {
	Reg  *Registry
	cfg  Config
	st   Store
	log  *slog.Logger
	base context.Context
	exp  exporter
	dep  deployer
	sh   sharedProc
}

// New opens the registry, the export jobs and the deployments kept in st
// (importing the JSON files of earlier versions from cfg.ExperimentDir
// once), fails the exports an earlier process left running and re-adopts
// the deployments that still answer. base bounds the exports.
func New(base context.Context, st Store, cfg Config, log *slog.Logger) (*Service, error) {
	for _, d := range []*string{&cfg.ExperimentDir, &cfg.CheckpointDir} {
		abs, err := filepath.Abs(*d)
		if err != nil {
			return nil, err
		}
		*d = abs
	}
	if cfg.ReadyTimeout <= 0 {
		cfg.ReadyTimeout = 60 * time.Second
	}
	if cfg.StopGrace <= 0 {
		cfg.StopGrace = 10 * time.Second
	}
	reg, err := Open(cfg.ExperimentDir, st, cfg.Files, cfg.CacheDir)
	if err != nil {
		return nil, err
	}
	reg.engine = cfg.Engine
	s := &Service{Reg: reg, cfg: cfg, st: st, log: log, base: base}
	if cfg.Member != nil {
		s.registerLeases()
	}
	if err := s.importFiles(base); err != nil {
		return nil, err
	}
	if err := s.loadExports(base); err != nil {
		return nil, err
	}
	if err := s.loadDeployments(base); err != nil {
		return nil, err
	}
	if err := s.loadShared(base); err != nil {
		return nil, err
	}
	return s, nil
}

// Wait waits for running exports (they end when base is cancelled).
func (s *Service) Wait() { s.exp.wg.Wait() }

// publish puts an export or deploy event into the store's change feed,
// from which the live stream of every dashboard on the database reads it.
func (s *Service) publish(typ, id string, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		return
	}
	e := store.FeedEntry{Type: typ, RunID: id, Time: time.Now().UTC(), Data: b}
	if err := s.st.AppendFeed(context.WithoutCancel(s.base), []store.FeedEntry{e}); err != nil && s.log != nil {
		s.log.Warn("publishing to the live stream", "type", typ, "id", id, "err", err)
	}
}

// checkpoint resolves a run's checkpoint: it must be listed by the store,
// and its path stays inside the run's checkpoint directory (abs); its
// file is there, or (with Config.Checkpoints) its copy in object storage.
func (s *Service) checkpoint(ctx context.Context, runID, ckpt string) (abs string, size int64, metrics map[string]float64, err error) {
	runDir, err := store.SafeJoin(s.cfg.CheckpointDir, runID)
	if err != nil || filepath.Dir(runDir) != s.cfg.CheckpointDir {
		return "", 0, nil, invalid("run id %q is not valid", runID)
	}
	list, err := s.st.Checkpoints(ctx, runID)
	if err != nil {
		return "", 0, nil, err
	}
	for _, c := range list {
		if c.Path != ckpt {
			continue
		}
		abs, err := store.SafeJoin(runDir, ckpt)
		if err != nil {
			return "", 0, nil, invalid("checkpoint path %q is not valid: %v", ckpt, err)
		}
		if st, err := os.Stat(abs); err == nil {
			return abs, st.Size(), c.Metrics, nil
		}
		if s.cfg.Checkpoints == nil {
			return "", 0, nil, notFound("checkpoint %s of run %s is recorded but its file is missing under the checkpoint directory", ckpt, runID)
		}
		info, err := s.cfg.Checkpoints.Stat(ctx, runID+"/"+ckpt)
		if errors.Is(err, blob.ErrNotFound) || errors.Is(err, blob.ErrInvalidKey) {
			return "", 0, nil, notFound("checkpoint %s of run %s is recorded but its file is neither under this replica's checkpoint directory nor in %s", ckpt, runID, s.cfg.Checkpoints)
		}
		if err != nil {
			return "", 0, nil, fmt.Errorf("checkpoint %s of run %s: %w", ckpt, runID, err)
		}
		return abs, info.Size, c.Metrics, nil
	}
	return "", 0, nil, notFound("run %s has no checkpoint %q; GET /api/runs/%s lists its checkpoints", runID, ckpt, runID)
}

// localCheckpoint returns a file of this host with a run's checkpoint: abs
// (its path under the checkpoint directory) when it is there, else its
// copy fetched from Config.Checkpoints into ExperimentDir/cache/checkpoints
// (once per content). Without Config.Checkpoints it is abs.
func (s *Service) localCheckpoint(ctx context.Context, runID, ckpt, abs string) (string, error) {
	if _, err := os.Stat(abs); err == nil || s.cfg.Checkpoints == nil {
		return abs, nil
	}
	p, err := blob.Fetch(ctx, s.cfg.Checkpoints, runID+"/"+ckpt, filepath.Join(s.cfg.ExperimentDir, "cache", "checkpoints"))
	if errors.Is(err, blob.ErrNotFound) || errors.Is(err, blob.ErrInvalidKey) {
		return "", notFound("checkpoint %s of run %s is neither under this replica's checkpoint directory nor in %s", ckpt, runID, s.cfg.Checkpoints)
	}
	if err != nil {
		return "", fmt.Errorf("fetching checkpoint %s of run %s: %w", ckpt, runID, err)
	}
	return p, nil
}

// RegisterCheckpoint registers a run's checkpoint as the next version of
// name (format "checkpoint": export it before deploying).
func (s *Service) RegisterCheckpoint(ctx context.Context, name, runID, ckpt string) (*Version, error) {
	if err := ValidName("model name", name); err != nil {
		return nil, err
	}
	abs, size, metrics, err := s.checkpoint(ctx, runID, ckpt)
	if err != nil {
		return nil, err
	}
	return s.Reg.AddCheckpoint(ctx, name, runID, ckpt, abs, size, metrics)
}

// Upload validates a file written by the caller at a temporary path and
// registers it as the next version of name.
func (s *Service) Upload(ctx context.Context, name, tmp, filename string) (*Version, error) {
	return s.Reg.AddFile(ctx, name, tmp, Version{Source: Source{Upload: filepath.Base(filename)}})
}

// TempFile creates a temporary file for an upload inside the registry dir.
func (s *Service) TempFile() (*os.File, error) {
	return os.CreateTemp(filepath.Join(s.cfg.ExperimentDir, "registry"), "upload-*")
}
