// Command overload measures what overload costs clients. fw serve runs a
// slow model (ResNet-18 behind /predict/image) with a short queue, is first
// measured closed-loop for the load it sustains, and then offered a multiple
// of that load open-loop (requests leave on a schedule whatever the answers
// do). It counts the answers by status, how many error answers (503 queue
// full, 504 timeout) closed their keep-alive connection, the connections the
// clients had to open, and the latency of the error answers.
//
// Each -bin is measured in turn under the same settings, so an older binary
// gives the "before" row:
//
//	go run ./bench/overload -bin now=bin/fw -bin before=/tmp/fw-old
package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fw-serve/fw/internal/benchdoc"
	"github.com/fw-serve/fw/internal/benchserve"
)

type binFlag []string

func (b *binFlag) String() string     { return strings.Join(*b, ",") }
func (b *binFlag) Set(v string) error { *b = append(*b, v); return nil }

func main() {
	var bins binFlag
	flag.Var(&bins, "bin", "label=path of an fw binary to measure (repeatable; default now=bin/fw)")
	model := flag.String("model", "build/models/resnet18.onnx", "a model slow enough to overload")
	imgPath := flag.String("image", "build/models/samples/rgb_224.jpg", "the picture every request sends")
	calib := flag.Duration("calibrate", 10*time.Second, "closed-loop run that finds the sustainable load")
	dur := flag.Duration("duration", 20*time.Second, "open-loop run at -factor times that load")
	factor := flag.Float64("factor", 4, "offered load, in multiples of the sustainable one")
	queue := flag.Int("max-queue", 32, "fw serve --max-queue")
	timeout := flag.Duration("timeout", time.Second, "fw serve --timeout")
	md := flag.String("md", "docs/benchmarks.md", "markdown file whose overload section gets the table (empty: print only)")
	flag.Parse()
	if len(bins) == 0 {
		bins = binFlag{"now=bin/fw"}
	}
	img, err := os.ReadFile(*imgPath)
	if err != nil {
		fmt.Fprintln(os.Stderr, "overload:", err)
		os.Exit(1)
	}
	var rows []string
	for _, b := range bins {
		label, path, ok := strings.Cut(b, "=")
		if !ok {
			label, path = path, b
		}
		row, err := measure(label, path, *model, img, *calib, *dur, *factor, *queue, *timeout)
		if err != nil {
			fmt.Fprintln(os.Stderr, "overload:", err)
			os.Exit(1)
		}
		rows = append(rows, row)
	}
	var doc strings.Builder
	fmt.Fprintf(&doc, "`go run ./bench/overload %s` on %s (%s): `fw serve --model %s --max-queue %d --timeout %s`; "+
		"the sustainable load is measured closed-loop (8 clients, %s), then %.0fx that load is offered open-loop for %s "+
		"(POST /predict/image, one JPEG each; a new request leaves on schedule whatever the answers do). "+
		"\"Closed\" counts error answers that also closed their keep-alive connection: each one costs the client a new connection.\n\n",
		strings.Join(prefixed("-bin ", bins), " "), benchdoc.Commit(), time.Now().UTC().Format("2006-01-02"), *model, *queue, *timeout, *calib, *factor, *dur)
	doc.WriteString("| binary | sustained req/s | offered req/s | 200/s | 503/s | 504/s | other | error answers that closed the connection | connections opened | error answer p50 / p99 ms |\n")
	doc.WriteString("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, r := range rows {
		doc.WriteString(r)
	}
	fmt.Print(doc.String())
	if *md != "" {
		if err := benchdoc.ReplaceSection(*md, "overload", doc.String()); err != nil {
			fmt.Fprintln(os.Stderr, "overload:", err)
			os.Exit(1)
		}
	}
}

func prefixed(p string, s []string) []string {
	out := make([]string, len(s))
	for i, v := range s {
		out[i] = p + v
	}
	return out
}

// counts is what one run saw.
type counts struct {
	ok, s503, s504, other, closed, failed atomic.Int64
	mu                                    sync.Mutex
	errLat                                []time.Duration
}

// client is an HTTP client that counts the connections it opens.
func client(dials *atomic.Int64) (*http.Client, *http.Transport) {
	d := &net.Dialer{}
	tr := &http.Transport{MaxIdleConnsPerHost: 4096, DisableCompression: true,
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			dials.Add(1)
			return d.DialContext(ctx, network, addr)
		}}
	return &http.Client{Transport: tr, Timeout: 60 * time.Second}, tr
}

// send posts the picture once and counts the answer.
func send(c *http.Client, url string, img []byte, n *counts) {
	start := time.Now()
	resp, err := c.Post(url+"/predict/image", "image/jpeg", bytes.NewReader(img))
	if err != nil {
		n.failed.Add(1)
		return
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	took := time.Since(start)
	switch resp.StatusCode {
	case 200:
		n.ok.Add(1)
		return
	case 503:
		n.s503.Add(1)
	case 504:
		n.s504.Add(1)
	default:
		n.other.Add(1)
	}
	if resp.Close {
		n.closed.Add(1)
	}
	n.mu.Lock()
	n.errLat = append(n.errLat, took)
	n.mu.Unlock()
}

func measure(label, bin, model string, img []byte, calib, dur time.Duration, factor float64, queue int, timeout time.Duration) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), calib+dur+3*time.Minute)
	defer cancel()
	srv, err := benchserve.Start(ctx, bin, "--model", model, "--max-queue", fmt.Sprint(queue), "--timeout", timeout.String())
	if err != nil {
		return "", err
	}
	defer srv.Stop()

	// Closed loop: 8 clients back to back.
	var dials atomic.Int64
	c, tr := client(&dials)
	var warm counts
	deadline := time.Now().Add(calib)
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(deadline) {
				send(c, srv.URL, img, &warm)
			}
		}()
	}
	wg.Wait()
	tr.CloseIdleConnections()
	sustained := float64(warm.ok.Load()) / calib.Seconds()
	if sustained < 1 {
		return "", fmt.Errorf("%s: no load sustained (%d ok, %d 503, %d failed)", label, warm.ok.Load(), warm.s503.Load(), warm.failed.Load())
	}

	// Open loop at factor x.
	dials.Store(0)
	c, tr = client(&dials)
	defer tr.CloseIdleConnections()
	var n counts
	rate := sustained * factor
	every := time.Duration(float64(time.Second) / rate)
	start := time.Now()
	sent := 0
	for time.Since(start) < dur {
		next := start.Add(time.Duration(sent) * every)
		if d := time.Until(next); d > 0 {
			time.Sleep(d)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			send(c, srv.URL, img, &n)
		}()
		sent++
	}
	wg.Wait()
	if _, _, err := srv.Mem(); err != nil {
		return "", fmt.Errorf("%s: the server is gone after the run: %w", label, err)
	}
	secs := dur.Seconds()
	slices.Sort(n.errLat)
	pct := func(p float64) float64 {
		if len(n.errLat) == 0 {
			return 0
		}
		return float64(n.errLat[min(len(n.errLat)-1, int(p*float64(len(n.errLat))))].Microseconds()) / 1000
	}
	errs := n.s503.Load() + n.s504.Load() + n.other.Load()
	return fmt.Sprintf("| %s | %.0f | %.0f | %.0f | %.0f | %.0f | %d | %d of %d | %d | %.1f / %.1f |\n",
		label, sustained, float64(sent)/secs, float64(n.ok.Load())/secs, float64(n.s503.Load())/secs, float64(n.s504.Load())/secs,
		n.other.Load()+n.failed.Load(), n.closed.Load(), errs, dials.Load(), pct(0.5), pct(0.99)), nil
}
