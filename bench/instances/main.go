// Command instances measures fw serve's --instances: N engine instances of
// the model (each its own ONNX Runtime session with CPUs/N threads, one
// batcher worker each) against one instance with all the threads, on the
// same requests, closed loop from a fixed number of keep-alive clients.
//
//	go run ./bench/instances                  # writes the instances section of docs/benchmarks.md
//	go run ./bench/instances -md "" -d 5s     # print only
package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"runtime"
	"strings"
	"time"

	"github.com/fw-serve/fw/internal/benchdoc"
	"github.com/fw-serve/fw/internal/benchserve"
)

func main() {
	bin := flag.String("bin", "bin/fw", "the fw binary")
	dur := flag.Duration("d", 15*time.Second, "measured time per row")
	clients := flag.Int("c", 16, "concurrent keep-alive clients")
	counts := flag.String("instances", "1,2", "the --instances values to compare")
	md := flag.String("md", "docs/benchmarks.md", "markdown file whose instances section gets the table (empty: print only)")
	flag.Parse()
	if err := run(*bin, *dur, *clients, strings.Split(*counts, ","), *md); err != nil {
		fmt.Fprintln(os.Stderr, "instances:", err)
		os.Exit(1)
	}
}

// workload is one model and the request it gets.
type workload struct {
	name, model, path, ctype string
	body                     []byte
}

func run(bin string, dur time.Duration, clients int, counts []string, md string) error {
	jpeg, err := os.ReadFile("build/models/samples/rgb_224.jpg")
	if err != nil {
		return err
	}
	row := `{"data":[[` + strings.TrimSuffix(strings.Repeat("0.5,", 64), ",") + `]]}`
	loads := []workload{
		{"/predict/image, resnet18.onnx (224x224 JPEG)", "build/models/resnet18.onnx", "/predict/image", "image/jpeg", jpeg},
		{"/predict, digits_mlp.onnx (1 row of 64)", "build/models/digits_mlp.onnx", "/predict", "application/json", []byte(row)},
	}
	var b strings.Builder
	fmt.Fprintf(&b, "`go run ./bench/instances -d %s -c %d -instances %s` on %s (%s), %d CPUs: `fw serve --model M --instances N` with its defaults otherwise (threads per instance = CPUs / N), %d keep-alive clients back to back for %s per row, on loopback.\n\n",
		dur, clients, strings.Join(counts, ","), benchdoc.Commit(), time.Now().UTC().Format("2006-01-02"), runtime.NumCPU(), clients, dur)
	b.WriteString("| workload | --instances | req/s | p50 ms | p99 ms | errors |\n|---|---:|---:|---:|---:|---:|\n")
	for _, w := range loads {
		for _, n := range counts {
			r, err := measure(bin, w, strings.TrimSpace(n), dur, clients)
			if err != nil {
				return err
			}
			b.WriteString(r)
		}
	}
	fmt.Print(b.String())
	if md != "" {
		return benchdoc.ReplaceSection(md, "instances", b.String())
	}
	return nil
}

func measure(bin string, w workload, n string, dur time.Duration, clients int) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), dur+3*time.Minute)
	defer cancel()
	srv, err := benchserve.Start(ctx, bin, "--model", w.model, "--instances", n)
	if err != nil {
		return "", err
	}
	defer srv.Stop()
	tr := &http.Transport{MaxIdleConnsPerHost: clients, DisableCompression: true}
	defer tr.CloseIdleConnections()
	c := &http.Client{Transport: tr, Timeout: time.Minute}
	post := func(int, int) (time.Duration, error) {
		start := time.Now()
		resp, err := c.Post(srv.URL+w.path, w.ctype, bytes.NewReader(w.body))
		if err != nil {
			return 0, err
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			return 0, fmt.Errorf("%s answered %d", w.path, resp.StatusCode)
		}
		return time.Since(start), nil
	}
	// Warm-up, then the measured run.
	for range 2 * clients {
		post(0, 0)
	}
	lat, errs := benchserve.ClosedLoop(clients, dur, post)
	return fmt.Sprintf("| %s | %s | %.0f | %.2f | %.2f | %d |\n", w.name, n, float64(len(lat))/dur.Seconds(), benchserve.PercentileMs(lat, 0.5), benchserve.PercentileMs(lat, 0.99), errs), nil
}
