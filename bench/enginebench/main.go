// Command enginebench measures the Go engines on the reference models: per
// model, file format and batch size, the latency (p50, p99) and throughput of
// one engine call, with inputs tiled from each file's test vector. With
// -eager it merges eager-PyTorch figures measured by bench/engine_eager.py and
// writes the comparison table into docs/benchmarks.md (between markers).
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"github.com/fw-serve/fw/internal/benchdoc"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/fw-serve/fw/engine"
)

// row is one measured configuration (the same fields engine_eager.py writes).
type row struct {
	Model    string  `json:"model"`
	Runtime  string  `json:"runtime"`
	Format   string  `json:"format"`
	Batch    int     `json:"batch"`
	P50us    float64 `json:"p50_us"`
	P99us    float64 `json:"p99_us"`
	RowsPerS float64 `json:"rows_per_s"`
	Threads  int     `json:"threads"`
	Calls    int     `json:"calls,omitempty"`
	// Quantization is fw.json's export.quantization of an int8 ONNX file
	// ("dynamic" or "static").
	Quantization string `json:"quantization,omitempty"`
}

// column is the table column a row belongs to: its format, and for int8
// ONNX its quantization method too.
func (r row) column() string {
	if r.Quantization != "" {
		return r.Format + "_" + r.Quantization
	}
	return r.Format
}

func main() {
	models := flag.String("models", "build/models", "directory of the reference models")
	batches := flag.String("batches", "1,8,64", "batch sizes")
	seconds := flag.Float64("seconds", 1.0, "time budget per configuration")
	threads := flag.Int("threads", 0, "intra-op threads (0: available CPUs)")
	eager := flag.String("eager", "", "JSON rows from bench/engine_eager.py to merge")
	out := flag.String("out", "", "write the rows as JSON here")
	doc := flag.String("doc", "", "update this markdown file's engine section (e.g. docs/benchmarks.md)")
	command := flag.String("command", "make bench-engine", "the command recorded in the doc")
	loadStart := flag.String("load", "", "the load average (1, 5, 15 min) when the run started, recorded in the doc")
	flag.Parse()
	if *threads == 0 {
		*threads = engine.AvailableCPUs()
	}
	var bs []int
	for _, s := range strings.Split(*batches, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n < 1 {
			fatalf("bad batch size %q", s)
		}
		bs = append(bs, n)
	}
	var rows []row
	for _, name := range []string{"digits_mlp", "digits_cnn", "textcls", "resnet18"} {
		for _, f := range []struct{ ext, runtime string }{{".onnx", "onnxruntime"}, {".ts.pt", "libtorch"}, {".quant.pt", "libtorch"},
			{".int8-dynamic.onnx", "onnxruntime"}, {".int8-static.onnx", "onnxruntime"}, {".pt2", "libtorch-aoti"}} {
			path := filepath.Join(*models, name+f.ext)
			if _, err := os.Stat(path); err != nil {
				continue
			}
			r, err := measureFile(path, f.runtime, bs, *threads, time.Duration(*seconds*float64(time.Second)))
			if err != nil {
				fatalf("%s: %v", path, err)
			}
			rows = append(rows, r...)
		}
	}
	if *eager != "" {
		b, err := os.ReadFile(*eager)
		if err != nil {
			fatalf("read %s: %v", *eager, err)
		}
		var er []row
		if err := json.Unmarshal(b, &er); err != nil {
			fatalf("parse %s: %v", *eager, err)
		}
		rows = append(rows, er...)
	}
	if *out != "" {
		b, _ := json.MarshalIndent(rows, "", " ")
		if err := os.WriteFile(*out, b, 0o644); err != nil {
			fatalf("write %s: %v", *out, err)
		}
	}
	table := markdown(rows, *command, *threads, *loadStart, loadAverage())
	fmt.Print(table)
	if *doc != "" {
		if err := benchdoc.ReplaceSection(*doc, "engine", table); err != nil {
			fatalf("update %s: %v", *doc, err)
		}
	}
}

func fatalf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "enginebench: "+format+"\n", args...)
	os.Exit(1)
}

func measureFile(path, rt string, batches []int, threads int, budget time.Duration) ([]row, error) {
	ctx := context.Background()
	m, err := engine.Load(ctx, path, engine.Options{Threads: threads})
	if err != nil {
		return nil, err
	}
	defer m.Close()
	var quantization string
	if m.Format == engine.FormatONNXInt8 && m.Meta != nil {
		quantization, _ = m.Meta.Export["quantization"].(string)
	}
	var rows []row
	for _, b := range batches {
		in, err := m.ExampleInputs(b)
		if err != nil {
			return nil, err
		}
		for i := 0; i < 3; i++ { // warm-up (TorchScript's profiling executor optimises after a few calls)
			if _, err := m.Run(ctx, in); err != nil {
				return nil, err
			}
		}
		var lat []time.Duration
		start := time.Now()
		for len(lat) < 5 || (time.Since(start) < budget && len(lat) < 200000) {
			t0 := time.Now()
			if _, err := m.Run(ctx, in); err != nil {
				return nil, err
			}
			lat = append(lat, time.Since(t0))
		}
		total := time.Since(start)
		slices.Sort(lat)
		pct := func(p float64) float64 {
			i := int(p * float64(len(lat)-1))
			return float64(lat[i].Nanoseconds()) / 1000
		}
		rows = append(rows, row{
			Model: m.Name(), Runtime: rt, Format: string(m.Format), Batch: b,
			P50us: pct(0.50), P99us: pct(0.99), Threads: threads, Calls: len(lat),
			RowsPerS: float64(b*len(lat)) / total.Seconds(), Quantization: quantization,
		})
		fmt.Fprintf(os.Stderr, "  %-11s %-18s batch %-3d p50 %9.1f us  %10.0f rows/s\n", m.Name(), rows[len(rows)-1].column(), b, pct(0.5), rows[len(rows)-1].RowsPerS)
	}
	return rows, nil
}

// loadAverage is the 1, 5 and 15 minute load average from /proc/loadavg, or
// "" where there is none.
func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return ""
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return ""
	}
	return strings.Join(f[:3], " ")
}

func markdown(rows []row, command string, threads int, loadStart, loadEnd string) string {
	var sb strings.Builder
	host, _ := os.Hostname()
	_ = host
	fmt.Fprintf(&sb, "## Engine: one call, per model, format and batch size\n\n")
	fmt.Fprintf(&sb, "Command: `%s` (measured %s on %s, %d CPUs available, %d intra-op threads for every runtime, %s; inputs tiled from each file's test vector; p50/p99 of single calls).\n\n",
		command, time.Now().UTC().Format("2006-01-02"), benchdoc.Commit(), runtime.NumCPU(), threads, runtime.GOARCH)
	if loadStart != "" || loadEnd != "" {
		fmt.Fprintf(&sb, "Load average (1, 5, 15 min) at the start: %s; at the end: %s. Figures measured above a load of about 1 per CPU are noisy: re-run on an idle machine.\n\n", orNA(loadStart), orNA(loadEnd))
	}
	type key struct {
		model string
		batch int
	}
	byKey := map[key]map[string]row{}
	var keys []key
	for _, r := range rows {
		k := key{r.Model, r.Batch}
		if byKey[k] == nil {
			byKey[k] = map[string]row{}
			keys = append(keys, k)
		}
		byKey[k][r.column()] = r
	}
	order := map[string]int{"digits_mlp": 0, "digits_cnn": 1, "textcls": 2, "resnet18": 3}
	sort.SliceStable(keys, func(i, j int) bool {
		if keys[i].model != keys[j].model {
			return order[keys[i].model] < order[keys[j].model]
		}
		return keys[i].batch < keys[j].batch
	})
	fmt.Fprintf(&sb, "| model | batch | eager PyTorch p50 / p99 (us) | TorchScript via shim | ONNX Runtime | quantized (TorchScript int8) | AOTInductor .pt2 via shim | ONNX vs eager | ONNX vs TorchScript | .pt2 vs eager | .pt2 vs ONNX | int8 ONNX dynamic | int8 ONNX static | int8 ONNX dynamic / static vs ONNX |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	cell := func(r row, ok bool) string {
		if !ok {
			return "n/a"
		}
		return fmt.Sprintf("%s / %s (%s rows/s)", fnum(r.P50us), fnum(r.P99us), fnum(r.RowsPerS))
	}
	ratio := func(a, b row, okA, okB bool) string {
		if !okA || !okB || a.P50us == 0 {
			return "n/a"
		}
		return fmt.Sprintf("%.1fx", b.P50us/a.P50us)
	}
	for _, k := range keys {
		m := byKey[k]
		e, okE := m["eager"]
		ts, okT := m["torchscript"]
		o, okO := m["onnx"]
		q, okQ := m["quantized"]
		dyn, okD := m["onnx_int8_dynamic"]
		st, okS := m["onnx_int8_static"]
		a, okA := m["aoti"]
		fmt.Fprintf(&sb, "| %s | %d | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s / %s |\n", k.model, k.batch, cell(e, okE), cell(ts, okT), cell(o, okO), cell(q, okQ), cell(a, okA),
			ratio(o, e, okO, okE), ratio(o, ts, okO, okT), ratio(a, e, okA, okE), ratio(a, o, okA, okO),
			cell(dyn, okD), cell(st, okS), ratio(dyn, o, okD, okO), ratio(st, o, okS, okO))
	}
	sb.WriteString("\n\"ONNX vs eager\" is eager p50 / ONNX Runtime p50 (above 1 means ONNX Runtime is faster); \".pt2 vs eager\" and \".pt2 vs ONNX\" likewise for the AOTInductor package (above 1 means the .pt2 is faster). \"int8 ONNX vs ONNX\" is float ONNX p50 / int8 ONNX p50 (above 1 means the int8 file is faster); the int8 files' accuracy against float is in each file's fw.json (`metrics`) and build/models/manifest.json.\n")
	return sb.String()
}

func orNA(s string) string {
	if s == "" {
		return "n/a"
	}
	return s
}

func fnum(v float64) string {
	switch {
	case v >= 100:
		return strconv.FormatFloat(v, 'f', 0, 64)
	case v >= 10:
		return strconv.FormatFloat(v, 'f', 1, 64)
	}
	return strconv.FormatFloat(v, 'f', 2, 64)
}
