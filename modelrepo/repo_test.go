package modelrepo

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fw-serve/fw/batcher"
	"github.com/fw-serve/fw/engine"
	"github.com/fw-serve/fw/httpapi"
	"github.com/fw-serve/fw/internal/testleak"
	"github.com/fw-serve/fw/internal/testmodels"
	"github.com/fw-serve/fw/serving"
	"github.com/prometheus/client_golang/prometheus"
)

func TestMain(m *testing.M) { testleak.Main(m) }

// samples is the Triton sample repository `make models` writes
// (python/fw/triton_samples.py).
func samples(t testing.TB) string {
	t.Helper()
	dir := filepath.Join(testmodels.Dir(t), "triton")
	if _, err := os.Stat(filepath.Join(dir, "simple", "1", "model.onnx")); err != nil {
		testmodels.Require(t, "Triton sample repository missing in "+dir+": run `make models`")
	}
	return dir
}

// copyModel copies one sample model directory into root (as name).
func copyModel(t testing.TB, src, root, name string) {
	t.Helper()
	err := filepath.WalkDir(src, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		dst := filepath.Join(root, name, rel)
		if d.IsDir() {
			return os.MkdirAll(dst, 0o755)
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		if d.Name() == "config.pbtxt" { // the copy has its own name
			b = []byte(strings.Replace(string(b), `name: "`+filepath.Base(src)+`"`, `name: "`+name+`"`, 1))
		}
		return os.WriteFile(dst, b, 0o644)
	})
	if err != nil {
		t.Fatal(err)
	}
}

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

type fixture struct {
	repo *Repository
	reg  *prometheus.Registry
}

// open creates a repository over roots and starts it; it is shut down
// (every version drained) when the test ends.
func open(t testing.TB, cfg Config) *fixture {
	t.Helper()
	return openLogged(t, cfg, quiet())
}

// openLogged is open with the repository's log going to log.
func openLogged(t testing.TB, cfg Config, log *slog.Logger) *fixture {
	t.Helper()
	cfg.Engine = engine.Options{Threads: 1}
	if reflect.DeepEqual(cfg.Batcher, batcher.Config{}) {
		cfg.Batcher = batcher.DefaultConfig()
	}
	cfg.SkipWarmup = true
	reg := prometheus.NewRegistry()
	r, err := New(cfg, httpapi.NewMetrics(reg), log)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := r.Shutdown(context.Background(), time.Minute); err != nil {
			t.Errorf("shutdown: %v", err)
		}
	})
	if err := r.Start(context.Background()); err != nil {
		t.Fatalf("start: %v", err)
	}
	return &fixture{repo: r, reg: reg}
}

// simpleInputs are INPUT0 = 0..15 and INPUT1 = 1s, rows times.
func simpleInputs(rows int) []engine.Tensor {
	a, b := make([]byte, 0, rows*64), make([]byte, 0, rows*64)
	for r := 0; r < rows; r++ {
		for i := 0; i < 16; i++ {
			a = append(a, byte(i), 0, 0, 0)
			b = append(b, 1, 0, 0, 0)
		}
	}
	return []engine.Tensor{
		{DType: engine.Int32, Shape: []int64{int64(rows), 16}, Data: a},
		{DType: engine.Int32, Shape: []int64{int64(rows), 16}, Data: b},
	}
}

// inferSimple runs one request on the model name (Triton's simple: sum and
// difference) and checks the answer.
func inferSimple(ctx context.Context, r *Repository, name string) error {
	inst, err := r.Get(name, "")
	if err != nil {
		return err
	}
	out, _, err := serving.Infer(ctx, r, inst, simpleInputs(1))
	if err != nil {
		return err
	}
	for i := 0; i < 16; i++ {
		if s, d := int32(out[0].Data[i*4]), int32(out[1].Data[i*4]); s != int32(i+1) || d != int32(i-1)&0xff {
			return fmt.Errorf("%s element %d: sum %d diff %d", name, i, s, d)
		}
	}
	return nil
}

func wantModelError(t testing.TB, err error, kind serving.ModelErrorKind, text string) {
	t.Helper()
	me, ok := serving.AsModelError(err)
	if !ok || me.Kind != kind || !strings.Contains(me.Message, text) {
		t.Fatalf("got %v, want a model error of kind %d saying %q", err, kind, text)
	}
}

func TestExplicitLoadUnloadIndex(t *testing.T) {
	f := open(t, Config{Roots: []string{samples(t)}, Mode: ModeExplicit, LoadModels: []string{"simple", "nobatch"}})
	r := f.repo
	if st, _ := r.State(); st != serving.StateReady {
		t.Fatalf("state %v", st)
	}
	ctx := context.Background()
	if err := inferSimple(ctx, r, "simple"); err != nil {
		t.Fatal(err)
	}
	idx := map[string]serving.ModelStatus{}
	for _, m := range r.Index() {
		idx[m.Name] = m
	}
	if idx["simple"].State != serving.ModelReady || idx["nobatch"].State != serving.ModelReady || idx["simple_int8"].State != "" || idx["simple_int8"].Name == "" {
		t.Fatalf("index %+v", r.Index())
	}
	// Several models: the unprefixed routes need a name.
	_, err := r.Default()
	wantModelError(t, err, serving.ModelAmbiguous, "?model=NAME")

	if err := r.Load(ctx, "simple_int8", serving.LoadOptions{}); err != nil {
		t.Fatal(err)
	}
	if inst, err := r.Get("simple_int8", "1"); err != nil || inst.Config.MaxBatchSize != 8 {
		t.Fatalf("simple_int8: %v %+v", err, inst)
	}
	if err := r.Unload(ctx, "simple_int8", serving.UnloadOptions{}); err != nil {
		t.Fatal(err)
	}
	_, err = r.Get("simple_int8", "")
	wantModelError(t, err, serving.ModelUnknown, "Request for unknown model: 'simple_int8' is not found")
	for _, m := range r.Index() {
		if m.Name == "simple_int8" && (m.State != serving.ModelUnavailable || m.Reason != "unloaded") {
			t.Fatalf("after unload: %+v", m)
		}
	}
	// A config override (JSON, as tritonclient sends it) replaces config.pbtxt.
	if err := r.Load(ctx, "simple", serving.LoadOptions{Config: []byte(`{"max_batch_size": 16, "platform": "onnxruntime_onnx"}`)}); err != nil {
		t.Fatal(err)
	}
	inst, err := r.Get("simple", "")
	if err != nil || inst.Config.MaxBatchSize != 16 || inst.Batcher.Config().MaxBatchRows != 16 {
		t.Fatalf("override: %v %+v", err, inst.Config)
	}
	if err := inferSimple(ctx, r, "simple"); err != nil {
		t.Fatal(err)
	}
	// A broken override fails with Triton's sentence; the old version keeps serving.
	err = r.Load(ctx, "simple", serving.LoadOptions{Config: []byte(`{"max_batch_size": "lots"}`)})
	wantModelError(t, err, serving.ModelLoadFailed, "failed to load 'simple'")
	if err := inferSimple(ctx, r, "simple"); err != nil {
		t.Fatalf("after a failed reload: %v", err)
	}
	_, err = r.Get("nosuch", "")
	wantModelError(t, err, serving.ModelUnknown, "Request for unknown model: 'nosuch' is not found")
	err = r.Load(ctx, "nosuch", serving.LoadOptions{})
	wantModelError(t, err, serving.ModelUnknown, "failed to load 'nosuch'")
}

// A load whose config override is refused logs Triton's "Invalid config
// override" (at warn, with the reason), which Triton's CI looks for in the
// server's log; a load that fails otherwise does not.
func TestInvalidConfigOverrideLogged(t *testing.T) {
	var buf syncBuffer
	f := openLogged(t, Config{Roots: []string{samples(t)}, Mode: ModeExplicit, LoadModels: []string{"simple"}}, slog.New(slog.NewTextHandler(&buf, nil)))
	ctx := context.Background()
	for _, override := range []string{`"parameters": {"config": {{"max_batch_size": "16"}}}`, `{"max_batch_size": "lots"}`, `{"name": "other"}`} {
		buf.reset()
		err := f.repo.Load(ctx, "simple", serving.LoadOptions{Config: []byte(override)})
		wantModelError(t, err, serving.ModelLoadFailed, "failed to load 'simple'")
		if log := buf.String(); !strings.Contains(log, "level=WARN") || !strings.Contains(log, "Invalid config override") || !strings.Contains(log, "model=simple") {
			t.Fatalf("override %s: log %q", override, log)
		}
	}
	buf.reset()
	err := f.repo.Load(ctx, "nosuch", serving.LoadOptions{})
	wantModelError(t, err, serving.ModelUnknown, "failed to load 'nosuch'")
	if strings.Contains(buf.String(), "Invalid config override") {
		t.Fatalf("a load without an override: %q", buf.String())
	}
	if err := inferSimple(ctx, f.repo, "simple"); err != nil {
		t.Fatalf("after the refused overrides: %v", err)
	}
}

// syncBuffer is a log destination safe for the repository's goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func (s *syncBuffer) reset() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.b.Reset()
}

// Configurations fw cannot honour are refused at load, naming what is wrong.
// Triton's onnxruntime backend parameter intra_op_thread_count sets each
// instance's intra-op threads (what fw tune writes); 0 keeps fw's choice.
func TestIntraOpThreadCountParameter(t *testing.T) {
	root := t.TempDir()
	src := samples(t)
	for name, n := range map[string]string{"three": "3", "auto": "0"} {
		copyModel(t, filepath.Join(src, "simple"), root, name)
		cfg := "max_batch_size: 8\ninstance_group [ { count: 2 kind: KIND_CPU } ]\nparameters { key: \"intra_op_thread_count\" value: { string_value: \"" + n + "\" } }\n"
		os.WriteFile(filepath.Join(root, name, "config.pbtxt"), []byte(cfg), 0o644)
	}
	f := open(t, Config{Roots: []string{root}, Mode: ModeExplicit})
	for name, want := range map[string]int{"three": 3, "auto": 1} { // the fixture's engine default: 1 thread
		if err := f.repo.Load(context.Background(), name, serving.LoadOptions{}); err != nil {
			t.Fatal(err)
		}
		inst, err := f.repo.Get(name, "")
		if err != nil {
			t.Fatal(err)
		}
		if got := inst.Model.Threads(); got != want || inst.Batcher.Config().Instances != 2 {
			t.Fatalf("%s: %d threads, %d instances; want %d threads, 2 instances", name, got, inst.Batcher.Config().Instances, want)
		}
	}
}

func TestConfigRefusals(t *testing.T) {
	root := t.TempDir()
	src := samples(t)
	cases := map[string]string{
		"unsupported":  "max_batch_size: 8\noptimization { graph { level: 1 } }\nmodel_warmup { name: \"w\" }\n",
		"unknownfield": "max_batch_size: 8\nmax_batch_sise: 4\n",
		"platform":     "platform: \"tensorflow_graphdef\"\n",
		"badname":      "name: \"other\"\n",
		"dtype":        "max_batch_size: 8\ninput [ { name: \"INPUT0\" data_type: TYPE_FP32 dims: [ 16 ] }, { name: \"INPUT1\" data_type: TYPE_INT32 dims: [ 16 ] } ]\n",
		"dims":         "max_batch_size: 8\ninput [ { name: \"INPUT0\" data_type: TYPE_INT32 dims: [ 15 ] }, { name: \"INPUT1\" data_type: TYPE_INT32 dims: [ 16 ] } ]\n",
		"noinput":      "max_batch_size: 8\ninput [ { name: \"X\" data_type: TYPE_INT32 dims: [ 16 ] } ]\n",
		"hugebatch":    "max_batch_size: 100000000\n",
		"fixedbatch":   "max_batch_size: 4\n",
		"threads":      "max_batch_size: 8\nparameters { key: \"intra_op_thread_count\" value: { string_value: \"many\" } }\n",
	}
	want := map[string]string{
		"unsupported":  "model_warmup, optimization",
		"unknownfield": "max_batch_sise",
		"platform":     "tensorflow_graphdef",
		"badname":      `names the model "other"`,
		"dtype":        "TYPE_FP32, the model takes TYPE_INT32",
		"dims":         "dims [15]",
		"noinput":      `input "X" of the configuration is not in the model`,
		"hugebatch":    "out of range",
		"fixedbatch":   "needs a model whose inputs and outputs all have a variable first axis",
		"threads":      `parameters intra_op_thread_count is "many"`,
	}
	for name, cfg := range cases {
		model := "simple"
		if name == "fixedbatch" {
			model = "fixed_batch1"
		}
		copyModel(t, filepath.Join(src, model), root, name)
		os.WriteFile(filepath.Join(root, name, "config.pbtxt"), []byte(cfg), 0o644)
	}
	f := open(t, Config{Roots: []string{root}, Mode: ModeExplicit})
	for name := range cases {
		err := f.repo.Load(context.Background(), name, serving.LoadOptions{})
		wantModelError(t, err, serving.ModelLoadFailed, "failed to load '"+name+"'")
		wantModelError(t, err, serving.ModelLoadFailed, want[name])
	}
	// The index says why each one is unavailable.
	for _, m := range f.repo.Index() {
		if m.State != serving.ModelUnavailable || m.Reason == "" {
			t.Errorf("index: %+v", m)
		}
	}
}

// Model names are directories of the repository: nothing a client sends
// reaches a path outside it, and a symlink leaving the root is refused.
func TestRepositoryPathsStayInside(t *testing.T) {
	outside := t.TempDir()
	copyModel(t, filepath.Join(samples(t), "simple"), outside, "escaped")
	root := t.TempDir()
	if err := os.Symlink(filepath.Join(outside, "escaped"), filepath.Join(root, "link")); err != nil {
		t.Fatal(err)
	}
	copyModel(t, filepath.Join(samples(t), "simple"), root, "inside")
	f := open(t, Config{Roots: []string{root}, Mode: ModeExplicit})
	ctx := context.Background()
	for _, name := range []string{"..", "../escaped", ".", "", "a/b", `..\x`, ".hidden", "x\x00y", "simple/../../etc"} {
		err := f.repo.Load(ctx, name, serving.LoadOptions{})
		wantModelError(t, err, serving.ModelUnknown, "failed to load")
	}
	err := f.repo.Load(ctx, "link", serving.LoadOptions{})
	wantModelError(t, err, serving.ModelLoadFailed, "leads outside the model repository")
	if err := f.repo.Load(ctx, "inside", serving.LoadOptions{}); err != nil {
		t.Fatal(err)
	}
	// A label file or model file name cannot leave the model's directory either.
	os.WriteFile(filepath.Join(root, "inside", "config.pbtxt"), []byte("default_model_filename: \"../../escaped/1/model.onnx\"\n"), 0o644)
	err = f.repo.Load(ctx, "inside", serving.LoadOptions{})
	wantModelError(t, err, serving.ModelLoadFailed, "must be a file name inside the version directory")
}

// In none and poll modes the API cannot load or unload (Triton's sentence).
func TestControlModeNone(t *testing.T) {
	root := t.TempDir()
	copyModel(t, filepath.Join(samples(t), "simple"), root, "simple")
	f := open(t, Config{Roots: []string{root}, Mode: ModeNone})
	if _, err := f.repo.Default(); err != nil {
		t.Fatalf("one model is the default: %v", err)
	}
	err := f.repo.Load(context.Background(), "simple", serving.LoadOptions{})
	wantModelError(t, err, serving.ModelControlDisabled, "explicit model load / unload is not allowed")
	err = f.repo.Unload(context.Background(), "simple", serving.UnloadOptions{})
	wantModelError(t, err, serving.ModelControlDisabled, "explicit model load / unload is not allowed")
}

// In poll mode a new model loads, a changed one reloads and a removed one
// unloads, while clients keep sending: not one request fails.
func TestPollFollowsRepositoryUnderLoad(t *testing.T) {
	root := t.TempDir()
	src := samples(t)
	copyModel(t, filepath.Join(src, "simple"), root, "simple")
	f := open(t, Config{Roots: []string{root}, Mode: ModePoll, PollInterval: 20 * time.Millisecond})
	ctx, cancel := context.WithCancel(context.Background())
	var watch sync.WaitGroup
	watch.Add(1)
	go func() { defer watch.Done(); f.repo.Watch(ctx) }()
	defer func() { cancel(); watch.Wait() }()

	var failures, answered atomic.Int64
	stop := make(chan struct{})
	var clients sync.WaitGroup
	for range 4 {
		clients.Add(1)
		go func() {
			defer clients.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				if err := inferSimple(ctx, f.repo, "simple"); err != nil {
					failures.Add(1)
					t.Errorf("request during poll changes: %v", err)
					return
				}
				answered.Add(1)
			}
		}()
	}
	waitFor := func(what string, ok func() bool) {
		t.Helper()
		deadline := time.Now().Add(20 * time.Second)
		for !ok() {
			if time.Now().After(deadline) {
				t.Fatalf("poll mode: %s did not happen; index %+v", what, f.repo.Index())
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	// A new model appears.
	copyModel(t, filepath.Join(src, "simple"), root, "second")
	waitFor("loading a new model", func() bool { _, err := f.repo.Get("second", ""); return err == nil })
	// The served model's configuration changes: it reloads under load.
	before, _ := f.repo.Get("simple", "")
	os.WriteFile(filepath.Join(root, "simple", "config.pbtxt"), []byte("max_batch_size: 4\ndynamic_batching { max_queue_delay_microseconds: 100 }\n"), 0o644)
	waitFor("reloading a changed model", func() bool { inst, err := f.repo.Get("simple", ""); return err == nil && inst != before })
	if inst, _ := f.repo.Get("simple", ""); inst.Config.MaxBatchSize != 4 {
		t.Fatalf("reloaded config: %+v", inst.Config)
	}
	// A broken change leaves the old version serving, with the reason.
	os.WriteFile(filepath.Join(root, "simple", "config.pbtxt"), []byte("max_batch_size: 4\nbogus_field: 1\n"), 0o644)
	waitFor("a refused reload in the index", func() bool {
		for _, m := range f.repo.Index() {
			if m.Name == "simple" && strings.Contains(m.Reason, "bogus_field") && m.State == serving.ModelReady {
				return true
			}
		}
		return false
	})
	// A removed model unloads.
	os.RemoveAll(filepath.Join(root, "second"))
	waitFor("unloading a removed model", func() bool { _, err := f.repo.Get("second", ""); return err != nil })
	time.Sleep(50 * time.Millisecond)
	close(stop)
	clients.Wait()
	if failures.Load() != 0 || answered.Load() == 0 {
		t.Fatalf("%d failed, %d answered", failures.Load(), answered.Load())
	}
}

// Loads and unloads racing inference (run under -race): every answer is
// right or a clean "not found/not ready", nothing panics or leaks (TestMain's
// goleak). 10,000 load/unload calls (each load a real reload of the model's
// ONNX file: about 15 s under -race on 2 cores); FW_REPO_RACE_OPS sets
// another total.
func TestLoadUnloadRacesInference(t *testing.T) {
	f := open(t, Config{Roots: []string{samples(t)}, Mode: ModeExplicit, LoadModels: []string{"simple"}})
	ctx := context.Background()
	n := 5000 // per worker, two workers
	if testing.Short() {
		n = 10
	}
	if v := os.Getenv("FW_REPO_RACE_OPS"); v != "" {
		total, err := strconv.Atoi(v)
		if err != nil || total < 2 {
			t.Fatalf("FW_REPO_RACE_OPS=%q: want a number of calls >= 2", v)
		}
		n = total / 2
	}
	start := time.Now()
	var loads, unloads atomic.Int64
	var wg sync.WaitGroup
	stop := make(chan struct{})
	var wrong atomic.Int64
	for range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				for _, name := range []string{"simple", "simple_int8"} {
					err := inferSimple(ctx, f.repo, name)
					if _, isModel := serving.AsModelError(err); err != nil && !isModel && name == "simple" {
						wrong.Add(1)
						t.Errorf("%s: %v", name, err)
					}
				}
			}
		}()
	}
	var ops sync.WaitGroup
	for w := range 2 {
		ops.Add(1)
		go func() {
			defer ops.Done()
			for i := range n {
				var err error
				if (i+w)%2 == 0 {
					err = f.repo.Load(ctx, "simple_int8", serving.LoadOptions{})
					loads.Add(1)
				} else {
					err = f.repo.Unload(ctx, "simple_int8", serving.UnloadOptions{})
					unloads.Add(1)
				}
				if err != nil {
					t.Errorf("op %d: %v", i, err)
				}
			}
		}()
	}
	ops.Wait()
	close(stop)
	wg.Wait()
	if wrong.Load() > 0 {
		t.Fatalf("%d wrong answers", wrong.Load())
	}
	t.Logf("%d loads and %d unloads racing inference in %s, 0 wrong answers", loads.Load(), unloads.Load(), time.Since(start).Round(time.Millisecond))
}

// Triton's densenet_onnx configuration reshapes: clients send [3,224,224]
// and get [1000], the model takes [1,3,224,224] and gives [1,1000,1,1].
func TestReshape(t *testing.T) {
	f := open(t, Config{Roots: []string{samples(t)}, Mode: ModeExplicit, LoadModels: []string{"densenet_onnx"}})
	inst, err := f.repo.Get("densenet_onnx", "")
	if err != nil {
		t.Fatal(err)
	}
	if got := engine.FormatShape(inst.Inputs()[0].Shape); got != "[3, 224, 224]" {
		t.Fatalf("client input shape %s", got)
	}
	if got := engine.FormatShape(inst.Outputs()[0].Shape); got != "[1000]" {
		t.Fatalf("client output shape %s", got)
	}
	if inst.Config.Inputs[0].Format != "FORMAT_NCHW" || fmt.Sprint(inst.Config.Inputs[0].Reshape) != "[1 3 224 224]" || inst.Config.Outputs[0].LabelFilename != "densenet_labels.txt" {
		t.Fatalf("config %+v", inst.Config)
	}
	x, _ := engine.NewTensor(engine.Float32, []int64{3, 224, 224})
	for i := range x.Float32s() {
		x.Float32s()[i] = float32(i%7) * 0.1
	}
	out, _, err := serving.Infer(context.Background(), f.repo, inst, []engine.Tensor{x})
	if err != nil {
		t.Fatal(err)
	}
	if engine.FormatShape(out[0].Shape) != "[1000]" {
		t.Fatalf("output shape %s", engine.FormatShape(out[0].Shape))
	}
	// The same as the model run directly on its own shapes.
	x4 := x
	x4.Shape = []int64{1, 3, 224, 224}
	direct, err := inst.Model.Run(context.Background(), []engine.Tensor{x4})
	if err != nil {
		t.Fatal(err)
	}
	for i, v := range out[0].Float32s() {
		if v != direct[0].Float32s()[i] {
			t.Fatalf("element %d: %v, direct %v", i, v, direct[0].Float32s()[i])
		}
	}
	// A client shape that is not the configured dims is refused, even with
	// the same element count.
	y := x
	y.Shape = []int64{224, 3, 224}
	_, _, err = serving.Infer(context.Background(), f.repo, inst, []engine.Tensor{y})
	var ie *engine.InputError
	if !errors.As(err, &ie) || !strings.Contains(ie.Error(), "[3,224,224]") {
		t.Fatalf("wrong client shape: %v", err)
	}
}

// With --max-resident-models every model of the repository loads on its
// first request and the least recently used are unloaded to make room:
// clients asking for many more models than fit never see a failure.
func TestOnDemandEvictionUnderLoad(t *testing.T) {
	root := t.TempDir()
	const models, resident = 24, 4
	for i := range models {
		copyModel(t, filepath.Join(samples(t), "simple"), root, fmt.Sprintf("m%02d", i))
	}
	f := open(t, Config{Roots: []string{root}, Mode: ModeNone, MaxResidentModels: resident, LoadWait: time.Minute})
	if len(f.repo.Loaded()) != 0 {
		t.Fatalf("on demand: nothing loads at start, got %d", len(f.repo.Loaded()))
	}
	if st, _ := f.repo.State(); st != serving.StateReady {
		t.Fatalf("ready at once: %v", st)
	}
	ctx := context.Background()
	var wg sync.WaitGroup
	var failed, done atomic.Int64
	rounds := 40
	if testing.Short() {
		rounds = 10
	}
	for c := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range rounds {
				name := fmt.Sprintf("m%02d", (c*7+i*5)%models)
				if c == 0 {
					name = "m00" // one hot model, always in demand
				}
				if err := inferSimple(ctx, f.repo, name); err != nil {
					failed.Add(1)
					t.Errorf("%s: %v", name, err)
					return
				}
				done.Add(1)
				if n := len(f.repo.Loaded()); n > resident+4 { // a model loads before the LRU one is taken out: at most one over per client loading
					t.Errorf("%d models resident, bound %d", n, resident)
				}
			}
		}()
	}
	wg.Wait()
	if failed.Load() != 0 || done.Load() != int64(4*rounds) {
		t.Fatalf("%d failed, %d done", failed.Load(), done.Load())
	}
	evicted := 0
	for _, m := range f.repo.Index() {
		if strings.Contains(m.Reason, "least recently used") {
			evicted++
		}
	}
	if evicted == 0 {
		t.Fatalf("nothing was evicted: %+v", f.repo.Index())
	}
	// A model the repository lacks is still unknown, not loaded on demand.
	_, err := f.repo.Get("nosuch", "")
	wantModelError(t, err, serving.ModelUnknown, "Request for unknown model")
	wantModelError(t, f.repo.Ready("nosuch", ""), serving.ModelUnknown, "Request for unknown model")
	// A readiness probe of a model not loaded answers ready without loading it.
	for i := range models {
		name := fmt.Sprintf("m%02d", i)
		if slices.ContainsFunc(f.repo.Loaded(), func(inst *serving.Instance) bool { return inst.Name() == name }) {
			continue
		}
		before := len(f.repo.Loaded())
		if err := f.repo.Ready(name, ""); err != nil {
			t.Fatalf("Ready(%s) of an unloaded on-demand model: %v", name, err)
		}
		if slices.ContainsFunc(f.repo.Loaded(), func(inst *serving.Instance) bool { return inst.Name() == name }) || len(f.repo.Loaded()) != before {
			t.Fatalf("Ready(%s) loaded a model", name)
		}
		break
	}
}

// dynamic_batching.default_queue_policy.max_queue_size bounds the model's
// queue (beyond it: 503, Triton's UNAVAILABLE).
func TestQueuePolicyBoundsTheQueue(t *testing.T) {
	f := open(t, Config{Roots: []string{samples(t)}, Mode: ModeExplicit})
	err := f.repo.Load(context.Background(), "simple", serving.LoadOptions{Config: []byte(`{"max_batch_size": 8, "dynamic_batching": {"default_queue_policy": {"max_queue_size": 1}}}`)})
	if err != nil {
		t.Fatal(err)
	}
	inst, err := f.repo.Get("simple", "")
	if err != nil || inst.Batcher.Config().Queues.Policy.MaxQueue != 1 || inst.Batcher.Config().MaxQueue != 1 {
		t.Fatalf("%v, queues %+v, max queue %d (the capacity /health and fw_queue_capacity report)", err, inst.Batcher.Config().Queues, inst.Batcher.Config().MaxQueue)
	}
}

// dynamic_batching.preferred_batch_size holds a batch short of the largest
// preferred size for max_queue_delay_microseconds, idle engine or not, as
// Triton's dynamic batcher does; with max_queue_size 1 a second request
// meanwhile is refused (Triton's test_descriptive_status_code: 503).
func TestPreferredBatchSizeHolds(t *testing.T) {
	f := open(t, Config{Roots: []string{samples(t)}, Mode: ModeExplicit})
	err := f.repo.Load(context.Background(), "simple", serving.LoadOptions{Config: []byte(`{"max_batch_size": 8, "dynamic_batching": {"preferred_batch_size": [2, 8], "max_queue_delay_microseconds": 300000, "default_queue_policy": {"max_queue_size": 1}}}`)})
	if err != nil {
		t.Fatal(err)
	}
	inst, err := f.repo.Get("simple", "")
	if err != nil || !slices.Equal(inst.Batcher.Config().PreferredSizes, []int{2, 8}) {
		t.Fatalf("%v, preferred sizes %v", err, inst.Batcher.Config().PreferredSizes)
	}
	start := time.Now()
	held := make(chan error, 1)
	go func() { _, err := inst.Batcher.Submit(context.Background(), simpleInputs(1)); held <- err }()
	for inst.Batcher.QueueDepth() != 1 {
		time.Sleep(time.Millisecond)
	}
	if _, err := inst.Batcher.Submit(context.Background(), simpleInputs(1)); !errors.Is(err, batcher.ErrQueueFull) {
		t.Fatalf("a second request while one is held: %v", err)
	}
	if err := <-held; err != nil || time.Since(start) < 300*time.Millisecond {
		t.Fatalf("the held request: %v after %v", err, time.Since(start))
	}
}

// A configuration that lists neither tensors nor max_batch_size (a load
// override with only a version policy) has its batching completed from the
// file, as Triton's auto-complete does.
func TestPartialConfigCompletesBatching(t *testing.T) {
	f := open(t, Config{Roots: []string{samples(t)}, Mode: ModeExplicit})
	if err := f.repo.Load(context.Background(), "simple", serving.LoadOptions{Config: []byte(`{"version_policy": {"latest": {"num_versions": 1}}}`)}); err != nil {
		t.Fatal(err)
	}
	inst, err := f.repo.Get("simple", "")
	if err != nil || inst.Config.MaxBatchSize == 0 || inst.Batcher.Config().Unbatched {
		t.Fatalf("%v: max_batch_size %d, unbatched %v", err, inst.Config.MaxBatchSize, inst.Batcher.Config().Unbatched)
	}
	if err := inferSimple(context.Background(), f.repo, "simple"); err != nil {
		t.Fatal(err)
	}
}

// A model directory without config.pbtxt holding an fw export with image
// preprocessing: the auto-completed configuration says the image input is
// FORMAT_NCHW (what /predict/image writes); a flattened one stays
// FORMAT_NONE, as does an explicit configuration's choice.
func TestAutoCompleteFormatFromPreprocessing(t *testing.T) {
	root := t.TempDir()
	for _, name := range []string{"digits_cnn", "digits_mlp"} {
		data, err := os.ReadFile(filepath.Join(testmodels.Dir(t), name+".onnx"))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.MkdirAll(filepath.Join(root, name, "1"), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(root, name, "1", "model.onnx"), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	f := open(t, Config{Roots: []string{root}, Mode: ModeNone})
	for name, want := range map[string]string{"digits_cnn": "FORMAT_NCHW", "digits_mlp": "FORMAT_NONE"} {
		inst, err := f.repo.Get(name, "")
		if err != nil {
			t.Fatal(err)
		}
		if got := inst.Config.Inputs[0].Format; got != want {
			t.Errorf("%s: input format %s, want %s (dims %v)", name, got, want, inst.Config.Inputs[0].Dims)
		}
	}
}

// Copies of one model share its image test case's preprocessed picture:
// the repository decodes it once, whichever copy loads first, and a copy
// evicted and loaded again finds it too.
func TestImageSamplesShared(t *testing.T) {
	root := t.TempDir()
	data, err := os.ReadFile(filepath.Join(testmodels.Dir(t), "digits_mlp.onnx"))
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"a", "b", "c"} {
		if err := os.MkdirAll(filepath.Join(root, name, "1"), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(root, name, "1", "model.onnx"), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	f := open(t, Config{Roots: []string{root}, Mode: ModeNone, MaxResidentModels: 2})
	for _, name := range []string{"a", "b", "c", "a"} { // c evicts a, which then loads again
		if _, err := f.repo.Get(name, ""); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
	}
	if n := f.repo.images.Len(); n != 1 {
		t.Fatalf("the repository holds %d preprocessed pictures, want 1 for three copies of one model", n)
	}
}

// A batchable model served without a batch axis (max_batch_size 0) takes
// inputs whose first axes differ, as the model itself does (simple's Add
// broadcasts [1,16] against [2,16]); before, they were refused as rows of
// different batches.
func TestUnbatchedServingOfABatchableModel(t *testing.T) {
	src := samples(t)
	root := t.TempDir()
	copyModel(t, filepath.Join(src, "simple"), root, "simple")
	cfg := strings.Replace(readFile(t, filepath.Join(root, "simple", "config.pbtxt")), "max_batch_size: 8", "max_batch_size: 0", 1)
	cfg = strings.ReplaceAll(cfg, "dims: [ 16 ]", "dims: [ -1, 16 ]")
	os.WriteFile(filepath.Join(root, "simple", "config.pbtxt"), []byte(cfg), 0o644)
	f := open(t, Config{Roots: []string{root}, Mode: ModeExplicit, LoadModels: []string{"simple"}})
	inst, _ := f.repo.Get("simple", "")
	in := simpleInputs(2)
	in[0].Shape, in[0].Data = []int64{1, 16}, in[0].Data[:64]
	out, _, err := serving.Infer(context.Background(), f.repo, inst, in)
	if err != nil {
		t.Fatal(err)
	}
	if out[0].Shape[0] != 2 || int32s(out[0])[16+5] != 6 {
		t.Fatalf("broadcast sum %v %v", out[0].Shape, int32s(out[0]))
	}
}
