package serving

import (
	"context"
	"errors"
	"fmt"
	"strings"
)

// Models is where the transports find the models they serve: by name and
// version for the Open Inference Protocol, the one default model for the
// unprefixed routes (/predict...), the server's readiness, and Triton's
// model repository extension (index, load, unload). fw serve --model FILE
// serves One slot; --model-repository serves a modelrepo.Repository.
type Models interface {
	// Get is the instance serving version of the model name ("" for its
	// newest ready version). Its error is a *ModelError.
	Get(name, version string) (*Instance, error)
	// Ready is nil when a request for the model would be answered, without
	// loading it: a model loaded on demand (--max-resident-models) is ready
	// while unloaded, unless its last load failed. Readiness probes use it,
	// so a probe never loads a model or evicts another. Its error is a
	// *ModelError, as Get's.
	Ready(name, version string) error
	// Probe is Ready, then, for a loaded model, the model's own readiness
	// check (Instance.CheckReady: a Python model's process health and its
	// is_ready()), which ctx bounds. The model readiness endpoints use it.
	Probe(ctx context.Context, name, version string) error
	// Default is the model the unprefixed routes serve: the only one
	// loaded. With none or several, its *ModelError says which to name.
	Default() (*Instance, error)
	// State is the server's readiness and, when not ready, the reason.
	State() (State, string)
	// Index lists the repository's models and their versions' states, sorted
	// by name and version.
	Index() []ModelStatus
	// Load loads (or reloads) a model of the repository, with its
	// configuration replaced by opts.Config when given. Its error is a
	// *ModelError.
	Load(ctx context.Context, name string, opts LoadOptions) error
	// Unload unloads every version of a model; requests already accepted
	// finish first. Its error is a *ModelError.
	Unload(ctx context.Context, name string, opts UnloadOptions) error
	// Loaded lists the ready instances, sorted by name and version (for the
	// statistics of every model and the OpenAPI document).
	Loaded() []*Instance
}

// Versions are the loaded versions of the model name, in Loaded's order
// (the statistics of a model asked for without a version: all of them).
func Versions(models Models, name string) []*Instance {
	var out []*Instance
	for _, inst := range models.Loaded() {
		if inst.Name() == name {
			out = append(out, inst)
		}
	}
	return out
}

// OnDemand is implemented by Models that may load a model on the request
// that names it (a repository with a resident limit: --max-resident-models
// or --max-resident-bytes). When LoadsOnDemand is true, any model of the
// repository may be named, not only the Loaded ones (the OpenAPI document
// says so instead of listing only those).
type OnDemand interface {
	LoadsOnDemand() bool
}

// LoadOptions are what a repository load request may change.
type LoadOptions struct {
	// Config, when set, is a model configuration in JSON (Triton's
	// ModelConfig) used instead of the model's config.pbtxt.
	Config []byte
}

// UnloadOptions are what a repository unload request may ask for.
type UnloadOptions struct {
	// Dependents unloads, with an ensemble, the models its steps run that
	// no other loaded ensemble runs (Triton's unload_dependents).
	Dependents bool
}

// Model states as Triton's repository index reports them.
const (
	ModelReady       = "READY"
	ModelUnavailable = "UNAVAILABLE"
	ModelLoading     = "LOADING"
	ModelUnloading   = "UNLOADING"
)

// ModelStatus is one entry of the repository index: a model version and
// its state, with the reason when it is not ready. A model never loaded
// has neither version nor state.
type ModelStatus struct {
	Name    string `json:"name"`
	Version string `json:"version,omitempty"`
	State   string `json:"state,omitempty"`
	Reason  string `json:"reason,omitempty"`
}

// ModelErrorKind is what went wrong finding, loading or unloading a model.
type ModelErrorKind int

// The kinds of *ModelError.
const (
	// ModelUnknown: no model (or version) of that name is served.
	ModelUnknown ModelErrorKind = iota + 1
	// ModelNotReady: the model exists but no version is ready now.
	ModelNotReady
	// ModelControlDisabled: the control mode forbids loading and unloading.
	ModelControlDisabled
	// ModelLoadFailed: the model did not load; the message has the reason.
	ModelLoadFailed
	// ModelAmbiguous: several models are served and the request named none.
	ModelAmbiguous
	// ModelRepositoryFailed: a load failed before the model was looked at,
	// as Triton's "failed to poll from model repository" (its status is
	// INTERNAL: HTTP 500, gRPC INTERNAL).
	ModelRepositoryFailed
)

// maxNameBytes is the longest file name component (Linux's NAME_MAX).
const maxNameBytes = 255

// FileOverride refuses a load request's parameter key "file:<path>", a
// model file sent with the load (Triton's file override): fw loads model
// files from the repository only. A path with a component longer than a
// file name can be is refused as Triton refuses it, which fails writing it
// (ModelRepositoryFailed); any other, as a failed load.
func FileOverride(model, key string) *ModelError {
	const advice = "fw does not accept model files over the API; put the file in the model repository and load it by name"
	shown := key
	if len(shown) > 80 {
		shown = shown[:80] + "..."
	}
	for _, c := range strings.Split(strings.TrimPrefix(key, "file:"), "/") {
		if len(c) > maxNameBytes {
			return &ModelError{Kind: ModelRepositoryFailed, Model: model,
				Message: fmt.Sprintf("failed to poll from model repository: the load parameter %q names a path with a component of %d bytes, longer than a file name can be (%d); besides, %s", shown, len(c), maxNameBytes, advice)}
		}
	}
	return &ModelError{Kind: ModelLoadFailed, Model: model,
		Message: fmt.Sprintf("failed to load '%s': the load parameter %q overrides a model file, which fw does not accept over the API; put the file in the model repository and load it by name", model, shown)}
}

// ModelError is a failure to find, load or unload a model. Message begins
// with Triton's sentence where Triton's clients match on it ("Request for
// unknown model: ...", "failed to load '...'").
type ModelError struct {
	Kind    ModelErrorKind
	Model   string
	Version string
	Message string
	// RetryAfter, when positive, is when the model may be ready (seconds).
	RetryAfter int
	// Check marks a loaded model whose own readiness check failed
	// (Instance.CheckReady), which the transports log, as Triton does.
	Check bool
}

func (e *ModelError) Error() string { return e.Message }

// FailedCheck is the message of err when it is a loaded model's failed
// readiness check (ModelError.Check).
func FailedCheck(err error) (string, bool) {
	me, ok := AsModelError(err)
	if !ok || !me.Check {
		return "", false
	}
	return me.Message, true
}

// ErrUnknownModel builds the error for a model (version) that is not served;
// served names the models that are, for the message.
func ErrUnknownModel(name, version string, served []string) *ModelError {
	msg := fmt.Sprintf("Request for unknown model: '%s' is not found", name)
	if version != "" {
		msg = fmt.Sprintf("Request for unknown model: '%s' version %s is not found", name, version)
	}
	switch {
	case len(served) == 0:
		msg += "; no model is loaded"
	case len(served) <= 20:
		msg += "; the models served are " + strings.Join(served, ", ")
	default:
		msg += fmt.Sprintf("; %d models are served, POST /v2/repository/index lists them", len(served))
	}
	return &ModelError{Kind: ModelUnknown, Model: name, Version: version, Message: msg}
}

// BadVersion is the error for a version string that is not a version
// number, in Triton's words; nil for "" (the newest) and a number.
func BadVersion(name, version string) *ModelError {
	if version == "" {
		return nil
	}
	for _, c := range version {
		if c < '0' || c > '9' {
			return &ModelError{Kind: ModelUnknown, Model: name, Version: version,
				Message: fmt.Sprintf("failed to get model version from specified version string '%s' (details: a version is a non-negative integer); ask for a version number of model '%s', or none for its newest", version, name)}
		}
	}
	return nil
}

// AsModelError returns err's *ModelError, if it is one.
func AsModelError(err error) (*ModelError, bool) {
	var me *ModelError
	ok := errors.As(err, &me)
	return me, ok
}

// One serves a single slot (fw serve --model FILE) as Models: the model it
// holds is the default and the only one Get finds; the repository has no
// other model to load, so Load and Unload are refused.
func One(slot Slot) Models { return one{slot} }

type one struct{ slot Slot }

func (o one) State() (State, string) { return o.slot.State() }

func (o one) Default() (*Instance, error) {
	if inst := o.slot.Current(); inst != nil {
		return inst, nil
	}
	st, reason := o.slot.State()
	return nil, &ModelError{Kind: ModelNotReady, Message: fmt.Sprintf("no model is loaded yet (%s): %s", st, reason), RetryAfter: 1}
}

func (o one) Get(name, version string) (*Instance, error) {
	if e := BadVersion(name, version); e != nil {
		return nil, e
	}
	inst, err := o.Default()
	if err != nil {
		return nil, err
	}
	if name != inst.Name() {
		e := ErrUnknownModel(name, "", []string{inst.Name()})
		return nil, e
	}
	if version != "" && version != inst.Version() {
		return nil, &ModelError{Kind: ModelUnknown, Model: name, Version: version,
			Message: fmt.Sprintf("Request for unknown model: '%s' version %s is not found; this server serves version %s of %s", name, version, inst.Version(), name)}
	}
	return inst, nil
}

func (o one) Ready(name, version string) error {
	_, err := o.Get(name, version)
	return err
}

func (o one) Probe(ctx context.Context, name, version string) error {
	inst, err := o.Get(name, version)
	if err != nil {
		return err
	}
	return inst.CheckReady(ctx)
}

func (o one) Loaded() []*Instance {
	if inst := o.slot.Current(); inst != nil {
		return []*Instance{inst}
	}
	return nil
}

func (o one) Index() []ModelStatus {
	inst := o.slot.Current()
	if inst == nil {
		return nil
	}
	st, reason := o.slot.State()
	s := ModelStatus{Name: inst.Name(), Version: inst.Version(), State: ModelReady}
	if !st.Serving() {
		s.State, s.Reason = ModelUnavailable, reason
	}
	return []ModelStatus{s}
}

func (o one) control(name string) error {
	return &ModelError{Kind: ModelControlDisabled, Model: name,
		Message: "explicit model load / unload is not allowed if polling is enabled (this server was started with --model FILE); start it with --model-repository DIR --model-control-mode explicit to load and unload models"}
}

func (o one) Load(_ context.Context, name string, _ LoadOptions) error { return o.control(name) }
func (o one) Unload(_ context.Context, name string, _ UnloadOptions) error {
	return o.control(name)
}
