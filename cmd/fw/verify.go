package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/fw-serve/fw/batcher"
	"github.com/fw-serve/fw/engine"
	"github.com/fw-serve/fw/imageprep"
)

// verifyReport is the --json output of fw verify.
type verifyReport struct {
	Path        string  `json:"path"`
	Name        string  `json:"name"`
	Version     string  `json:"version"`
	Format      string  `json:"format"`
	Device      string  `json:"device"`
	Threads     int     `json:"threads"`
	SizeBytes   int64   `json:"size_bytes"`
	LoadMS      float64 `json:"load_ms"`
	Rows        int64   `json:"rows"`
	MaxAbsError float64 `json:"max_abs_error"`
	Atol        float64 `json:"atol"`
	Rtol        float64 `json:"rtol"`
	Passed      bool    `json:"passed"`
	Worst       string  `json:"worst,omitempty"`
	Calls       int     `json:"calls"`
	MicrosPer   float64 `json:"us_per_call"`
	// Image is the image test case's outcome (files exported with preprocessing=).
	Image *imageReport `json:"image,omitempty"`
	// tensorPassed is the tensor test vector's verdict alone (Passed also
	// counts the image case).
	tensorPassed bool
	Error        string `json:"error,omitempty"`
}

// imageReport is the image test case in fw verify's report.
type imageReport struct {
	Picture           string  `json:"picture"`
	InputMaxAbsError  float64 `json:"input_max_abs_error"`
	InputAtol         float64 `json:"input_atol"`
	OutputMaxAbsError float64 `json:"output_max_abs_error"`
	Passed            bool    `json:"passed"`
	Worst             string  `json:"worst,omitempty"`
}

func runVerify(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("verify", flag.ContinueOnError)
	fs.SetOutput(stderr)
	device := fs.String("device", "cpu", "device to run on: cpu, cuda or cuda:N")
	threads := fs.Int("threads", 0, "intra-op threads (0: fw serve's choice: the CPUs this process may use, honouring cgroup quotas, or one when an ONNX model's calls are as fast with one)")
	seconds := fs.Float64("time", 0.5, "seconds to spend timing the test vector after the check (0 skips timing)")
	asJSON := fs.Bool("json", false, "print one JSON object instead of text")
	fs.Usage = func() {
		fmt.Fprintf(stderr, "Usage: fw verify MODEL_FILE [flags]\n\nLoads MODEL_FILE (ONNX or int8 ONNX, TorchScript, quantized TorchScript or an AOTInductor .pt2\npackage, detected by content), runs the test vector embedded by fw.export (and its sample picture\nthrough the image path), prints the largest absolute error and the time per call.\nExit status: 0 within tolerance, 1 beyond it or on a load error, 2 on usage errors.\n\nFlags:\n")
		fs.PrintDefaults()
	}
	path, code, ok := parseWithFile(fs, args)
	if !ok {
		return code
	}
	if path == "" {
		fs.Usage()
		return 2
	}
	rep := verifyReport{Path: path, Device: *device}
	fail := func(err error) int {
		rep.Error = err.Error()
		if *asJSON {
			json.NewEncoder(stdout).Encode(rep)
		} else {
			fmt.Fprintf(stderr, "fw verify: %v\n", err)
		}
		return 1
	}
	m, err := engine.Load(ctx, path, withLibraries(engine.Options{Device: engine.Device(*device), Threads: *threads}))
	if err != nil {
		return fail(err)
	}
	rep.LoadMS = float64(m.LoadTime.Microseconds()) / 1000
	if *threads == 0 { // what fw serve runs with its defaults: a small model may keep one thread
		m = servedThreads(ctx, m, stderr)
	}
	defer m.Close()
	rep.Name, rep.Version, rep.Format = m.Name(), m.Version(), string(m.Format)
	rep.Threads, rep.SizeBytes = m.Threads(), m.Size
	res, err := m.Verify(ctx)
	if err != nil {
		return fail(err)
	}
	rep.Rows, rep.MaxAbsError, rep.Atol, rep.Rtol, rep.Passed, rep.Worst = res.Rows, res.MaxAbsError, res.Atol, res.Rtol, res.Passed, res.Worst
	rep.tensorPassed = res.Passed
	ic, err := imageprep.VerifyImage(ctx, m, nil, nil)
	switch {
	case errors.Is(err, imageprep.ErrNoImageTestCase):
	case err != nil:
		return fail(err)
	default:
		rep.Image = &imageReport{
			Picture:          fmt.Sprintf("%dx%d %s", ic.Width, ic.Height, ic.Format),
			InputMaxAbsError: ic.InputMaxAbsError, InputAtol: ic.InputAtol,
			OutputMaxAbsError: ic.OutputMaxAbsError, Passed: ic.Passed, Worst: ic.Worst,
		}
		if !ic.Passed {
			rep.Passed = false
			if res.Passed { // name the image case, not the tensor's (passing) worst element
				rep.Worst = "image test case: " + ic.Worst
			}
		}
	}
	if *seconds > 0 && res.Passed {
		calls, per, err := timeTestVector(ctx, m, time.Duration(*seconds*float64(time.Second)))
		if err != nil {
			return fail(err)
		}
		rep.Calls, rep.MicrosPer = calls, float64(per.Nanoseconds())/1000
	}
	if *asJSON {
		json.NewEncoder(stdout).Encode(rep)
	} else {
		printVerify(stdout, m, rep)
	}
	if !rep.Passed {
		if !*asJSON {
			fmt.Fprintf(stderr, "fw verify: %s: outputs differ beyond tolerance (worst: %s)\n", path, rep.Worst)
		}
		return 1
	}
	return 0
}

// parseWithFile parses a command's flags with its one file argument
// before or after them. When it returns ok false the command exits with
// code: 0 after --help, 2 on a flag error (fs has said why).
func parseWithFile(fs *flag.FlagSet, args []string) (path string, code int, ok bool) {
	rest := args
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		path, rest = args[0], args[1:]
	}
	if err := fs.Parse(rest); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return "", 0, false
		}
		return "", 2, false
	}
	if path == "" && fs.NArg() > 0 {
		path = fs.Arg(0)
	}
	return path, 0, true
}

func timeTestVector(ctx context.Context, m *engine.Model, budget time.Duration) (int, time.Duration, error) {
	tv := m.Meta.TestVector
	inputs := make([]engine.Tensor, len(m.Inputs()))
	for i, spec := range m.Inputs() {
		t, err := tv.Inputs[spec.Name].Decode()
		if err != nil {
			return 0, 0, err
		}
		inputs[i] = t
	}
	start := time.Now()
	calls := 0
	for calls < 3 || (time.Since(start) < budget && calls < 100000) {
		if _, err := m.Run(ctx, inputs); err != nil {
			return 0, 0, err
		}
		calls++
	}
	return calls, time.Since(start) / time.Duration(calls), nil
}

// servedThreads returns m, or the one-thread session of its file that fw
// serve would keep instead with its default --threads, --instances and
// --max-batch-size (engine.TryOneThread), closing the other. A trial that
// fails is reported on w and m kept, as fw serve does.
func servedThreads(ctx context.Context, m *engine.Model, w io.Writer) *engine.Model {
	one, _, err := engine.TryOneThread(ctx, m, batcher.DefaultConfig().MaxBatchRows)
	switch {
	case err != nil:
		fmt.Fprintf(w, "fw: could not time %s with one intra-op thread; keeping %d: %v\n", m.Path, m.Threads(), err)
	case one != nil:
		m.Close()
		return one
	}
	return m
}

func printVerify(w io.Writer, m *engine.Model, r verifyReport) {
	fmt.Fprintf(w, "model    %s v%s (%s, %.1f MB, %s, %d threads, loaded in %.0f ms)\n", r.Name, r.Version, r.Format, float64(r.SizeBytes)/1e6, r.Device, r.Threads, r.LoadMS)
	for _, s := range m.Inputs() {
		fmt.Fprintf(w, "input    %s %s %s\n", s.Name, s.DType, engine.FormatShape(s.Shape))
	}
	for _, s := range m.Outputs() {
		fmt.Fprintf(w, "output   %s %s %s\n", s.Name, s.DType, engine.FormatShape(s.Shape))
	}
	if l := m.Labels(); len(l) > 0 {
		shown := l
		if len(shown) > 5 {
			shown = shown[:5]
		}
		fmt.Fprintf(w, "labels   %d (%s%s)\n", len(l), strings.Join(shown, ", "), map[bool]string{true: ", ...", false: ""}[len(l) > 5])
	}
	verdict := "PASS"
	if !r.tensorPassed {
		verdict = "FAIL"
	}
	fmt.Fprintf(w, "check    %d rows: max abs error %.3g (atol %g, rtol %g): %s\n", r.Rows, r.MaxAbsError, r.Atol, r.Rtol, verdict)
	if im := r.Image; im != nil {
		verdict := "PASS"
		if !im.Passed {
			verdict = "FAIL"
		}
		fmt.Fprintf(w, "image    %s picture through the image path: preprocessed max abs error %.3g (input_atol %g), outputs %.3g: %s\n", im.Picture, im.InputMaxAbsError, im.InputAtol, im.OutputMaxAbsError, verdict)
	}
	if r.Calls > 0 {
		fmt.Fprintf(w, "timing   %.1f us per call (batch %d, %d calls)\n", r.MicrosPer, r.Rows, r.Calls)
	}
}
