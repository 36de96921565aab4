// Package serving is what the model server's transports share: the slot
// holding the model being served and its readiness (filled by modelhost,
// read by httpapi and grpcapi), the rules a request's tensors follow
// whatever carries them (admit.go: which inputs and outputs it names, their
// datatypes; each transport decodes its encoding and asks these), one
// inference call through the batcher with its timings, checked once, the
// Triton-style statistics both transports report, and the classification of
// a failed call that each transport maps to its own status codes.
package serving

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/fw-serve/fw/batcher"
	"github.com/fw-serve/fw/engine"
	"github.com/fw-serve/fw/imageprep"
	"github.com/fw-serve/fw/respcache"
	"github.com/fw-serve/fw/sequence"
)

// Instance is one loaded model with the batcher in front of it. A reload
// swaps the whole instance.
type Instance struct {
	// Model is the model served, for its metadata and specs; with several
	// engine instances (--instances), the first of them.
	Model *engine.Model
	// Batcher runs the engine calls, on Model or on one of Models each.
	Batcher *batcher.Batcher
	// Models are all the engine instances the batcher's workers use (Model
	// among them), each closed when the instance is drained; nil means just
	// Model.
	Models []*engine.Model
	// Image is the model's preprocessing.image recipe compiled once for
	// /predict/image (nil: compiled per request, or no recipe).
	Image *imageprep.Pipeline
	// Stats are the model version's inference statistics (Triton's
	// statistics extension), kept across reloads of the same version.
	Stats *Stats
	// ServedName and ServedVersion, when set, are the name and version the
	// model is served under (a repository's directory names); else the
	// model file's own (fw.json, or the file name and "1").
	ServedName, ServedVersion string
	// Config is the model configuration reported by Triton's configuration
	// extension: config.pbtxt as applied, or completed from the file.
	Config ModelConfig
	// Reshape, when set, maps the shapes clients use (the configuration's
	// dims) to the model's own (its reshape) and back.
	Reshape *Reshape
	// Ragged, when set, is what ragged batching changes between the
	// clients' tensors and the model's (never with Reshape).
	Ragged *Ragged
	// Sequences, when set, is the model's sequence batcher (a stateful
	// model: config.pbtxt's sequence_batching). Its requests name their
	// sequence (EnterSequence, InferSequence); it is closed when the
	// instance is drained.
	Sequences *sequence.Batcher
	// Order, when set, orders the requests of each sequence sent to a
	// model that passes sequences on to others (an ensemble): it takes
	// sequence parameters without a sequence batcher of its own.
	Order *sequence.Order
	// StatefulSteps marks an ensemble that runs a stateful model (sequence
	// batching) in a step, itself or in an ensemble it runs: each of its
	// requests runs on its own, with its sequence.
	StatefulSteps bool
	// Cache, when set, keeps the model's answers (config.pbtxt's
	// response_cache { enable: true }, with the server's --cache-config):
	// a request seen before is answered from it without running the model.
	Cache *respcache.Cache
	// CacheGeneration tells this load's cached answers from an earlier
	// load's of the same version (respcache.Cache.NextGeneration).
	CacheGeneration uint64
}

// Inputs are the inputs a client sends: the model's, less those a
// sequence batcher fills (control inputs and implicit state), with the
// configuration's dims where it reshapes them.
func (i *Instance) Inputs() []engine.TensorSpec {
	if i.Sequences != nil {
		return i.Sequences.Inputs()
	}
	if i.Reshape != nil {
		return i.Reshape.inputs
	}
	if i.Ragged != nil {
		return i.Ragged.inputs
	}
	return i.Model.Inputs()
}

// Outputs are the outputs a client may request: the model's, less the
// implicit state a sequence batcher keeps.
func (i *Instance) Outputs() []engine.TensorSpec {
	if i.Sequences != nil {
		return i.Sequences.Outputs()
	}
	if i.Reshape != nil {
		return i.Reshape.outputs
	}
	if i.Ragged != nil {
		return i.Ragged.outputs
	}
	return i.Model.Outputs()
}

// Name is the name the model is served under.
func (i *Instance) Name() string {
	if i.ServedName != "" {
		return i.ServedName
	}
	return i.Model.Name()
}

// Version is the version the model is served under.
func (i *Instance) Version() string {
	if i.ServedVersion != "" {
		return i.ServedVersion
	}
	return i.Model.Version()
}

// All returns every engine instance: Models, or Model alone.
func (i *Instance) All() []*engine.Model {
	if len(i.Models) > 0 {
		return i.Models
	}
	return []*engine.Model{i.Model}
}

// CheckReady asks each engine instance whether it is ready beyond having
// loaded (engine.Model.CheckReady): nil when all are; else a ModelNotReady
// *ModelError saying which is not, and why.
func (i *Instance) CheckReady(ctx context.Context) error {
	all := i.All()
	errs := make([]error, len(all))
	if len(all) == 1 {
		errs[0] = all[0].CheckReady(ctx)
	} else {
		var wg sync.WaitGroup
		for k, m := range all { // at once: each may take its backend's whole bound
			wg.Go(func() { errs[k] = m.CheckReady(ctx) })
		}
		wg.Wait()
	}
	for _, err := range errs {
		if err != nil {
			return &ModelError{Kind: ModelNotReady, Model: i.Name(), Version: i.Version(), RetryAfter: 1, Check: true,
				Message: fmt.Sprintf("Model '%s' version %s is not ready: %v", i.Name(), i.Version(), err)}
		}
	}
	return nil
}

// Slot is where a transport finds the model it serves and its readiness.
// The model's lifecycle owns it (modelhost.Host loads, warms up, swaps and
// drains instances, and decides readiness); transports only read it, once
// per request.
type Slot interface {
	// Current is the instance serving now, nil while none is.
	Current() *Instance
	// State is the readiness and, when not ready, the reason /health shows.
	State() (State, string)
}

// State is the server's readiness.
type State int32

// Server states, as /health reports them.
const (
	StateStarting State = iota
	StateReady
	StateDraining
	StateBroken
)

func (s State) String() string {
	return [...]string{"starting", "ready", "draining", "broken"}[s]
}

// Serving reports whether predictions are answered in state s: when ready,
// and while draining (only the health probes turn unready then, so load
// balancers stop sending before the listener closes).
func (s State) Serving() bool { return s == StateReady || s == StateDraining }

// ModelMetrics are the Prometheus series of one model version (labelled by
// model and version): what its batcher reports, its queue's capacity and
// its loads. httpapi.Metrics.Model makes them.
type ModelMetrics interface {
	batcher.Stats
	SetQueueCapacity(n int)
	Loaded(format, device string, took time.Duration)
}
