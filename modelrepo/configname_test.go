package modelrepo

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/fw-serve/fw/httpapi"
	"github.com/fw-serve/fw/respcache"
	"github.com/fw-serve/fw/serving"
)

// --model-config-name: a model's configs/<name>.pbtxt where it has one,
// else its config.pbtxt; a name that is not a plain file name is refused.
func TestConfigName(t *testing.T) {
	root := t.TempDir()
	for _, m := range []string{"a", "b"} {
		os.MkdirAll(filepath.Join(root, m, "configs"), 0o755)
		os.WriteFile(filepath.Join(root, m, "config.pbtxt"), []byte("max_batch_size: 8\n"), 0o644)
	}
	os.WriteFile(filepath.Join(root, "a", "configs", "h100.pbtxt"), []byte("max_batch_size: 2\n"), 0o644)
	r, err := New(Config{Roots: []string{root}, ConfigName: "h100"}, httpapi.NewMetrics(prometheus.NewRegistry()), quiet())
	if err != nil {
		t.Fatal(err)
	}
	for m, want := range map[string]int32{"a": 2, "b": 8} {
		cfg, _, err := r.readConfig(filepath.Join(root, m), m, serving.LoadOptions{})
		if err != nil || cfg.GetMaxBatchSize() != want {
			t.Errorf("model %s: max_batch_size %d (%v), want %d", m, cfg.GetMaxBatchSize(), err, want)
		}
	}
	for _, bad := range []string{"../x", "a b", ".hidden", "x/y"} {
		if _, err := New(Config{Roots: []string{root}, ConfigName: bad}, httpapi.NewMetrics(prometheus.NewRegistry()), quiet()); err == nil || !strings.Contains(err.Error(), "--model-config-name") {
			t.Errorf("ConfigName %q: %v", bad, err)
		}
	}
}

// response_cache { enable: true } needs the server's cache, and a model
// whose answers depend on more than its request cannot have it.
func TestResponseCacheConfig(t *testing.T) {
	root := t.TempDir()
	write := func(name, cfg string) {
		os.MkdirAll(filepath.Join(root, name), 0o755)
		os.WriteFile(filepath.Join(root, name, "config.pbtxt"), []byte(cfg), 0o644)
	}
	write("plain", "max_batch_size: 8\nresponse_cache { enable: true }\n")
	write("stateful", "max_batch_size: 8\nresponse_cache { enable: true }\nsequence_batching { }\n")
	read := func(cache *respcache.Cache, name string) error {
		r, err := New(Config{Roots: []string{root}, ResponseCache: cache}, httpapi.NewMetrics(prometheus.NewRegistry()), quiet())
		if err != nil {
			t.Fatal(err)
		}
		_, _, err = r.readConfig(filepath.Join(root, name), name, serving.LoadOptions{})
		return err
	}
	if err := read(nil, "plain"); err != nil { // loads uncached, as in Triton (a warning says why)
		t.Fatalf("no server cache: %v", err)
	}
	if err := read(respcache.New(1<<20), "plain"); err != nil {
		t.Fatal(err)
	}
	if err := read(respcache.New(1<<20), "stateful"); err == nil || !strings.Contains(err.Error(), "stateful") {
		t.Fatalf("stateful: %v", err)
	}
}
