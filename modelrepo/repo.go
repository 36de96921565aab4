// Package modelrepo serves a model repository in Triton's layout: many
// models side by side, each DIR/<model>/config.pbtxt (optional: completed
// from the file when absent) with versions DIR/<model>/<version>/model.onnx
// (or .pt, .pt2, or fw's own files). Each model version is a modelhost.Host
// with its own engine instances, batcher, limits and statistics. A
// Repository is the serving.Models both transports serve from: lookups by
// name and version, Triton's repository extension (index, load with a
// configuration override, unload), the control modes none, explicit and
// poll, and the server's readiness.
package modelrepo

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fw-serve/fw/batcher"
	"github.com/fw-serve/fw/engine"
	pb "github.com/fw-serve/fw/grpcapi/inferencepb"
	"github.com/fw-serve/fw/imageprep"
	"github.com/fw-serve/fw/modelhost"
	"github.com/fw-serve/fw/pybackend"
	"github.com/fw-serve/fw/respcache"
	"github.com/fw-serve/fw/sequence"
	"github.com/fw-serve/fw/serving"
	"github.com/fw-serve/fw/telemetry"
)

// Mode is the model control mode (tritonserver's --model-control-mode).
type Mode string

// The control modes.
const (
	// ModeNone loads every model at start; the API cannot load or unload.
	ModeNone Mode = "none"
	// ModeExplicit loads the --load-model ones at start; the API loads and
	// unloads.
	ModeExplicit Mode = "explicit"
	// ModePoll loads every model at start and follows the repository:
	// new, changed and removed models are loaded, reloaded and unloaded.
	ModePoll Mode = "poll"
)

// ParseMode reads a --model-control-mode value.
func ParseMode(s string) (Mode, error) {
	switch m := Mode(strings.ToLower(s)); m {
	case ModeNone, ModeExplicit, ModePoll:
		return m, nil
	}
	return "", fmt.Errorf("--model-control-mode %q: use none, explicit or poll", s)
}

// Config says where the repository is and how its models load.
type Config struct {
	// Roots are the repository directories (--model-repository); a model
	// name is found in the first that has it.
	Roots []string
	Mode  Mode
	// LoadModels are the models loaded at start in explicit mode
	// (--load-model); "*" is all.
	LoadModels []string
	// PollInterval is how often poll mode looks at the repository.
	PollInterval time.Duration
	// DisableAutoComplete refuses a model without config.pbtxt instead of
	// completing its configuration from the file.
	DisableAutoComplete bool
	// ConfigName, when set, picks DIR/<model>/configs/<ConfigName>.pbtxt
	// over config.pbtxt where a model has one (tritonserver's
	// --model-config-name).
	ConfigName string
	// ResponseCache is the server's response cache (--cache-config), which
	// models whose configuration enables response_cache use; nil refuses
	// such a configuration.
	ResponseCache *respcache.Cache
	// Engine and Batcher are the defaults every model starts from; its
	// configuration overrides the batching (max_batch_size,
	// dynamic_batching) and the instance count (instance_group).
	Engine  engine.Options
	Batcher batcher.Config
	// Tracer, when set, traces every model's engine calls (telemetry).
	Tracer *telemetry.Tracer
	// SkipWarmup skips the warm-up batches (the test vector still runs).
	SkipWarmup bool
	// CPUs is what the engines' threads are split from when Engine.Threads
	// is 0 (engine.AvailableCPUs, read once by cmd/fw: reading the cgroup
	// files at every load was a part of an on-demand load's cost); 0 reads
	// it at each load.
	CPUs int
	// MaxResidentModels and MaxResidentBytes, when positive, bound the
	// models loaded at once (their files' bytes times their instances):
	// every model of the repository is then served on demand — loaded by
	// the first request for it (which waits at most LoadWait, then gets
	// 503 with Retry-After) — and the least recently used are unloaded to
	// stay within the bounds. Only the --load-model ones load at start.
	MaxResidentModels int
	MaxResidentBytes  int64
	// LoadWait bounds how long a request waits for its model to load on
	// demand (default 30 s).
	LoadWait time.Duration
	// Python is the interpreter (with numpy) that runs Python-backend
	// models (--python); MaxPythonBytes bounds the tensor bytes of one
	// answer from one (default 1 GiB).
	Python         string
	MaxPythonBytes int64
	// PythonMetrics receives Python models' custom metrics (nil drops them).
	PythonMetrics *pybackend.Metrics
	// KeepGoing starts the server even when models fail to load at start
	// (tritonserver --exit-on-error=false): they stay UNAVAILABLE in the
	// index with their reasons, the others serve.
	KeepGoing bool
	// DelayScheduler, when positive, holds each dynamically batched
	// model's first batch until that many requests are queued
	// (batcher.Config.StartAfter): Triton's TRITONSERVER_DELAY_SCHEDULER
	// test hook, for its QA suites.
	DelayScheduler int
	// BacklogDelay, when positive, holds a direct sequence batcher's first
	// batches until that many requests wait in its backlog too: Triton's
	// TRITONSERVER_BACKLOG_DELAY_SCHEDULER (sequence.DirectConfig).
	BacklogDelay int
}

// onDemand reports whether models load on their first request.
func (c Config) onDemand() bool { return c.MaxResidentModels > 0 || c.MaxResidentBytes > 0 }

// Metrics is where a repository reports: each model version's series, the
// server's readiness and reloads (httpapi.Metrics).
type Metrics interface {
	modelhost.Metrics
	Forget(name, version string)
}

// Repository is a model repository being served. Create it with New, load
// it with Start, stop it with Shutdown.
type Repository struct {
	cfg     Config
	metrics Metrics
	log     *slog.Logger
	// images keeps the image test cases' preprocessed pictures across the
	// models' loads: an evicted model reloads, and copies of one model share.
	images *imageprep.SampleCache
	// threads remembers each model file's trial of one intra-op thread
	// (modelhost.ThreadMemo): an on-demand load after an eviction skips it.
	threads modelhost.ThreadMemo

	// served is the immutable snapshot lookups read: model name -> its
	// ready versions. Replaced under mu on every change.
	served atomic.Pointer[map[string]*servedModel]
	ready  atomic.Pointer[readiness]

	mu       sync.Mutex
	models   map[string]*model // every model the repository has touched
	stopping bool
	busy     sync.WaitGroup // loads, unloads and drains in flight
	// pending are the on-demand loads in flight, by model name.
	pending map[string]*pendingLoad
	// started is when the repository was created: the origin of the
	// models' last-use times.
	started time.Time
}

// pendingLoad is one on-demand load that requests wait for.
type pendingLoad struct {
	done chan struct{}
	err  error // set before done closes
}

// readiness is the server's State with its reason.
type readiness struct {
	state  serving.State
	reason string
}

// servedModel is one model's ready versions, newest first.
type servedModel struct {
	versions []*version
	m        *model
}

// model is one model of the repository and its versions.
type model struct {
	name string
	// op serialises loads and unloads of this model.
	op sync.Mutex
	// versions by version string; guarded by Repository.mu.
	versions map[string]*version
	// stamp is what the model's files looked like when last loaded (poll).
	stamp string
	// used is when a request last looked the model up (nanoseconds since
	// Repository.started), for least-recently-used eviction.
	used atomic.Int64
	// failedAt and failure are the last on-demand load's failure: requests
	// get it for a while instead of loading a broken model again and again.
	// Guarded by Repository.mu.
	failedAt time.Time
	failure  error
}

// version is one version of a model: its host while loaded, its state and
// the reason it is not ready.
type version struct {
	name, version string
	host          *modelhost.Host
	state         string
	reason        string
}

// New creates a repository; nothing loads before Start.
// sampleCacheBytes bounds the preprocessed sample pictures a repository
// keeps: 32 MiB is about 55 ImageNet-sized samples (3x224x224 float32).
const sampleCacheBytes = 32 << 20

func New(cfg Config, metrics Metrics, log *slog.Logger) (*Repository, error) {
	if len(cfg.Roots) == 0 {
		return nil, errors.New("no --model-repository given")
	}
	if n := cfg.ConfigName; n != "" && (strings.ContainsAny(n, " \t/\\\x00") || strings.HasPrefix(n, ".") || len(n) > 200) {
		return nil, fmt.Errorf("--model-config-name %q: a file name without spaces, '/' or a leading '.' (configs/<name>.pbtxt in each model's directory)", n)
	}
	for i, root := range cfg.Roots {
		abs, err := filepath.Abs(root)
		if err != nil {
			return nil, fmt.Errorf("--model-repository %s: %w", root, err)
		}
		if st, err := os.Stat(abs); err != nil || !st.IsDir() {
			return nil, fmt.Errorf("--model-repository %s is not a directory", root)
		}
		cfg.Roots[i] = abs
	}
	if cfg.Mode == "" {
		cfg.Mode = ModeNone
	}
	if cfg.PollInterval <= 0 {
		cfg.PollInterval = 15 * time.Second
	}
	if cfg.LoadWait <= 0 {
		cfg.LoadWait = 30 * time.Second
	}
	r := &Repository{cfg: cfg, metrics: metrics, log: log, models: map[string]*model{}, pending: map[string]*pendingLoad{}, started: time.Now(),
		images: imageprep.NewSampleCache(sampleCacheBytes)}
	r.served.Store(&map[string]*servedModel{})
	r.setState(serving.StateStarting, "loading the models")
	return r, nil
}

func (r *Repository) setState(st serving.State, reason string) {
	r.ready.Store(&readiness{st, reason})
	r.metrics.SetReady(st == serving.StateReady)
}

// State implements serving.Models.
func (r *Repository) State() (serving.State, string) {
	rd := r.ready.Load()
	return rd.state, rd.reason
}

// LoadsOnDemand implements serving.OnDemand: true when a request for a
// model not loaded loads it (a resident limit is set).
func (r *Repository) LoadsOnDemand() bool { return r.cfg.onDemand() }

// Names lists the model directories of the repository, sorted.
func (r *Repository) Names() ([]string, error) {
	seen := map[string]bool{}
	for _, root := range r.cfg.Roots {
		entries, err := os.ReadDir(root)
		if err != nil {
			return nil, fmt.Errorf("read the model repository %s: %w", root, err)
		}
		for _, e := range entries {
			if validName(e.Name()) == nil && r.isModelDir(filepath.Join(root, e.Name())) {
				seen[e.Name()] = true
			}
		}
	}
	return slices.Sorted(maps.Keys(seen)), nil
}

// isModelDir reports whether path is a directory (after symlinks) inside
// its root.
func (r *Repository) isModelDir(path string) bool {
	st, err := os.Stat(path)
	return err == nil && st.IsDir()
}

// validName refuses model names that are not one plain directory name.
func validName(name string) error {
	if name == "" || name == "." || name == ".." || strings.HasPrefix(name, ".") || strings.ContainsAny(name, "/\\\x00") || len(name) > 255 {
		return fmt.Errorf("%q is not a model name: a model is a directory of the repository, named without '/', '\\' or a leading '.'", name)
	}
	for _, c := range name {
		if c < 0x20 || c == 0x7f {
			return fmt.Errorf("%q is not a model name: it holds control characters", name)
		}
	}
	return nil
}

// dir finds the directory of model name in the roots, refusing one whose
// real path (symlinks followed) leaves its root, and a name that more
// than one root holds.
func (r *Repository) dir(name string) (string, error) {
	if err := validName(name); err != nil {
		return "", err
	}
	var in []string
	for _, root := range r.cfg.Roots {
		if r.isModelDir(filepath.Join(root, name)) {
			in = append(in, root)
		}
	}
	switch {
	case len(in) == 0:
		return "", errNoModel
	case len(in) > 1: // Triton refuses to guess which one is meant
		return "", fmt.Errorf("model '%s' appears in %d model repositories (%s); keep it in one", name, len(in), strings.Join(in, ", "))
	}
	root := in[0]
	p := filepath.Join(root, name)
	real, err := filepath.EvalSymlinks(p)
	if err != nil {
		return "", err
	}
	realRoot, err := filepath.EvalSymlinks(root)
	if err != nil {
		return "", err
	}
	if rel, err := filepath.Rel(realRoot, real); err != nil || !filepath.IsLocal(rel) {
		return "", fmt.Errorf("%s leads outside the model repository %s (to %s); fw serves only what lies inside it", p, root, real)
	}
	return real, nil
}

var errNoModel = errors.New("no such model in the repository")

// Start loads what the mode loads at start: every model (none, poll) or
// the --load-model ones (explicit). A model that fails to load fails Start
// with its reason, as tritonserver exits on a model that does not load
// (unless KeepGoing, its --exit-on-error=false).
// In poll mode it then watches the repository until ctx ends.
func (r *Repository) Start(ctx context.Context) error {
	names, err := r.Names()
	if err != nil {
		return err
	}
	if r.cfg.Mode == ModeExplicit || r.cfg.onDemand() {
		names = r.startModels(names)
	}
	var errs []error
	for _, name := range names {
		if r.loaded(name, "") {
			continue // an ensemble's model, loaded with it
		}
		if err := r.Load(ctx, name, serving.LoadOptions{}); err != nil {
			if me, ok := serving.AsModelError(err); ok && me.Kind == serving.ModelControlDisabled {
				err = nil
			}
			if err != nil {
				errs = append(errs, err)
			}
		}
	}
	if err := errors.Join(errs...); err != nil && !r.cfg.KeepGoing {
		r.setState(serving.StateBroken, err.Error())
		return err
	}
	for _, err := range errs {
		r.log.Error("a model did not load; serving the others (--exit-on-error=false)", "error", err)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.stopping {
		return modelhost.ErrShuttingDown
	}
	r.setState(serving.StateReady, "")
	return nil
}

// startModels picks the models explicit mode loads at start.
func (r *Repository) startModels(all []string) []string {
	var out []string
	for _, n := range r.cfg.LoadModels {
		if n == "*" {
			return all
		}
		out = append(out, n)
	}
	return out
}

// Watch (poll mode) looks at the repository every PollInterval until ctx
// ends: a new model loads, a changed one reloads beside the old (which
// serves until the new one is ready; a version that fails leaves the old
// serving, with the reason in the index), a removed one unloads. A change
// is acted on once it has stayed the same for one more look, so files
// being copied are not read half-way.
func (r *Repository) Watch(ctx context.Context) {
	pending := map[string]string{}
	// waiting are the ensembles whose load failed, with the models they
	// run: one of those loading gets them tried again.
	waiting := map[string][]string{}
	t := time.NewTicker(r.cfg.PollInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		names, err := r.Names()
		if err != nil {
			r.log.Warn("poll the model repository", "err", err)
			continue
		}
		present := map[string]bool{}
		for _, name := range names {
			present[name] = true
			dir, err := r.dir(name)
			if err != nil {
				continue
			}
			st := stampDir(dir)
			r.mu.Lock()
			m := r.models[name]
			loaded := m != nil && m.stamp == st
			r.mu.Unlock()
			if loaded {
				delete(pending, name)
				continue
			}
			if pending[name] != st { // changed since the last look: wait until it settles
				pending[name] = st
				continue
			}
			delete(pending, name)
			if err := r.load(ctx, name, serving.LoadOptions{}); err != nil {
				r.log.Warn("poll: model did not load; the versions serving keep serving", "model", name, "err", err)
				r.mu.Lock()
				if m := r.models[name]; m != nil {
					m.stamp = st // do not retry the same files every poll
				}
				r.mu.Unlock()
				if steps := r.stepsOf(name); len(steps) > 0 {
					waiting[name] = steps
				}
				continue
			}
			delete(waiting, name)
			for e, steps := range waiting {
				if slices.Contains(steps, name) { // it may load now: tried at the next polls
					r.mu.Lock()
					if em := r.models[e]; em != nil {
						em.stamp = ""
					}
					r.mu.Unlock()
					delete(waiting, e)
				}
			}
		}
		r.mu.Lock()
		var gone []string
		for name, m := range r.models {
			if !present[name] && len(m.versions) > 0 && m.stamp != "" {
				gone = append(gone, name)
			}
		}
		r.mu.Unlock()
		for _, name := range gone {
			if err := r.unload(ctx, name); err != nil {
				r.log.Warn("poll: unload a removed model", "model", name, "err", err)
			}
		}
		if ctx.Err() != nil {
			return
		}
	}
}

// stampDir describes a model directory's files (names, sizes, times) so
// that poll mode sees a change.
func stampDir(dir string) string {
	var sb strings.Builder
	_ = filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		if d.IsDir() && p != dir && strings.HasPrefix(d.Name(), ".") {
			return filepath.SkipDir
		}
		info, err := os.Stat(p) // follows a symlinked file
		if err != nil {
			return nil
		}
		fmt.Fprintf(&sb, "%s|%d|%d\n", p, info.Size(), info.ModTime().UnixNano())
		return nil
	})
	return sb.String()
}

// Load implements serving.Models: Triton's repository load, refused
// unless the mode is explicit.
func (r *Repository) Load(ctx context.Context, name string, opts serving.LoadOptions) error {
	if r.cfg.Mode != ModeExplicit && r.State0() != serving.StateStarting {
		return r.controlDisabled(name)
	}
	return r.load(ctx, name, opts)
}

// State0 is the state without its reason.
func (r *Repository) State0() serving.State { s, _ := r.State(); return s }

// Unload implements serving.Models: Triton's repository unload, refused
// unless the mode is explicit.
func (r *Repository) Unload(ctx context.Context, name string, opts serving.UnloadOptions) error {
	if r.cfg.Mode != ModeExplicit {
		return r.controlDisabled(name)
	}
	var steps []string
	if opts.Dependents {
		steps = r.stepModels(name)
	}
	// The ensembles that run it cannot serve without it: they are
	// unloaded too, as Triton's are, first, so the requests they accepted
	// finish on it.
	for _, e := range r.ensemblesUsing(name) {
		if err := r.Unload(ctx, e, serving.UnloadOptions{}); err != nil {
			return err
		}
	}
	if err := r.unload(ctx, name); err != nil {
		return err
	}
	for _, m := range steps {
		if r.usedByEnsemble(m) {
			continue
		}
		if err := r.Unload(ctx, m, opts); err != nil {
			return err
		}
	}
	return nil
}

func (r *Repository) controlDisabled(name string) error {
	// Triton's sentence, whichever of none and poll the mode is.
	return &serving.ModelError{Kind: serving.ModelControlDisabled, Model: name,
		Message: fmt.Sprintf("explicit model load / unload is not allowed if polling is enabled (the model control mode is %s); start fw serve with --model-control-mode explicit to load and unload models over the API", r.cfg.Mode)}
}

// failed builds the error of a load that did not happen, with Triton's
// sentence first.
func failed(name string, err error) *serving.ModelError {
	return &serving.ModelError{Kind: serving.ModelLoadFailed, Model: name, Message: fmt.Sprintf("failed to load '%s': %v", name, err)}
}

// load loads (or reloads) every version the model's policy selects, beside
// what serves now; once all are ready they replace it, and versions no
// longer selected unload. On failure the versions serving keep serving and
// the failed version's reason is in the index.
func (r *Repository) load(ctx context.Context, name string, opts serving.LoadOptions) error {
	if err := validName(name); err != nil {
		return &serving.ModelError{Kind: serving.ModelUnknown, Model: name, Message: fmt.Sprintf("failed to load '%s': %v", name, err)}
	}
	r.mu.Lock()
	if r.stopping {
		r.mu.Unlock()
		return &serving.ModelError{Kind: serving.ModelNotReady, Model: name, Message: "the server is shutting down"}
	}
	r.busy.Add(1)
	defer r.busy.Done()
	m := r.models[name]
	if m == nil {
		m = &model{name: name, versions: map[string]*version{}}
		r.models[name] = m
	}
	r.mu.Unlock()

	// An ensemble's models load first, without its lock held: a load never
	// waits for another model's lock while holding its own.
	if dir, err := r.dir(name); err == nil {
		if cfg, _, err := r.readConfig(dir, name, opts); err == nil && isEnsemble(cfg) {
			if err := r.loadSteps(ctx, name, cfg); err != nil {
				r.markFailed(m, "", err)
				return failed(name, err)
			}
		}
	}
	m.op.Lock()
	defer m.op.Unlock()
	dir, err := r.dir(name)
	if errors.Is(err, errNoModel) {
		return &serving.ModelError{Kind: serving.ModelUnknown, Model: name,
			Message: fmt.Sprintf("failed to load '%s', failed to poll from model repository: no model directory '%s' in the model repository %s", name, name, strings.Join(r.cfg.Roots, ", "))}
	}
	if err != nil {
		return failed(name, err)
	}
	stamp := stampDir(dir)
	cfg, auto, err := r.readConfig(dir, name, opts)
	if err != nil {
		if len(opts.Config) > 0 {
			// Triton logs this sentence, and its CI looks for it.
			r.log.Warn("Invalid config override: the load request's config is refused; the model keeps what it served", "model", name, "err", err)
		}
		r.markFailed(m, "", err)
		return failed(name, err)
	}
	vers, err := versionsToLoad(dir, cfg)
	if err != nil {
		r.markFailed(m, "", err)
		return failed(name, err)
	}
	if len(vers) == 0 {
		err := fmt.Errorf("%s has no version directory (1/, 2/, ...) holding a model file", dir)
		r.markFailed(m, "", err)
		return failed(name, err)
	}
	if cfg, err = r.completePython(ctx, name, filepath.Join(dir, strconv.FormatInt(vers[0], 10)), cfg); err != nil {
		r.markFailed(m, "", err)
		return failed(name, err)
	}
	if isPython(cfg) {
		auto = false
	}
	labels, err := readLabels(dir, cfg)
	if err != nil {
		r.markFailed(m, "", err)
		return failed(name, err)
	}
	// Load every selected version beside what serves now.
	fresh := map[string]*modelhost.Host{}
	var loadErr error
	for _, v := range vers {
		vs := strconv.FormatInt(v, 10)
		r.setVersion(m, vs, nil, serving.ModelLoading, "")
		h, err := r.loadVersion(ctx, name, vs, filepath.Join(dir, vs), cfg, auto, labels)
		if err != nil {
			loadErr = fmt.Errorf("version %s: %w", vs, err)
			r.setVersion(m, vs, nil, serving.ModelUnavailable, err.Error())
			break
		}
		fresh[vs] = h
	}
	if loadErr != nil {
		for _, h := range fresh {
			r.drain(h)
		}
		r.restoreStates(m)
		return failed(name, loadErr)
	}
	// Swap: the new versions serve, the old ones drain.
	r.mu.Lock()
	if r.stopping { // Shutdown has collected the hosts to drain: these are not among them
		r.mu.Unlock()
		for _, h := range fresh {
			r.drain(h)
		}
		return &serving.ModelError{Kind: serving.ModelNotReady, Model: name, Message: "the server is shutting down", RetryAfter: 1}
	}
	old := m.versions
	m.versions = map[string]*version{}
	for vs, h := range fresh {
		m.versions[vs] = &version{name: name, version: vs, host: h, state: serving.ModelReady}
	}
	for vs, v := range old {
		if _, kept := fresh[vs]; !kept && v.host == nil && v.state != serving.ModelReady {
			continue // an earlier failure of a version no longer selected
		}
		if _, kept := fresh[vs]; !kept {
			m.versions[vs] = &version{name: name, version: vs, state: serving.ModelUnavailable, reason: "unloaded"}
		}
	}
	m.stamp = stamp
	r.publishLocked()
	r.mu.Unlock()
	for vs, v := range old {
		if v.host != nil {
			if _, kept := fresh[vs]; !kept {
				r.metrics.Forget(name, vs)
			}
			r.drain(v.host)
		}
	}
	return nil
}

// readConfig reads the model's configuration: the load's override, else
// config.pbtxt, else (auto-complete) an empty one completed from the file.
// checkCache refuses a configuration that enables the response cache
// where the server has none, or for a model whose answers depend on more
// than its request (a stateful or decoupled one).
func (r *Repository) checkCache(cfg *pb.ModelConfig) error {
	if !cfg.GetResponseCache().GetEnable() {
		return nil
	}
	switch {
	case cfg.GetSequenceBatching() != nil:
		return errors.New("response_cache enable: a stateful model's answers depend on its sequence's earlier requests and cannot be cached")
	case cfg.GetModelTransactionPolicy().GetDecoupled():
		return errors.New("response_cache enable: a decoupled model's answers are not cached (as in Triton)")
	}
	return nil
}

// setCache gives inst the response cache when cfg enables it (checkCache
// has allowed it) and the server has one: as Triton does, a model that
// enables it on a server without one loads and answers uncached (logged).
// An ensemble running a stateful model is refused: its answers depend on
// the sequence.
func (r *Repository) setCache(inst *serving.Instance, cfg *pb.ModelConfig) error {
	if !cfg.GetResponseCache().GetEnable() {
		return nil
	}
	inst.Config.ResponseCache = true
	switch {
	case inst.StatefulSteps:
		return errors.New("response_cache enable: the ensemble runs a stateful model, whose answers depend on its sequence's earlier requests; they cannot be cached")
	case r.cfg.ResponseCache == nil:
		r.log.Warn("response_cache is enabled but the server has no response cache: answers are not cached; start fw serve with --cache-config local,size=BYTES", "model", inst.Name(), "version", inst.Version())
		return nil
	}
	inst.Cache, inst.CacheGeneration = r.cfg.ResponseCache, r.cfg.ResponseCache.NextGeneration()
	return nil
}

// configPath is the configuration file of the model in dir: its
// configs/<ConfigName>.pbtxt when ConfigName is set and the model has one,
// else its config.pbtxt, as tritonserver reads them.
func (r *Repository) configPath(dir string) string {
	if r.cfg.ConfigName != "" {
		p := filepath.Join(dir, "configs", r.cfg.ConfigName+".pbtxt")
		if st, err := os.Stat(p); err == nil && st.Mode().IsRegular() {
			return p
		}
	}
	return filepath.Join(dir, "config.pbtxt")
}

func (r *Repository) readConfig(dir, name string, opts serving.LoadOptions) (*pb.ModelConfig, bool, error) {
	var cfg *pb.ModelConfig
	var err error
	switch {
	case len(opts.Config) > 0:
		if cfg, err = parseConfig(opts.Config, true); err != nil {
			return nil, false, fmt.Errorf("the load request's config: %w", err)
		}
	default:
		path := r.configPath(dir)
		data, rerr := readBounded(path)
		switch {
		case errors.Is(rerr, os.ErrNotExist):
			if r.cfg.DisableAutoComplete {
				return nil, false, fmt.Errorf("%s has no config.pbtxt and auto-complete is disabled (--disable-auto-complete-config)", dir)
			}
			cfg = &pb.ModelConfig{}
		case rerr != nil:
			return nil, false, rerr
		default:
			if cfg, err = parseConfig(data, false); err != nil {
				return nil, false, fmt.Errorf("%s: %w", path, err)
			}
		}
	}
	if cfg.GetName() != "" && cfg.GetName() != name {
		return nil, false, fmt.Errorf("the configuration names the model %q but its directory is %q; they must agree", cfg.GetName(), name)
	}
	if err := checkPlatform(cfg); err != nil {
		return nil, false, err
	}
	if err := r.checkCache(cfg); err != nil {
		return nil, false, err
	}
	if mbs := cfg.GetMaxBatchSize(); mbs < 0 || mbs > maxBatchSize {
		return nil, false, fmt.Errorf("max_batch_size %d is out of range 0..%d", mbs, maxBatchSize)
	}
	for _, g := range cfg.GetInstanceGroup() {
		if g.GetCount() < 0 || g.GetCount() > 64 {
			return nil, false, fmt.Errorf("instance_group count %d is out of range 1..64", g.GetCount())
		}
		if k := g.GetKind(); k != pb.ModelInstanceGroup_KIND_AUTO && k != pb.ModelInstanceGroup_KIND_CPU && k != pb.ModelInstanceGroup_KIND_GPU {
			return nil, false, fmt.Errorf("instance_group kind %s is not supported; use KIND_CPU, KIND_GPU or KIND_AUTO", k)
		}
	}
	if db := cfg.GetDynamicBatching(); db != nil {
		if d := db.GetMaxQueueDelayMicroseconds(); d > uint64(time.Minute/time.Microsecond) {
			return nil, false, fmt.Errorf("dynamic_batching max_queue_delay_microseconds %d is over a minute", d)
		}
		for _, p := range db.GetPreferredBatchSize() {
			if p <= 0 || (cfg.GetMaxBatchSize() > 0 && p > cfg.GetMaxBatchSize()) {
				return nil, false, fmt.Errorf("dynamic_batching preferred_batch_size %d must be within 1..max_batch_size (%d)", p, cfg.GetMaxBatchSize())
			}
		}
		if err := checkQueues(db, name); err != nil {
			return nil, false, err
		}
	}
	if _, err := holdWhenIdle(cfg); err != nil {
		return nil, false, err
	}
	auto := len(opts.Config) == 0 && cfg.GetPlatform() == "" && cfg.GetBackend() == "" && len(cfg.GetInput()) == 0 && len(cfg.GetOutput()) == 0 && cfg.GetMaxBatchSize() == 0 && cfg.GetDynamicBatching() == nil && cfg.GetSequenceBatching() == nil
	return cfg, auto, nil
}

// readBounded reads a small file, refusing a large one.
func readBounded(path string) ([]byte, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	if st.Size() > maxConfigBytes {
		return nil, fmt.Errorf("%s is %d bytes; a configuration is at most %d", path, st.Size(), maxConfigBytes)
	}
	return os.ReadFile(path)
}

// readLabels reads the label files the configuration's outputs name, from
// the model's directory.
func readLabels(dir string, cfg *pb.ModelConfig) (map[string]string, error) {
	out := map[string]string{}
	for _, o := range cfg.GetOutput() {
		name := o.GetLabelFilename()
		if name == "" {
			continue
		}
		if !filepath.IsLocal(name) {
			return nil, fmt.Errorf("output %q: label_filename %q must name a file inside the model's directory", o.GetName(), name)
		}
		data, err := readBounded(filepath.Join(dir, name))
		if err != nil {
			return nil, fmt.Errorf("output %q: label_filename: %w", o.GetName(), err)
		}
		out[name] = string(data)
	}
	return out, nil
}

// loadVersion loads one version into a host of its own and starts it.
func (r *Repository) loadVersion(ctx context.Context, name, vs, vdir string, cfg *pb.ModelConfig, auto bool, labels map[string]string) (*modelhost.Host, error) {
	if isEnsemble(cfg) {
		return r.loadEnsemble(ctx, name, vs, vdir, cfg, labels)
	}
	if isPython(cfg) {
		return r.loadPython(ctx, name, vs, vdir, cfg, labels)
	}
	path, err := modelFile(vdir, cfg)
	if err != nil {
		return nil, err
	}
	if err := checkRaggedConfig(cfg); err != nil {
		return nil, err
	}
	bc := r.batching(cfg, auto)
	seq, err := sequenceConfig(name, filepath.Dir(vdir), cfg)
	if err != nil {
		return nil, err
	}
	eo := r.cfg.Engine
	eo.SizedOutputs = usesRagged(cfg) // a flat input's length may happen to equal the batch
	count := 0
	for _, g := range cfg.GetInstanceGroup() {
		count += int(max(1, g.GetCount()))
		if g.GetKind() == pb.ModelInstanceGroup_KIND_GPU {
			if _, ok := eo.Device.CUDAIndex(); !ok {
				return nil, fmt.Errorf("instance_group asks for KIND_GPU but fw serve runs on %q; start it with --device cuda or use KIND_CPU", eo.Device)
			}
			if len(g.GetGpus()) > 0 {
				eo.Device = engine.Device(fmt.Sprintf("cuda:%d", g.GetGpus()[0]))
			}
		}
	}
	oneThread := eo.Threads == 0 // fw's choice: a small model may do better with one (modelhost.Config.TryOneThread)
	if eo.Threads == 0 {
		cpus := r.cfg.CPUs
		if cpus <= 0 {
			cpus = engine.AvailableCPUs()
		}
		eo.Threads = max(1, cpus/max(1, count)) // the engine's own default without instance groups
	}
	if count > 0 {
		bc.Instances = count
	}
	// Triton's onnxruntime backend parameter (fw applies it to every engine):
	// the intra-op threads of each instance; 0 keeps fw's choice.
	if p, ok := cfg.GetParameters()["intra_op_thread_count"]; ok {
		n, err := strconv.Atoi(strings.TrimSpace(p.GetStringValue()))
		if err != nil || n < 0 || n > 1024 {
			return nil, fmt.Errorf("parameters intra_op_thread_count is %q: it must be a whole number of threads from 0 (fw's choice) to 1024", p.GetStringValue())
		}
		if n > 0 {
			eo.Threads, oneThread = n, false
		}
	}
	if unused := unusedParameters(cfg); len(unused) > 0 {
		r.log.Warn("the configuration's parameters fw does not act on, for an ONNX or TorchScript model, are only reported in its config (of the onnxruntime backend's options fw reads intra_op_thread_count)",
			"model", name, "version", vs, "parameters", unused)
	}
	h := modelhost.New(modelhost.Config{
		Path: path, Engine: eo, Batcher: bc, SkipWarmup: r.cfg.SkipWarmup, Name: name, Version: vs, Tracer: r.cfg.Tracer,
		TryOneThread: oneThread, Threads: &r.threads,
		ImageSamples: r.images,
		Batching: func(m *engine.Model, bc *batcher.Config) error {
			rg, err := resolveRagged(cfg, m)
			if rg != nil {
				bc.Ragged = rg.batcher
			}
			return err
		},
		Prepare: func(inst *serving.Instance) error {
			rg, err := resolveRagged(cfg, inst.Model)
			if err != nil {
				return err
			}
			if rg != nil {
				inst.Ragged = rg.serving // before describe: clients' tensors are what the configuration lists
			}
			if seq != nil {
				sc := *seq
				sc.Slots *= max(1, inst.Batcher.Config().Instances) // per engine instance, as Triton's
				if slotted(cfg) {
					sc.Direct = r.directConfig(cfg, max(1, inst.Batcher.Config().Instances))
				}
				if err := checkEngineTakes(&sc, inst.Model); err != nil {
					return err
				}
				b, err := sequence.New(sc, inst.Model.Inputs(), inst.Model.Outputs(), cfg.GetMaxBatchSize() > 0, r.log)
				if err != nil {
					return err
				}
				inst.Sequences = b
			}
			c, reshape, err := describe(inst, cfg, auto, labels)
			if err != nil {
				if inst.Sequences != nil {
					inst.Sequences.Close()
					inst.Sequences = nil
				}
				return err
			}
			raggedJSON(cfg, &c)
			inst.Config, inst.Reshape = c, reshape
			return r.setCache(inst, cfg)
		},
	}, hostMetrics{r.metrics}, r.log)
	if err := h.Start(ctx); err != nil {
		_ = h.Shutdown(context.Background(), 30*time.Second)
		return nil, err
	}
	return h, nil
}

// batching is the batcher configuration of a model: the server's
// defaults, overridden by the configuration's max_batch_size and its
// dynamic or sequence batching (Triton's default scheduler, which never
// waits for more work, when it has neither).
func (r *Repository) batching(cfg *pb.ModelConfig, auto bool) batcher.Config {
	bc := r.cfg.Batcher
	// A configuration that lists no tensors and no max_batch_size has its
	// batching completed from the file, as Triton's auto-complete does.
	if !auto && !batchingFromFile(cfg) {
		if mbs := int(cfg.GetMaxBatchSize()); mbs > 0 {
			bc.MaxBatchRows = mbs
		} else {
			bc.Unbatched = true // max_batch_size 0: each request is the model's whole input
		}
		switch {
		case cfg.GetDynamicBatching() != nil:
			db := cfg.GetDynamicBatching()
			bc.MaxDelay = time.Duration(db.GetMaxQueueDelayMicroseconds()) * time.Microsecond
			bc.Queues = queues(db)
			bc.PreserveOrdering = db.GetPreserveOrdering() && !cfg.GetModelTransactionPolicy().GetDecoupled() // a decoupled model's responses stream as they come
			if total := queueSizes(bc.Queues); total > 0 {
				bc.MaxQueue = total // the policies' sizes bound the queue (and its reported capacity)
			}
			// Triton's holding: a batch short of a preferred size (or, with
			// none, of max_batch_size) waits up to max_queue_delay_microseconds,
			// idle engine or not, unless the configuration asks for fw's
			// way (an idle engine runs what is queued at once).
			bc.PreferredSizes = nil
			for _, p := range db.GetPreferredBatchSize() {
				bc.PreferredSizes = append(bc.PreferredSizes, int(p))
			}
			if hold, _ := holdWhenIdle(cfg); hold && len(bc.PreferredSizes) == 0 && bc.MaxDelay > 0 && !bc.Unbatched {
				bc.PreferredSizes = []int{bc.MaxBatchRows}
			}
			bc.StartAfter = r.cfg.DelayScheduler
		case slotted(cfg): // the sequence batcher forms each batch (sequence.DirectConfig)
			bc.MaxDelay, bc.MinRows, bc.PreferredSizes = 0, 0, nil
		case cfg.GetSequenceBatching() != nil: // requests of different sequences batched as its strategy says
			bc.MaxDelay = time.Duration(queueDelay(cfg.GetSequenceBatching())) * time.Microsecond
			bc.MinRows = minSlotRows(cfg)
			bc.PreferredSizes = nil // oldest's, as its dynamic batcher takes them
			for _, p := range cfg.GetSequenceBatching().GetOldest().GetPreferredBatchSize() {
				bc.PreferredSizes = append(bc.PreferredSizes, int(p))
			}
		default:
			bc.MaxDelay = 0 // Triton's default scheduler: no waiting for more work
		}
	}
	return bc
}

// hostMetrics is what a version's host reports to: its series, and reloads;
// the server's readiness is the repository's own.
type hostMetrics struct{ m Metrics }

func (h hostMetrics) Model(name, version string) serving.ModelMetrics {
	return h.m.Model(name, version)
}
func (h hostMetrics) SetReady(bool)        {}
func (h hostMetrics) Reload(result string) { h.m.Reload(result) }

// drain shuts a host down in the background, its accepted requests answered.
func (r *Repository) drain(h *modelhost.Host) {
	r.busy.Add(1)
	go func() {
		defer r.busy.Done()
		if err := h.Shutdown(context.Background(), 30*time.Second); err != nil {
			r.log.Warn("drain a model version", "err", err)
		}
	}()
}

// setVersion records a version's state while it loads or after it failed;
// a version that serves keeps serving (its host is untouched).
func (r *Repository) setVersion(m *model, vs string, h *modelhost.Host, state, reason string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if v := m.versions[vs]; v != nil && v.host != nil {
		if state == serving.ModelUnavailable {
			v.reason = "the newest load failed, this one keeps serving: " + reason
		}
		return
	}
	m.versions[vs] = &version{name: m.name, version: vs, host: h, state: state, reason: reason}
}

// markFailed records a load that failed before any version was tried.
func (r *Repository) markFailed(m *model, _ string, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, v := range m.versions {
		if v.host != nil {
			v.reason = "the newest load failed, this one keeps serving: " + err.Error()
		}
	}
	if len(m.versions) == 0 {
		m.versions[""] = &version{name: m.name, state: serving.ModelUnavailable, reason: err.Error()}
	}
}

// restoreStates puts the versions still serving back to READY after a
// failed load (their reason says why the new one was refused).
func (r *Repository) restoreStates(m *model) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, v := range m.versions {
		if v.host != nil {
			v.state = serving.ModelReady
		}
	}
}

// unload removes every version of a model from serving and drains them.
func (r *Repository) unload(ctx context.Context, name string) error {
	r.mu.Lock()
	m := r.models[name]
	if m == nil {
		r.mu.Unlock()
		return nil // never loaded, or no such model: nothing to do, as Triton's unload answers
	}
	r.busy.Add(1)
	defer r.busy.Done()
	r.mu.Unlock()
	m.op.Lock()
	defer m.op.Unlock()
	hosts := r.takeOut(m, "unloaded")
	var errs []error
	for _, h := range hosts {
		if err := h.Shutdown(ctx, 30*time.Second); err != nil {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		r.log.Warn("unload: a version did not drain in time", "model", name, "err", err)
	}
	return nil
}

// publishLocked rebuilds the snapshot lookups read from the versions that
// serve.
func (r *Repository) publishLocked() {
	snap := make(map[string]*servedModel, len(r.models))
	for name, m := range r.models {
		var vs []*version
		for _, v := range m.versions {
			if v.host != nil {
				vs = append(vs, v)
			}
		}
		if len(vs) == 0 {
			continue
		}
		slices.SortFunc(vs, func(a, b *version) int { return cmpVersion(b.version, a.version) })
		snap[name] = &servedModel{versions: vs, m: m}
	}
	r.served.Store(&snap)
}

// cmpVersion orders versions numerically.
func cmpVersion(a, b string) int {
	x, _ := strconv.ParseInt(a, 10, 64)
	y, _ := strconv.ParseInt(b, 10, 64)
	switch {
	case x < y:
		return -1
	case x > y:
		return 1
	}
	return strings.Compare(a, b)
}

// Get implements serving.Models.
func (r *Repository) Get(name, version string) (*serving.Instance, error) {
	if e := serving.BadVersion(name, version); e != nil {
		return nil, e
	}
	snap := *r.served.Load()
	sm := snap[name]
	if sm == nil {
		if r.cfg.onDemand() {
			return r.loadOnDemand(name, version)
		}
		return nil, r.unknown(name, "")
	}
	if r.cfg.onDemand() {
		sm.m.used.Store(int64(time.Since(r.started)))
	}
	for _, v := range sm.versions {
		if version == "" || v.version == version {
			if inst := v.host.Current(); inst != nil {
				return inst, nil
			}
			if version != "" {
				break
			}
		}
	}
	if version != "" {
		for _, v := range sm.versions {
			if v.version == version {
				return nil, &serving.ModelError{Kind: serving.ModelNotReady, Model: name, Version: version, RetryAfter: 1,
					Message: fmt.Sprintf("Request for unknown model: '%s' version %s is not at ready state", name, version)}
			}
		}
		return nil, r.unknown(name, version)
	}
	return nil, &serving.ModelError{Kind: serving.ModelNotReady, Model: name, RetryAfter: 1,
		Message: fmt.Sprintf("Request for unknown model: '%s' has no available versions", name)}
}

// Ready implements serving.Models: Get's answer without its on-demand
// load. An unloaded model of an on-demand repository is ready (its next
// request loads it) unless its last on-demand load failed within
// failureMemory.
func (r *Repository) Ready(name, version string) error {
	if !r.cfg.onDemand() || (*r.served.Load())[name] != nil {
		_, err := r.Get(name, version)
		return err
	}
	if e := serving.BadVersion(name, version); e != nil {
		return e
	}
	if _, err := r.dir(name); err != nil {
		return r.unknown(name, version)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := r.recentFailure(name); err != nil {
		return err
	}
	return nil
}

// Probe implements serving.Models: Ready, then a loaded model's own check
// (serving.Instance.CheckReady). An on-demand model that is not loaded has
// nothing to check.
func (r *Repository) Probe(ctx context.Context, name, version string) error {
	if err := r.Ready(name, version); err != nil {
		return err
	}
	// The instance from the snapshot, never loaded for the probe: one
	// unloaded since Ready has nothing to check.
	sm := (*r.served.Load())[name]
	if sm == nil {
		return nil
	}
	for _, v := range sm.versions {
		if version == "" || v.version == version {
			if inst := v.host.Current(); inst != nil {
				return inst.CheckReady(ctx)
			}
		}
	}
	return nil
}

// recentFailure is the answer for a model whose last on-demand load failed
// within failureMemory, nil otherwise. r.mu is held.
func (r *Repository) recentFailure(name string) *serving.ModelError {
	m := r.models[name]
	if m == nil || m.failure == nil || time.Since(m.failedAt) >= failureMemory {
		return nil
	}
	return &serving.ModelError{Kind: serving.ModelNotReady, Model: name, RetryAfter: int(failureMemory / time.Second),
		Message: fmt.Sprintf("failed to load '%s' on demand: %v", name, m.failure)}
}

func (r *Repository) unknown(name, version string) error {
	snap := *r.served.Load()
	e := serving.ErrUnknownModel(name, version, slices.Sorted(maps.Keys(snap)))
	if _, err := r.dir(name); err == nil && version == "" {
		e.Message = fmt.Sprintf("Request for unknown model: '%s' is not found; it is in the repository but not loaded (POST /v2/repository/models/%s/load)", name, name)
	}
	return e
}

// Default implements serving.Models: the one model served.
func (r *Repository) Default() (*serving.Instance, error) {
	snap := *r.served.Load()
	if len(snap) == 1 {
		for name := range snap {
			return r.Get(name, "")
		}
	}
	if len(snap) == 0 {
		st, reason := r.State()
		if st == serving.StateStarting {
			return nil, &serving.ModelError{Kind: serving.ModelNotReady, Message: "no model is loaded yet: " + reason, RetryAfter: 1}
		}
		return nil, serving.ErrUnknownModel("", "", nil)
	}
	names := slices.Sorted(maps.Keys(snap))
	list := strings.Join(names, ", ")
	if len(names) > 20 {
		list = fmt.Sprintf("%d models (POST /v2/repository/index lists them)", len(names))
	}
	return nil, &serving.ModelError{Kind: serving.ModelAmbiguous,
		Message: "this server serves several models (" + list + "); name one with the query parameter ?model=NAME (and &version=N), or use /v2/models/NAME/infer"}
}

// Loaded implements serving.Models.
func (r *Repository) Loaded() []*serving.Instance {
	snap := *r.served.Load()
	var out []*serving.Instance
	for _, name := range slices.Sorted(maps.Keys(snap)) {
		vs := snap[name].versions
		for i := len(vs) - 1; i >= 0; i-- { // oldest first
			if inst := vs[i].host.Current(); inst != nil {
				out = append(out, inst)
			}
		}
	}
	return out
}

// Index implements serving.Models: every model directory of the
// repository, with the state of each version it has loaded or tried.
func (r *Repository) Index() []serving.ModelStatus {
	names, _ := r.Names()
	r.mu.Lock()
	defer r.mu.Unlock()
	seen := map[string]bool{}
	var out []serving.ModelStatus
	add := func(name string) {
		if seen[name] {
			return
		}
		seen[name] = true
		m := r.models[name]
		if m == nil || len(m.versions) == 0 {
			out = append(out, serving.ModelStatus{Name: name})
			return
		}
		for _, vs := range slices.SortedFunc(maps.Keys(m.versions), cmpVersion) {
			v := m.versions[vs]
			out = append(out, serving.ModelStatus{Name: name, Version: v.version, State: v.state, Reason: v.reason})
		}
	}
	for _, n := range names {
		add(n)
	}
	for _, n := range slices.Sorted(maps.Keys(r.models)) {
		if m := r.models[n]; len(m.versions) > 0 {
			add(n) // loaded, though its directory is gone (poll unloads it)
		}
	}
	return out
}

// BeginShutdown turns the server unready for good; the models keep serving
// what still arrives until Shutdown.
func (r *Repository) BeginShutdown() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.stopping = true
	r.setState(serving.StateDraining, "shutting down")
}

// Shutdown drains every model version within timeout.
func (r *Repository) Shutdown(ctx context.Context, timeout time.Duration) error {
	r.BeginShutdown()
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	r.mu.Lock()
	var hosts []*modelhost.Host
	for _, m := range r.models {
		for _, v := range m.versions {
			if v.host != nil {
				hosts = append(hosts, v.host)
			}
		}
	}
	r.mu.Unlock()
	// Ensembles drain first: their accepted requests still need the
	// models their steps run.
	var ensembles, models []*modelhost.Host
	for _, h := range hosts {
		if inst := h.Current(); inst != nil && inst.Config.Ensemble != nil {
			ensembles = append(ensembles, h)
		} else {
			models = append(models, h)
		}
	}
	var errs []error
	for _, group := range [][]*modelhost.Host{ensembles, models} {
		var wg sync.WaitGroup
		gerrs := make([]error, len(group))
		for i, h := range group {
			wg.Go(func() { gerrs[i] = h.Shutdown(ctx, timeout) })
		}
		wg.Wait()
		errs = append(errs, gerrs...)
	}
	idle := make(chan struct{})
	go func() { r.busy.Wait(); close(idle) }()
	select {
	case <-idle:
	case <-ctx.Done():
		errs = append(errs, fmt.Errorf("shutdown: a model load or drain is still running: %w", ctx.Err()))
	}
	return errors.Join(errs...)
}

// failureMemory is how long an on-demand load's failure is answered
// before the model is tried again.
const failureMemory = 10 * time.Second

// loadOnDemand loads a model of the repository that a request asked for,
// one load per model however many requests wait, then makes room by
// unloading the least recently used. The request waits at most LoadWait.
func (r *Repository) loadOnDemand(name, version string) (*serving.Instance, error) {
	if _, err := r.dir(name); err != nil {
		return nil, r.unknown(name, version)
	}
	deadline := time.Now().Add(r.cfg.LoadWait)
	for {
		inst, again, err := r.loadOnDemandOnce(name, version, deadline)
		if !again || time.Now().After(deadline) {
			return inst, err
		}
	}
}

// loadOnDemandOnce waits for one on-demand load of the model (starting it
// unless one is in flight); the bool (again) is true when the model was unloaded
// again to make room before this request could use it.
func (r *Repository) loadOnDemandOnce(name, version string, deadline time.Time) (*serving.Instance, bool, error) {
	r.mu.Lock()
	if r.stopping {
		r.mu.Unlock()
		return nil, false, &serving.ModelError{Kind: serving.ModelNotReady, Model: name, Message: "the server is shutting down", RetryAfter: 1}
	}
	if err := r.recentFailure(name); err != nil {
		r.mu.Unlock()
		return nil, false, err
	}
	p := r.pending[name]
	if p == nil {
		p = &pendingLoad{done: make(chan struct{})}
		r.pending[name] = p
		r.busy.Add(1)
		go r.runOnDemand(name, p)
	}
	r.mu.Unlock()
	t := time.NewTimer(time.Until(deadline))
	defer t.Stop()
	select {
	case <-p.done:
	case <-t.C:
		return nil, false, &serving.ModelError{Kind: serving.ModelNotReady, Model: name, RetryAfter: 1,
			Message: fmt.Sprintf("model '%s' is loading on demand and was not ready within %s; retry", name, r.cfg.LoadWait)}
	}
	if p.err != nil {
		return nil, false, &serving.ModelError{Kind: serving.ModelNotReady, Model: name, RetryAfter: int(failureMemory / time.Second),
			Message: fmt.Sprintf("failed to load '%s' on demand: %v", name, p.err)}
	}
	snap := *r.served.Load()
	if sm := snap[name]; sm != nil {
		sm.m.used.Store(int64(time.Since(r.started)))
		inst, err := r.Get(name, version)
		return inst, false, err
	}
	// Unloaded again to make room before this request could use it (more
	// models in demand than --max-resident-models): load it once more.
	return nil, true, &serving.ModelError{Kind: serving.ModelNotReady, Model: name, RetryAfter: 1,
		Message: fmt.Sprintf("model '%s' was unloaded to make room as soon as it loaded, more models are in demand than --max-resident-models allows; retry", name)}
}

// runOnDemand is the one load of a model that requests wait for.
func (r *Repository) runOnDemand(name string, p *pendingLoad) {
	defer r.busy.Done()
	err := r.load(context.Background(), name, serving.LoadOptions{})
	if err == nil {
		// The bounds hold before the requests waiting for this load are
		// answered: the least recently used models go first.
		r.mu.Lock()
		if m := r.models[name]; m != nil {
			m.used.Store(int64(time.Since(r.started)))
		}
		r.mu.Unlock()
		r.evict(name)
	}
	r.mu.Lock()
	if m := r.models[name]; m != nil {
		if err != nil {
			m.failure, m.failedAt = err, time.Now()
		} else {
			m.failure = nil
			m.used.Store(int64(time.Since(r.started)))
		}
	}
	p.err = err
	delete(r.pending, name)
	close(p.done)
	r.mu.Unlock()
}

// residentBytes is what a loaded model counts against MaxResidentBytes:
// its files' bytes times its engine instances, over its versions.
func residentBytes(sm *servedModel) int64 {
	var n int64
	for _, v := range sm.versions {
		if inst := v.host.Current(); inst != nil {
			for _, m := range inst.All() {
				n += m.Size
			}
		}
	}
	return n
}

// evict unloads the least recently used models (never keep, the one just
// loaded) until the resident ones fit the bounds. Requests already given
// an evicted model finish on it; later ones load it again.
func (r *Repository) evict(keep string) {
	for {
		snap := *r.served.Load()
		var total int64
		for _, sm := range snap {
			total += residentBytes(sm)
		}
		over := (r.cfg.MaxResidentModels > 0 && len(snap) > r.cfg.MaxResidentModels) ||
			(r.cfg.MaxResidentBytes > 0 && total > r.cfg.MaxResidentBytes)
		if !over {
			return
		}
		// The models a resident ensemble runs stay while it does.
		pinned := map[string]bool{}
		for _, sm := range snap {
			for _, v := range sm.versions {
				if inst := v.host.Current(); inst != nil {
					for _, st := range inst.Config.Ensemble {
						pinned[st.Model] = true
					}
				}
			}
		}
		victim, oldest := "", int64(math.MaxInt64)
		for name, sm := range snap {
			if u := sm.m.used.Load(); name != keep && !pinned[name] && u < oldest {
				victim, oldest = name, u
			}
		}
		if victim == "" {
			return // only keep is left: a single model larger than the bound still serves
		}
		r.log.Info("unloading the least recently used model to stay within the residency bounds", "model", victim,
			"resident", len(snap), "max_resident_models", r.cfg.MaxResidentModels, "resident_bytes", total, "max_resident_bytes", r.cfg.MaxResidentBytes)
		if !r.evictOne(victim) {
			return // shutting down: Shutdown drains every model anyway
		}
	}
}

// evictOne takes a model out of serving and drains it in the background;
// false when it did not (the server is shutting down).
func (r *Repository) evictOne(name string) bool {
	r.mu.Lock()
	m := r.models[name]
	if m == nil || r.stopping {
		r.mu.Unlock()
		return false
	}
	r.mu.Unlock()
	m.op.Lock()
	defer m.op.Unlock()
	for _, h := range r.takeOut(m, "unloaded to make room (least recently used); loads again on its next request") {
		r.drain(h)
	}
	return true
}

// takeOut takes every version of m out of serving (the caller holds m.op):
// each becomes UNAVAILABLE with reason, its metrics go, lookups stop
// finding it; it returns the hosts, for the caller to drain.
func (r *Repository) takeOut(m *model, reason string) []*modelhost.Host {
	r.mu.Lock()
	defer r.mu.Unlock()
	var hosts []*modelhost.Host
	for vs, v := range m.versions {
		if v.host != nil {
			hosts = append(hosts, v.host)
			r.metrics.Forget(m.name, vs)
		}
		m.versions[vs] = &version{name: m.name, version: vs, state: serving.ModelUnavailable, reason: reason}
	}
	m.stamp = ""
	r.publishLocked()
	return hosts
}
