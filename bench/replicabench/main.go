// Command replicabench measures dashboard replicas on one PostgreSQL
// (docs/replicas.md): metric ingest through one `fw dashboard` against two
// on the same database (the same producers, split between them), and the
// live stream's latency across replicas (a producer POSTs to one, 50
// WebSocket clients read from the other). It builds fw, starts the
// dashboards as real processes on 127.0.0.1, records the load average next
// to each figure and writes the table between the replicas markers of
// docs/benchmarks.md. Run it under scripts/pg-test.sh (make bench-replicas)
// or with FW_BENCH_DATABASE_URL. Nothing here is asserted: it reports.
package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
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
	"github.com/fw-serve/fw/internal/benchdoc"
	_ "github.com/jackc/pgx/v5/stdlib"
)

type options struct {
	producers, events, keys int
	ingestFor               time.Duration
	clients, rate           int
	every, streamFor        time.Duration
}

func main() {
	md := flag.String("md", "docs/benchmarks.md", "markdown file whose replicas section gets the table (empty: print only)")
	var o options
	flag.IntVar(&o.producers, "producers", 8, "concurrent ingest clients (split evenly between the dashboards)")
	flag.IntVar(&o.events, "events", 250, "metrics events per POST")
	flag.IntVar(&o.keys, "keys", 4, "metric values per event (points per event)")
	flag.DurationVar(&o.ingestFor, "ingest-for", 10*time.Second, "how long each ingest measurement runs")
	flag.IntVar(&o.clients, "clients", 50, "WebSocket clients of the stream measurement (on the second dashboard)")
	flag.IntVar(&o.rate, "rate", 1000, "metric points per second of the stream measurement (POSTed to the first dashboard)")
	flag.DurationVar(&o.every, "every", 10*time.Millisecond, "batch interval of the stream measurement")
	flag.DurationVar(&o.streamFor, "stream-for", 10*time.Second, "how long the stream producer runs")
	flag.Parse()
	if err := run(o, *md); err != nil {
		fmt.Fprintln(os.Stderr, "replicabench:", err)
		os.Exit(1)
	}
}

func loadavg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "n/a"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "n/a"
	}
	return strings.Join(f[:3], " ")
}

func run(o options, md string) error {
	base := os.Getenv("FW_BENCH_DATABASE_URL")
	if base == "" {
		base = os.Getenv("FW_TEST_DATABASE_URL")
	}
	if base == "" {
		return fmt.Errorf("no PostgreSQL: run under scripts/pg-test.sh (make bench-replicas) or set FW_BENCH_DATABASE_URL")
	}
	dir, err := os.MkdirTemp("", "replicabench")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	bin := filepath.Join(dir, "fw")
	build := exec.Command("go", "build", "-o", bin, "./cmd/fw")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		return fmt.Errorf("building fw (run from the repository root): %w", err)
	}
	var pgVersion string
	if db, err := sql.Open("pgx", base); err == nil {
		_ = db.QueryRow("SHOW server_version").Scan(&pgVersion)
		db.Close()
	}

	type ingestRow struct {
		replicas int
		rate     float64
		posts    int
		p50, p99 time.Duration
		load     string
	}
	var rows []ingestRow
	for _, n := range []int{1, 2} {
		schema, err := newSchema(base)
		if err != nil {
			return err
		}
		urls, stop, err := startDashboards(bin, dir, schema, n)
		if err != nil {
			return err
		}
		rate, posts, lat, err := ingest(urls, o)
		load := loadavg()
		stop()
		if err != nil {
			return err
		}
		rows = append(rows, ingestRow{n, rate, len(lat), q(lat, .5), q(lat, .99), load})
		fmt.Fprintf(os.Stderr, "ingest with %d dashboard(s): %.0f points/s over %d POSTs (load %s)\n", n, rate, posts, load)
	}

	schema, err := newSchema(base)
	if err != nil {
		return err
	}
	urls, stop, err := startDashboards(bin, dir, schema, 2)
	if err != nil {
		return err
	}
	// The same clients and load, the producer POSTing to the clients' own
	// dashboard, then to the other one.
	same, err := streamAcross(urls[1], urls[1], o)
	same.load = loadavg()
	if err != nil {
		stop()
		return err
	}
	st, err := streamAcross(urls[0], urls[1], o)
	st.load = loadavg()
	stop()
	if err != nil {
		return err
	}

	var out strings.Builder
	cmdline := "make bench-replicas"
	if a := os.Args[1:]; len(a) > 0 {
		cmdline = "go run ./bench/replicabench " + strings.Join(a, " ")
	}
	fmt.Fprintf(&out, "Dashboard replicas (docs/replicas.md): `fw dashboard` processes on one PostgreSQL %s (a throwaway cluster from `scripts/pg-test.sh` with FW_PG_DURABLE=1: default fsync and synchronous_commit), everything on 127.0.0.1 of one machine (%s/%s, %d CPUs, %s): the dashboards, PostgreSQL and the load generator share its cores, so a second replica adds no CPU here: the load average is in each row.\n\n",
		orNA(pgVersion), runtime.GOOS, runtime.GOARCH, runtime.NumCPU(), runtime.Version())
	fmt.Fprintf(&out, "Command: `%s` (%s, %s)\n\n", cmdline, benchdoc.Commit(), time.Now().UTC().Format("2006-01-02"))
	fmt.Fprintf(&out, "**Ingest**: %d clients POST `/api/ingest` batches of %d `metrics` events × %d values (%d points) as fast as they are acknowledged, each to its own run, for %s; with two dashboards half of the clients POST to each.\n\n",
		o.producers, o.events, o.keys, o.events*o.keys, o.ingestFor)
	fmt.Fprintf(&out, "| dashboards | points/s stored | POSTs | POST p50 / p99 | load average (1, 5, 15 min) after |\n|---|---|---|---|---|\n")
	for _, r := range rows {
		fmt.Fprintf(&out, "| %d | %.0f | %d | %s / %s | %s |\n", r.replicas, r.rate, r.posts, ms(r.p50), ms(r.p99), r.load)
	}
	fmt.Fprintf(&out, "\n**Live stream across replicas**: %d WebSocket clients of dashboard B subscribed to one run while a producer POSTs %d points/s in batches of %d every %s for %s: first to B itself, then to dashboard A. Latency = receive time on B's clients − the time the batch was due (stamped in each event): the HTTP ingest and commit, then (across) PostgreSQL's NOTIFY to B, B's read of the feed table, and the fan-out.\n\n",
		o.clients, o.rate, st.perBatch, o.every, o.streamFor)
	fmt.Fprintf(&out, "| producer POSTs to | events delivered | p50 | p99 | max | ingest POST p50 / p99 | load average after |\n|---|---|---|---|---|---|---|\n")
	for _, r := range []struct {
		name string
		res  streamResult
	}{{"B (the clients' dashboard)", same}, {"A (the other dashboard)", st}} {
		fmt.Fprintf(&out, "| %s | %d of %d | %s | %s | %s | %s / %s | %s |\n", r.name, r.res.delivered, r.res.expected, ms(q(r.res.lat, .5)), ms(q(r.res.lat, .99)), ms(r.res.lat[len(r.res.lat)-1]), ms(q(r.res.post, .5)), ms(q(r.res.post, .99)), r.res.load)
	}
	fmt.Fprintf(&out, "\n")
	fmt.Fprintf(&out, "The stream's requirement is p99 ≤ 250 ms, on one dashboard or across replicas.\n")
	fmt.Print(out.String())
	if md != "" {
		if err := benchdoc.ReplaceSection(md, "replicas", out.String()); err != nil {
			return err
		}
		fmt.Println("wrote", md)
	}
	for _, r := range []streamResult{same, st} {
		if r.delivered != r.expected {
			return fmt.Errorf("lost events: %d of %d delivered", r.delivered, r.expected)
		}
	}
	return nil
}

func orNA(s string) string {
	if s == "" {
		return "(version unknown)"
	}
	return s
}

func q(d []time.Duration, p float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := slices.Clone(d)
	slices.Sort(s)
	return s[min(len(s)-1, int(p*float64(len(s))))]
}

func ms(d time.Duration) string { return fmt.Sprintf("%.1f ms", float64(d.Microseconds())/1000) }

// newSchema makes a fresh schema on base and returns a URL using it.
func newSchema(base string) (string, error) {
	db, err := sql.Open("pgx", base)
	if err != nil {
		return "", err
	}
	defer db.Close()
	var b [6]byte
	_, _ = rand.Read(b[:])
	schema := "bench_" + hex.EncodeToString(b[:])
	if _, err := db.Exec("CREATE SCHEMA " + schema); err != nil {
		return "", fmt.Errorf("creating schema: %w", err)
	}
	u, err := url.Parse(base)
	if err != nil {
		return "", err
	}
	qv := u.Query()
	qv.Set("search_path", schema)
	u.RawQuery = qv.Encode()
	return u.String(), nil
}

// startDashboards starts n dashboards on db, sharing a directory.
func startDashboards(bin, dir, db string, n int) ([]string, func(), error) {
	shared, err := os.MkdirTemp(dir, "shared")
	if err != nil {
		return nil, nil, err
	}
	var urls []string
	var stops []func()
	stopAll := func() {
		for _, s := range stops {
			s()
		}
	}
	for range n {
		ctx, cancel := context.WithCancel(context.Background())
		cmd := exec.CommandContext(ctx, bin, "dashboard", "--port", "0", "--log-level", "warn")
		cmd.Env = append(os.Environ(), "FW_EXPERIMENT_DIR="+filepath.Join(shared, "exp"), "FW_CHECKPOINT_DIR="+filepath.Join(shared, "ckpt"),
			"FW_DASHBOARD_TOKEN=", "FW_DATABASE_URL="+db)
		cmd.Cancel = func() error { return cmd.Process.Signal(os.Interrupt) }
		cmd.WaitDelay = 30 * time.Second
		out, _ := cmd.StdoutPipe()
		cmd.Stderr = os.Stderr
		if err := cmd.Start(); err != nil {
			cancel()
			stopAll()
			return nil, nil, err
		}
		stops = append(stops, func() { cancel(); _ = cmd.Wait() })
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
			if !ok {
				stopAll()
				return nil, nil, fmt.Errorf("fw dashboard exited before it was ready")
			}
			urls = append(urls, u)
		case <-time.After(60 * time.Second):
			stopAll()
			return nil, nil, fmt.Errorf("fw dashboard did not report ready")
		}
	}
	return urls, stopAll, nil
}

var client = &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}, Timeout: 60 * time.Second}

func post(u string, body []byte) error {
	resp, err := client.Post(u+"/api/ingest", "application/json", bytes.NewReader(body))
	if err != nil {
		return err
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !bytes.Contains(b, []byte(`"errors":[]`)) {
		return fmt.Errorf("ingest: %d %.300s", resp.StatusCode, b)
	}
	return nil
}

// ingest runs the producers against urls (round robin) and returns the
// points stored per second, the POST count and the POST latencies.
func ingest(urls []string, o options) (float64, int, []time.Duration, error) {
	var points atomic.Int64
	var mu sync.Mutex
	var lat []time.Duration
	var firstErr error
	var wg sync.WaitGroup
	deadline := time.Now().Add(o.ingestFor)
	start := time.Now()
	for p := range o.producers {
		u := urls[p%len(urls)]
		run := fmt.Sprintf("bench-%d-%d", p, time.Now().UnixNano())
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := post(u, []byte(fmt.Sprintf(`[{"type":"run_start","run_id":%q,"seq":1,"experiment":"replicabench"}]`, run))); err != nil {
				mu.Lock()
				firstErr = err
				mu.Unlock()
				return
			}
			seq, step := int64(1), 0
			var buf bytes.Buffer
			for time.Now().Before(deadline) {
				buf.Reset()
				buf.WriteByte('[')
				for e := range o.events {
					seq++
					step++
					if e > 0 {
						buf.WriteByte(',')
					}
					fmt.Fprintf(&buf, `{"type":"metrics","run_id":%q,"seq":%d,"step":%d,"values":{`, run, seq, step)
					for k := range o.keys {
						if k > 0 {
							buf.WriteByte(',')
						}
						fmt.Fprintf(&buf, `"m%d":%g`, k, float64(step)/float64(k+1))
					}
					buf.WriteString("}}")
				}
				buf.WriteByte(']')
				t0 := time.Now()
				if err := post(u, buf.Bytes()); err != nil {
					mu.Lock()
					firstErr = err
					mu.Unlock()
					return
				}
				d := time.Since(t0)
				points.Add(int64(o.events * o.keys))
				mu.Lock()
				lat = append(lat, d)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if firstErr != nil {
		return 0, 0, nil, firstErr
	}
	el := time.Since(start)
	return float64(points.Load()) / el.Seconds(), len(lat), lat, nil
}

type streamResult struct {
	lat, post           []time.Duration
	delivered, expected int64
	perBatch            int
	load                string
}

// streamAcross POSTs to a while o.clients read b's stream.
func streamAcross(a, b string, o options) (streamResult, error) {
	var res streamResult
	run := fmt.Sprintf("replicabench-%d", time.Now().UnixNano())
	if err := post(a, []byte(fmt.Sprintf(`[{"type":"run_start","run_id":%q,"seq":1,"experiment":"replicabench"}]`, run))); err != nil {
		return res, err
	}
	res.perBatch = max(1, int(float64(o.rate)*o.every.Seconds()))
	batches := int(o.streamFor / o.every)
	total := res.perBatch * batches
	res.expected = int64(total) * int64(o.clients)
	lat := make([][]time.Duration, o.clients)
	var recvd atomic.Int64
	var ready, done sync.WaitGroup
	ws := "ws" + strings.TrimPrefix(b, "http") + "/api/training/stream"
	conns := make([]*websocket.Conn, o.clients)
	for i := range o.clients {
		c, _, err := websocket.DefaultDialer.Dial(ws, nil)
		if err != nil {
			return res, fmt.Errorf("client %d: %w", i, err)
		}
		conns[i] = c
		if err := c.WriteJSON(map[string]any{"subscribe": []string{run}}); err != nil {
			return res, err
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
				_ = c.SetReadDeadline(time.Now().Add(o.streamFor + 30*time.Second))
				_, msg, err := c.ReadMessage()
				if err != nil {
					fmt.Fprintf(os.Stderr, "client %d: %v after %d events\n", i, err, n)
					if !acked {
						ready.Done()
					}
					return
				}
				now := time.Now()
				if json.Unmarshal(msg, &m) != nil {
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
	start := time.Now()
	seq, step := int64(1), 0
	var buf bytes.Buffer
	for bi := 0; bi < batches; bi++ {
		due := start.Add(time.Duration(bi+1) * o.every)
		time.Sleep(time.Until(due))
		buf.Reset()
		buf.WriteByte('[')
		stamp := due.UTC().Format(time.RFC3339Nano)
		for j := 0; j < res.perBatch; j++ {
			seq++
			step++
			if j > 0 {
				buf.WriteByte(',')
			}
			fmt.Fprintf(&buf, `{"type":"metrics","run_id":%q,"seq":%d,"step":%d,"time":%q,"values":{"loss":%g}}`, run, seq, step, stamp, 1/float64(step))
		}
		buf.WriteByte(']')
		t0 := time.Now()
		if err := post(a, buf.Bytes()); err != nil {
			return res, err
		}
		res.post = append(res.post, time.Since(t0))
	}
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
	for _, l := range lat {
		res.lat = append(res.lat, l...)
	}
	slices.Sort(res.lat)
	res.delivered = recvd.Load()
	if len(res.lat) == 0 {
		return res, fmt.Errorf("no event received")
	}
	return res, nil
}
