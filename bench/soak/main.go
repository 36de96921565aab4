// Command soak runs a real `fw serve` under mixed good and hostile traffic on
// loopback for a bounded time and reports what a long-running replica must
// show: every bad request answered 4xx, no 5xx, no dropped connections, and
// resident memory that stops growing after warm-up.
//
// It samples the server's VmRSS and VmHWM from /proc/PID/status, counts
// answers by status class per request kind, and with -md writes the table
// between the soak markers of docs/benchmarks.md.
//
//	go run ./bench/soak -duration 10m                # builds nothing: uses bin/fw
//	go run ./bench/soak -duration 30s -md ""        # a smoke run, printed only
package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"mime/multipart"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fw-serve/fw/internal/benchdoc"
	"github.com/fw-serve/fw/internal/benchserve"
)

func main() {
	bin := flag.String("bin", "bin/fw", "the fw binary to start")
	model := flag.String("model", "build/models/digits_cnn.onnx", "model file to serve (an image model, so /predict/image is exercised)")
	imgPath := flag.String("image", "build/models/samples/digit_3_2.png", "a PNG the image requests send")
	dur := flag.Duration("duration", 10*time.Minute, "how long traffic runs (bounded)")
	warm := flag.Duration("warmup", time.Minute, "traffic before the baseline RSS is taken")
	workers := flag.Int("workers", 8, "concurrent clients, each on its own keep-alive connection")
	md := flag.String("md", "docs/benchmarks.md", "markdown file whose soak section gets the table (empty: print only)")
	flag.Parse()
	if err := run(*bin, *model, *imgPath, *dur, *warm, *workers, *md); err != nil {
		fmt.Fprintln(os.Stderr, "soak:", err)
		os.Exit(1)
	}
}

// kind is one request shape of the mix: good ones must answer 2xx, bad ones
// 4xx; every kind must keep the server up.
type kind struct {
	name string
	good bool
	make func() (*http.Request, error)
	// closeOK: the server may answer by closing the connection promptly
	// (within a second) instead of a 4xx, as fasthttp does for a body
	// over --max-body-bytes while the client is still sending it.
	closeOK bool
}

// tally counts a kind's answers by class.
type tally struct {
	ok, c4xx, c5xx, other, connErr, closed atomic.Int64
}

func run(bin, model, imgPath string, dur, warm time.Duration, workers int, md string) error {
	if warm >= dur {
		return fmt.Errorf("-warmup %s must be shorter than -duration %s", warm, dur)
	}
	img, err := os.ReadFile(imgPath)
	if err != nil {
		return fmt.Errorf("read the sample image: %w", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), dur+2*time.Minute)
	defer cancel()
	srv, err := benchserve.Start(ctx, bin, "--model", model)
	if err != nil {
		return err
	}
	defer srv.Stop()

	kinds := mix(srv.URL, img)
	counts := make([]tally, len(kinds))
	tr := &http.Transport{MaxIdleConnsPerHost: workers, MaxConnsPerHost: workers, DisableCompression: true}
	defer tr.CloseIdleConnections()
	var dials atomic.Int64
	dialer := &net.Dialer{}
	tr.DialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
		dials.Add(1)
		return dialer.DialContext(ctx, network, addr)
	}
	client := &http.Client{Transport: tr, Timeout: 30 * time.Second}

	start := time.Now()
	deadline := start.Add(dur)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func(seed uint64) {
			defer wg.Done()
			r := rand.New(rand.NewPCG(seed, 7))
			for time.Now().Before(deadline) {
				i := r.IntN(len(kinds))
				if r.IntN(4) != 0 { // three requests in four are good ones
					i = r.IntN(2)
				}
				send(client, kinds[i], &counts[i])
			}
		}(uint64(w))
	}

	type sample struct {
		at       time.Duration
		rss, hwm int64
	}
	var samples []sample
	tick := time.NewTicker(5 * time.Second)
	defer tick.Stop()
	for done := false; !done; {
		select {
		case <-tick.C:
		case <-ctx.Done():
			return errors.New("the run overran its own deadline")
		}
		rss, hwm, err := srv.Mem()
		if err != nil {
			return fmt.Errorf("the server is gone after %s: %w", time.Since(start).Round(time.Second), err)
		}
		samples = append(samples, sample{time.Since(start), rss, hwm})
		done = time.Now().After(deadline)
	}
	wg.Wait()
	if _, _, err := srv.Mem(); err != nil {
		return fmt.Errorf("the server is gone at the end: %w", err)
	}

	base := samples[0]
	for _, s := range samples {
		if s.at >= warm {
			base = s
			break
		}
	}
	last := samples[len(samples)-1]
	growth := 100 * float64(last.rss-base.rss) / float64(base.rss)

	var b strings.Builder
	fmt.Fprintf(&b, "`go run ./bench/soak -duration %s -warmup %s -workers %d` on %s (%s): `fw serve --model %s`, %d keep-alive clients on loopback, three requests in four good, the rest drawn from the bad kinds below.\n\n",
		dur, warm, workers, benchdoc.Commit(), time.Now().UTC().Format("2006-01-02"), filepath.Base(model), workers)
	fmt.Fprintf(&b, "| request | expected | answers | 2xx | 4xx | 5xx | other | closed at once (allowed) | connection errors |\n|---|---|---:|---:|---:|---:|---:|---:|---:|\n")
	var total, bad5xx, wrong, connErrs int64
	for i, k := range kinds {
		c := &counts[i]
		n := c.ok.Load() + c.c4xx.Load() + c.c5xx.Load() + c.other.Load()
		total += n
		bad5xx += c.c5xx.Load()
		connErrs += c.connErr.Load()
		exp := "4xx"
		if k.good {
			exp = "2xx"
			wrong += c.c4xx.Load() + c.other.Load()
		} else {
			wrong += c.ok.Load() + c.other.Load()
		}
		if k.closeOK {
			exp += " or a prompt close"
		}
		fmt.Fprintf(&b, "| %s | %s | %d | %d | %d | %d | %d | %d | %d |\n", k.name, exp, n, c.ok.Load(), c.c4xx.Load(), c.c5xx.Load(), c.other.Load(), c.closed.Load(), c.connErr.Load())
	}
	fmt.Fprintf(&b, "\n%d answers in %s (%.0f/s); %d connections opened for %d clients.\n\n", total, dur, float64(total)/dur.Seconds(), dials.Load(), workers)
	fmt.Fprintf(&b, "Resident memory (VmRSS) after %s of warm-up: %.1f MB; at the end: %.1f MB (%+.1f %%); peak (VmHWM) %.1f MB.\n",
		base.at.Round(time.Second), mb(base.rss), mb(last.rss), growth, mb(last.hwm))
	fmt.Print(b.String())
	if md != "" {
		if err := benchdoc.ReplaceSection(md, "soak", b.String()); err != nil {
			return err
		}
	}
	switch {
	case bad5xx > 0:
		return fmt.Errorf("%d answers were 5xx", bad5xx)
	case wrong > 0:
		return fmt.Errorf("%d answers were not of their expected class", wrong)
	case connErrs > 0:
		return fmt.Errorf("%d requests failed at the connection", connErrs)
	case growth > 5:
		return fmt.Errorf("resident memory grew %.1f %% after warm-up (goal: under 5 %%)", growth)
	}
	return nil
}

func mb(b int64) float64 { return float64(b) / (1 << 20) }

// send makes one request and counts its answer; the body is read to the end
// so the connection is reused.
func send(c *http.Client, k kind, t *tally) {
	req, err := k.make()
	if err != nil {
		t.connErr.Add(1)
		return
	}
	start := time.Now()
	resp, err := c.Do(req)
	if err != nil {
		if k.closeOK && time.Since(start) < time.Second {
			t.closed.Add(1)
			return
		}
		t.connErr.Add(1)
		return
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	switch {
	case resp.StatusCode/100 == 2:
		t.ok.Add(1)
	case resp.StatusCode/100 == 4:
		t.c4xx.Add(1)
	case resp.StatusCode/100 == 5:
		t.c5xx.Add(1)
	default:
		t.other.Add(1)
	}
}

// mix is the traffic: two good kinds first (send picks them three times in
// four), then the hostile ones, each a request an outside fuzzer or a
// careless client sends.
func mix(base string, img []byte) []kind {
	row := func(n int) string {
		var b strings.Builder
		b.WriteString("[")
		for i := range n {
			if i > 0 {
				b.WriteString(",")
			}
			b.WriteString(strconv.FormatFloat(float64(i%17)/17, 'f', 3, 64))
		}
		b.WriteString("]")
		return b.String()
	}
	// digits_cnn takes [N, 1, 8, 8]: one row is 64 values nested by the shape.
	good := `{"data": [` + nest(row(64)) + `]}`
	post := func(path, ct string, body []byte) func() (*http.Request, error) {
		return func() (*http.Request, error) {
			r, err := http.NewRequest(http.MethodPost, base+path, bytes.NewReader(body))
			if err == nil {
				r.Header.Set("Content-Type", ct)
			}
			return r, err
		}
	}
	var mp bytes.Buffer
	mw := multipart.NewWriter(&mp)
	fw, _ := mw.CreateFormFile("file", "digit.png")
	fw.Write(img)
	mw.Close()
	huge := bytes.Repeat([]byte("[0.5],"), (65<<20)/6)
	return []kind{
		{"POST /predict, one good row", true, post("/predict", "application/json", []byte(good)), false},
		{"POST /predict/image, a PNG (multipart)", true, post("/predict/image", mw.FormDataContentType(), mp.Bytes()), false},
		{"POST /predict, malformed JSON", false, post("/predict", "application/json", []byte(`{"data": [[1,2,`)), false},
		{"POST /predict, wrong shape", false, post("/predict", "application/json", []byte(`{"data": [[1,2,3]]}`)), false},
		{"POST /predict, NaN", false, post("/predict", "application/json", []byte(`{"data": [`+strings.Replace(nest(row(64)), "0.000", "NaN", 1)+`]}`)), false},
		{"POST /predict/image?height=2^40&width=2^40", false, post("/predict/image?height=1099511627776&width=1099511627776", "image/png", img), false},
		{"POST /predict/image, not an image", false, post("/predict/image", "image/png", []byte("GIF89a this is not a picture")), false},
		{"POST /v2/models/m/infer, shape overflow", false, post("/v2/models/digits_cnn/infer", "application/json",
			[]byte(`{"inputs":[{"name":"input","datatype":"FP32","shape":[4611686018427387904,4,1,1],"data":[1]}]}`)), false},
		{"POST /predict, 65 MB body (over --max-body-bytes)", false, post("/predict", "application/json", append(append([]byte(`{"data": [`), huge...), []byte(`[0.5]]}`)...)), true},
		{"GET /nope", false, func() (*http.Request, error) { return http.NewRequest(http.MethodGet, base+"/nope", nil) }, false},
		{"DELETE /predict", false, func() (*http.Request, error) { return http.NewRequest(http.MethodDelete, base+"/predict", nil) }, false},
	}
}

// nest turns a flat 64-value row into digits_cnn's [1, 8, 8] nesting.
func nest(flat string) string {
	vals := strings.Split(strings.Trim(flat, "[]"), ",")
	var b strings.Builder
	b.WriteString("[[")
	for r := range 8 {
		if r > 0 {
			b.WriteString(",")
		}
		b.WriteString("[" + strings.Join(vals[r*8:r*8+8], ",") + "]")
	}
	b.WriteString("]]")
	return b.String()
}
