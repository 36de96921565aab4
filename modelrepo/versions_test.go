package modelrepo

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/fw-serve/fw/batcher"
	"github.com/fw-serve/fw/engine"
	"github.com/fw-serve/fw/httpapi"
	"github.com/fw-serve/fw/serving"
	"github.com/prometheus/client_golang/prometheus"
)

// --disable-auto-complete-config (Config.DisableAutoComplete): a model
// directory without config.pbtxt is refused at load, saying why (and the
// index says it too), while a model with one loads; without the flag the
// same directory loads, its configuration completed from the file.
func TestDisableAutoCompleteConfig(t *testing.T) {
	root := t.TempDir()
	src := filepath.Join(samples(t), "simple")
	copyModel(t, src, root, "bare")
	if err := os.Remove(filepath.Join(root, "bare", "config.pbtxt")); err != nil {
		t.Fatal(err)
	}
	copyModel(t, src, root, "configured")
	const why = "has no config.pbtxt and auto-complete is disabled (--disable-auto-complete-config)"
	ctx := context.Background()

	t.Run("disabled", func(t *testing.T) {
		f := open(t, Config{Roots: []string{root}, Mode: ModeExplicit, DisableAutoComplete: true})
		err := f.repo.Load(ctx, "bare", serving.LoadOptions{})
		wantModelError(t, err, serving.ModelLoadFailed, "failed to load 'bare'")
		wantModelError(t, err, serving.ModelLoadFailed, why)
		_, err = f.repo.Get("bare", "")
		wantModelError(t, err, serving.ModelUnknown, "Request for unknown model")
		found := false
		for _, m := range f.repo.Index() {
			if m.Name == "bare" {
				found = true
				if m.State != serving.ModelUnavailable || !strings.Contains(m.Reason, why) {
					t.Fatalf("index: %+v", m)
				}
			}
		}
		if !found {
			t.Fatalf("bare not in the index: %+v", f.repo.Index())
		}
		// A model with its config.pbtxt loads as ever.
		if err := f.repo.Load(ctx, "configured", serving.LoadOptions{}); err != nil {
			t.Fatal(err)
		}
		if err := inferSimple(ctx, f.repo, "configured"); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("disabled at start", func(t *testing.T) {
		// Mode none loads every model at start: the server does not start,
		// as tritonserver exits on a model that does not load.
		r, err := New(Config{Roots: []string{root}, Mode: ModeNone, DisableAutoComplete: true, SkipWarmup: true,
			Engine: engine.Options{Threads: 1}, Batcher: batcher.DefaultConfig()}, httpapi.NewMetrics(prometheus.NewRegistry()), quiet())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			if err := r.Shutdown(context.Background(), time.Minute); err != nil {
				t.Errorf("shutdown: %v", err)
			}
		})
		err = r.Start(ctx)
		if err == nil || !strings.Contains(err.Error(), "failed to load 'bare'") || !strings.Contains(err.Error(), why) {
			t.Fatalf("start: %v", err)
		}
		if st, reason := r.State(); st != serving.StateBroken || !strings.Contains(reason, why) {
			t.Fatalf("state %v: %s", st, reason)
		}
	})

	t.Run("enabled", func(t *testing.T) {
		f := open(t, Config{Roots: []string{root}, Mode: ModeExplicit})
		if err := f.repo.Load(ctx, "bare", serving.LoadOptions{}); err != nil {
			t.Fatal(err)
		}
		inst, err := f.repo.Get("bare", "")
		if err != nil {
			t.Fatal(err)
		}
		if inst.Config.MaxBatchSize == 0 || len(inst.Config.Inputs) != 2 || len(inst.Config.Outputs) != 2 {
			t.Fatalf("configuration not completed from the file: %+v", inst.Config)
		}
		if err := inferSimple(ctx, f.repo, "bare"); err != nil {
			t.Fatal(err)
		}
	})
}

// version_policy: with versions 1, 2 and 3 in the model's directory, the
// default serves the newest, latest { num_versions: 2 } the two newest,
// all every one, specific the ones it names; each version served answers
// when asked for by number, the others are unknown, and a request naming
// no version gets the newest served.
func TestVersionPolicies(t *testing.T) {
	root := t.TempDir()
	src := filepath.Join(samples(t), "simple")
	policies := map[string]struct {
		policy string
		want   []string
	}{
		"v_default":  {"", []string{"3"}},
		"v_latest2":  {"version_policy: { latest: { num_versions: 2 } }", []string{"2", "3"}},
		"v_all":      {"version_policy: { all: { } }", []string{"1", "2", "3"}},
		"v_specific": {"version_policy: { specific: { versions: [ 1, 3 ] } }", []string{"1", "3"}},
	}
	for name, p := range policies {
		copyModel(t, src, root, name)
		for _, v := range []string{"2", "3"} {
			copyModel(t, filepath.Join(root, name, "1"), filepath.Join(root, name), v)
		}
		cfg := filepath.Join(root, name, "config.pbtxt")
		b, err := os.ReadFile(cfg)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(cfg, append(b, "\n"+p.policy+"\n"...), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	f := open(t, Config{Roots: []string{root}, Mode: ModeNone})
	ctx := context.Background()
	for name, p := range policies {
		for _, v := range []string{"1", "2", "3"} {
			inst, err := f.repo.Get(name, v)
			if !slices.Contains(p.want, v) {
				wantModelError(t, err, serving.ModelUnknown, fmt.Sprintf("'%s' version %s is not found", name, v))
				wantModelError(t, f.repo.Ready(name, v), serving.ModelUnknown, "not found")
				continue
			}
			if err != nil {
				t.Fatalf("%s version %s: %v", name, v, err)
			}
			if inst.Name() != name || inst.Version() != v {
				t.Fatalf("%s version %s: got %s version %s", name, v, inst.Name(), inst.Version())
			}
			if err := inferVersion(ctx, f.repo, inst); err != nil {
				t.Fatalf("%s version %s: %v", name, v, err)
			}
		}
		if inst, err := f.repo.Get(name, ""); err != nil || inst.Version() != "3" {
			t.Fatalf("%s, no version: %v %v", name, inst, err)
		}
		var loaded, indexed []string
		for _, inst := range f.repo.Loaded() {
			if inst.Name() == name {
				loaded = append(loaded, inst.Version())
			}
		}
		for _, m := range f.repo.Index() {
			if m.Name == name {
				if m.State != serving.ModelReady {
					t.Fatalf("index: %+v", m)
				}
				indexed = append(indexed, m.Version)
			}
		}
		if !slices.Equal(loaded, p.want) || !slices.Equal(indexed, p.want) {
			t.Fatalf("%s: loaded %v, index %v, want %v", name, loaded, indexed, p.want)
		}
	}
}

// inferVersion runs Triton's simple (sum and difference) on inst.
func inferVersion(ctx context.Context, r *Repository, inst *serving.Instance) error {
	out, _, err := serving.Infer(ctx, r, inst, simpleInputs(1))
	if err != nil {
		return err
	}
	for i := 0; i < 16; i++ {
		if s, d := int32(out[0].Data[i*4]), int32(out[1].Data[i*4]); s != int32(i+1) || d != int32(i-1)&0xff {
			return errors.New("wrong answer")
		}
	}
	return nil
}
