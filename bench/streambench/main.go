// Command streambench measures the dashboard's live stream: N WebSocket
// clients subscribed to one run while a producer POSTs metric points to
// /api/ingest at a fixed rate in small batches. Each point carries its send
// time; a client's latency for it is receive time minus that time (same
// host, same clock). It reports p50, p99 and max, and with -md writes the
// table between the stream markers of docs/benchmarks.md.
//
//	go run ./bench/streambench                 # builds and starts fw dashboard
//	go run ./bench/streambench -url http://127.0.0.1:8080 -token T
package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"github.com/fw-serve/fw/internal/benchdoc"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fasthttp/websocket"
)

func main() {
	url := flag.String("url", "", "dashboard to use; empty: build ./cmd/fw and start `fw dashboard` on a free port over a temporary directory")
	token := flag.String("token", os.Getenv("FW_DASHBOARD_TOKEN"), "dashboard token (with -url)")
	clients := flag.Int("clients", 50, "WebSocket clients subscribed to the run")
	rate := flag.Int("rate", 1000, "metric points per second")
	every := flag.Duration("every", 10*time.Millisecond, "batch interval")
	dur := flag.Duration("duration", 10*time.Second, "how long the producer runs")
	md := flag.String("md", "docs/benchmarks.md", "markdown file whose stream section gets the table (empty: print only)")
	flag.Parse()
	if err := run(*url, *token, *clients, *rate, *every, *dur, *md); err != nil {
		fmt.Fprintln(os.Stderr, "streambench:", err)
		os.Exit(1)
	}
}

func run(url, token string, clients, rate int, every, dur time.Duration, md string) error {
	if url == "" {
		u, stop, err := startDashboard()
		if err != nil {
			return err
		}
		defer stop()
		url, token = u, ""
	}
	run := fmt.Sprintf("streambench-%d", time.Now().UnixNano())
	post := func(body []byte) error {
		req, _ := http.NewRequest("POST", url+"/api/ingest", bytes.NewReader(body))
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return err
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || !bytes.Contains(b, []byte(`"errors":[]`)) {
			return fmt.Errorf("ingest: %d %s", resp.StatusCode, b)
		}
		return nil
	}
	if err := post([]byte(fmt.Sprintf(`[{"type":"run_start","run_id":%q,"seq":1,"experiment":"streambench"}]`, run))); err != nil {
		return err
	}

	perBatch := max(1, int(float64(rate)*every.Seconds()))
	batches := int(dur / every)
	total := perBatch * batches
	lat := make([][]time.Duration, clients)
	var recvd atomic.Int64
	var ready, done sync.WaitGroup
	ws := "ws" + strings.TrimPrefix(url, "http") + "/api/training/stream"
	h := http.Header{}
	if token != "" {
		h.Set("Authorization", "Bearer "+token)
	}
	conns := make([]*websocket.Conn, clients)
	for i := range clients {
		c, _, err := websocket.DefaultDialer.Dial(ws, h)
		if err != nil {
			return fmt.Errorf("client %d: %w", i, err)
		}
		conns[i] = c
		if err := c.WriteJSON(map[string]any{"subscribe": []string{run}}); err != nil {
			return err
		}
		ready.Add(1)
		done.Add(1)
		go func() {
			defer done.Done()
			var m struct {
				Type string    `json:"type"`
				Time time.Time `json:"time"`
			}
			acked := false
			for n := 0; n < total; {
				_ = c.SetReadDeadline(time.Now().Add(dur + 30*time.Second))
				_, b, err := c.ReadMessage()
				if err != nil {
					fmt.Fprintf(os.Stderr, "client %d: %v after %d events\n", i, err, n)
					if !acked {
						ready.Done()
					}
					return
				}
				now := time.Now()
				if err := json.Unmarshal(b, &m); err != nil {
					continue
				}
				switch m.Type {
				case "subscribed":
					acked = true
					ready.Done()
				case "metric":
					lat[i] = append(lat[i], now.Sub(m.Time))
					n++
					recvd.Add(1)
				}
			}
		}()
	}
	ready.Wait()

	// Producer: perBatch points every interval, each stamped with the time
	// its batch was due (not when it went out: a stalled server is not
	// hidden by a producer that falls behind).
	start := time.Now()
	seq, step := int64(1), 0
	var postLat []time.Duration
	var buf bytes.Buffer
	for b := 0; b < batches; b++ {
		due := start.Add(time.Duration(b+1) * every)
		time.Sleep(time.Until(due))
		buf.Reset()
		buf.WriteByte('[')
		now := due.UTC().Format(time.RFC3339Nano)
		for j := 0; j < perBatch; j++ {
			seq++
			step++
			if j > 0 {
				buf.WriteByte(',')
			}
			fmt.Fprintf(&buf, `{"type":"metrics","run_id":%q,"seq":%d,"step":%d,"time":%q,"values":{"loss":%g}}`, run, seq, step, now, 1/float64(step))
		}
		buf.WriteByte(']')
		t0 := time.Now()
		if err := post(buf.Bytes()); err != nil {
			return err
		}
		postLat = append(postLat, time.Since(t0))
	}
	sent := time.Since(start)
	wait := make(chan struct{})
	go func() { done.Wait(); close(wait) }()
	select {
	case <-wait:
	case <-time.After(30 * time.Second):
	}
	for _, c := range conns {
		c.Close()
	}
	<-wait

	var all []time.Duration
	for _, l := range lat {
		all = append(all, l...)
	}
	slices.Sort(all)
	slices.Sort(postLat)
	if len(all) == 0 {
		return fmt.Errorf("no event received")
	}
	q := func(d []time.Duration, p float64) time.Duration { return d[min(len(d)-1, int(p*float64(len(d))))] }
	ms := func(d time.Duration) string { return fmt.Sprintf("%.1f ms", float64(d.Microseconds())/1000) }
	cmdline := "go run ./bench/streambench"
	if a := os.Args[1:]; len(a) > 0 {
		cmdline += " " + strings.Join(a, " ")
	}
	var out strings.Builder
	fmt.Fprintf(&out, "Live stream (`/api/training/stream`): %d WebSocket clients subscribed to one run, a producer POSTing %d points/s to `/api/ingest` in batches of %d every %s for %s (SQLite store, dashboard and clients on the same host: %s/%s, %d CPUs, %s). Latency = receive time − the time its batch was due, stamped in the event (includes the producer's HTTP POST to /api/ingest and the store's commit).\n\n",
		clients, rate, perBatch, every, dur, runtime.GOOS, runtime.GOARCH, runtime.NumCPU(), runtime.Version())
	fmt.Fprintf(&out, "Command: `%s` (%s, %s)\n\n", cmdline, benchdoc.Commit(), time.Now().UTC().Format("2006-01-02"))
	fmt.Fprintf(&out, "| events delivered | p50 | p99 | max | ingest POST p50 / p99 |\n|---|---|---|---|---|\n")
	fmt.Fprintf(&out, "| %d of %d (%d × %d) | %s | %s | %s | %s / %s |\n\n", recvd.Load(), int64(total)*int64(clients), total, clients,
		ms(q(all, .50)), ms(q(all, .99)), ms(all[len(all)-1]), ms(q(postLat, .50)), ms(q(postLat, .99)))
	fmt.Fprintf(&out, "Producer ran %.1f s for %.1f s planned; the requirement is p99 ≤ 250 ms.\n", sent.Seconds(), dur.Seconds())
	fmt.Print(out.String())
	if md != "" {
		if err := benchdoc.ReplaceSection(md, "stream", out.String()); err != nil {
			return err
		}
		fmt.Println("wrote", md)
	}
	if recvd.Load() != int64(total)*int64(clients) {
		return fmt.Errorf("lost events: %d of %d delivered", recvd.Load(), int64(total)*int64(clients))
	}
	return nil
}

// startDashboard builds fw and starts `fw dashboard` on a free port.
func startDashboard() (string, func(), error) {
	dir, err := os.MkdirTemp("", "streambench")
	if err != nil {
		return "", nil, err
	}
	bin := filepath.Join(dir, "fw")
	build := exec.Command("go", "build", "-o", bin, "./cmd/fw")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		os.RemoveAll(dir)
		return "", nil, fmt.Errorf("building fw (run from the repository root): %w", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cmd := exec.CommandContext(ctx, bin, "dashboard", "--port", "0", "--log-level", "warn")
	cmd.Env = append(os.Environ(), "FW_EXPERIMENT_DIR="+filepath.Join(dir, "exp"), "FW_CHECKPOINT_DIR="+filepath.Join(dir, "ckpt"),
		"FW_DASHBOARD_TOKEN=", "FW_DATABASE_URL=")
	cmd.Cancel = func() error { return cmd.Process.Signal(os.Interrupt) }
	cmd.WaitDelay = 30 * time.Second
	out, _ := cmd.StdoutPipe()
	cmd.Stderr = os.Stderr
	stop := func() { cancel(); _ = cmd.Wait(); os.RemoveAll(dir) }
	if err := cmd.Start(); err != nil {
		cancel()
		os.RemoveAll(dir)
		return "", nil, err
	}
	urlc := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if _, u, ok := strings.Cut(sc.Text(), "ready on "); ok {
				urlc <- strings.Fields(u)[0]
			}
		}
		close(urlc)
	}()
	select {
	case u, ok := <-urlc:
		if ok {
			return u, stop, nil
		}
	case <-time.After(60 * time.Second):
	}
	stop()
	return "", nil, fmt.Errorf("fw dashboard did not report ready")
}
