package telemetry

import (
	"bytes"
	"compress/gzip"
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	_ "google.golang.org/grpc/encoding/gzip" // registers the "gzip" compressor for OTEL_EXPORTER_OTLP_COMPRESSION
	"google.golang.org/grpc/metadata"

	"github.com/fw-serve/fw/internal/worker"
)

// Export is how spans leave: the OTLP receiver and the batching, as the
// standard environment sets them (Tracer reads it with ExportFromEnv).
type Export struct {
	// Endpoint: for HTTP the full traces URL; for gRPC host:port.
	Endpoint string
	Insecure bool // gRPC without TLS
	// CAFile is a PEM file of the roots the receiver's certificate is
	// checked against ("" for the system's).
	CAFile      string
	Headers     map[string]string
	Gzip        bool
	Timeout     time.Duration // one export call
	Delay       time.Duration // longest a span waits to be sent
	MaxQueue    int           // spans waiting; more are dropped, counted
	MaxBatch    int           // spans in one export call
	Description string        // what the log says
}

// exportFromEnv completes e from OpenTelemetry's exporter and batch span
// processor variables (OTEL_EXPORTER_OTLP_[TRACES_]ENDPOINT, _HEADERS,
// _TIMEOUT, _COMPRESSION, _INSECURE, _CERTIFICATE; OTEL_BSP_SCHEDULE_DELAY,
// _MAX_QUEUE_SIZE, _MAX_EXPORT_BATCH_SIZE) for protocol; endpoint, when
// set, is the flag's URL, which wins over the variables.
func exportFromEnv(getenv func(string) string, protocol, endpoint string) (Export, error) {
	pick := func(name string) string {
		if v := getenv("OTEL_EXPORTER_OTLP_TRACES_" + name); v != "" {
			return v
		}
		return getenv("OTEL_EXPORTER_OTLP_" + name)
	}
	e := Export{Timeout: 10 * time.Second, Delay: 5 * time.Second, MaxQueue: 2048, MaxBatch: 512}
	raw, perSignal := endpoint, endpoint != ""
	if raw == "" {
		if raw = getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"); raw != "" {
			perSignal = true
		} else if raw = getenv("OTEL_EXPORTER_OTLP_ENDPOINT"); raw == "" {
			if protocol == ProtocolGRPC {
				raw = "http://localhost:4317"
			} else {
				raw = "http://localhost:4318"
			}
		}
	}
	e.Insecure = strings.EqualFold(pick("INSECURE"), "true")
	switch protocol {
	case ProtocolGRPC:
		if u, err := url.Parse(raw); err == nil && (u.Scheme == "http" || u.Scheme == "https") && u.Host != "" {
			e.Endpoint, e.Insecure = u.Host, u.Scheme == "http"
		} else if strings.Contains(raw, "://") {
			return e, fmt.Errorf("OTLP endpoint %q: give http://HOST:PORT or https://HOST:PORT", raw)
		} else {
			e.Endpoint = raw // host:port; TLS unless OTEL_EXPORTER_OTLP_INSECURE=true
		}
	default:
		u, err := url.Parse(raw)
		if err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
			return e, fmt.Errorf("OTLP endpoint %q: give a URL such as http://127.0.0.1:4318", raw)
		}
		if !perSignal {
			u.Path = strings.TrimSuffix(u.Path, "/") + "/v1/traces" // OTEL_EXPORTER_OTLP_ENDPOINT is a base URL
		} else if u.Path == "" || u.Path == "/" {
			u.Path = "/v1/traces" // a flag's bare host: the traces path
		}
		e.Endpoint = u.String()
	}
	e.CAFile = pick("CERTIFICATE")
	if h := pick("HEADERS"); h != "" {
		e.Headers = map[string]string{}
		for _, kv := range strings.Split(h, ",") {
			k, v, ok := strings.Cut(kv, "=")
			k, _ = url.PathUnescape(strings.TrimSpace(k))
			v, _ = url.PathUnescape(strings.TrimSpace(v))
			if !ok || k == "" {
				return e, fmt.Errorf("OTEL_EXPORTER_OTLP_HEADERS: %q is not KEY=VALUE", kv)
			}
			e.Headers[strings.ToLower(k)] = v
		}
	}
	switch c := strings.TrimSpace(pick("COMPRESSION")); c {
	case "", "none":
	case "gzip":
		e.Gzip = true
	default:
		return e, fmt.Errorf("OTEL_EXPORTER_OTLP_COMPRESSION=%q: use gzip or none", c)
	}
	ms := func(name string, dst *time.Duration) error {
		if v := strings.TrimSpace(getenv(name)); v != "" {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil || n <= 0 || n > 3_600_000 {
				return fmt.Errorf("%s=%q: give milliseconds, from 1 to 3600000", name, v)
			}
			*dst = time.Duration(n) * time.Millisecond
		}
		return nil
	}
	count := func(name string, dst *int) error {
		if v := strings.TrimSpace(getenv(name)); v != "" {
			n, err := strconv.Atoi(v)
			if err != nil || n <= 0 || n > 1<<20 {
				return fmt.Errorf("%s=%q: give a whole number from 1 to 1048576", name, v)
			}
			*dst = n
		}
		return nil
	}
	timeoutVar := "OTEL_EXPORTER_OTLP_TRACES_TIMEOUT"
	if getenv(timeoutVar) == "" {
		timeoutVar = "OTEL_EXPORTER_OTLP_TIMEOUT"
	}
	for _, err := range []error{
		ms(timeoutVar, &e.Timeout), ms("OTEL_BSP_SCHEDULE_DELAY", &e.Delay),
		count("OTEL_BSP_MAX_QUEUE_SIZE", &e.MaxQueue), count("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", &e.MaxBatch),
	} {
		if err != nil {
			return e, err
		}
	}
	e.MaxBatch = min(e.MaxBatch, e.MaxQueue)
	e.Description = protocol + " " + e.Endpoint
	return e, nil
}

// record is the spans of one traced request or engine call, queued for the
// exporter. Records are pooled: the exporter returns each once encoded.
type record struct {
	spans []span
}

// exporter batches records and sends them to the receiver from one
// goroutine. The serving path only queues (never waits): a full queue
// drops the record, counted.
type exporter struct {
	cfg   Export
	send  func(ctx context.Context, body []byte) error
	close func()
	log   *slog.Logger

	queue   chan *record
	waiting atomic.Int64 // spans queued
	// free holds records for reuse: a channel rather than a sync.Pool,
	// which every GC empties (and a traced server collects often).
	free    chan *record
	flushes chan chan struct{}
	stop    chan struct{}
	stopped sync.Once
	done    chan struct{}

	resource, scope []byte

	exported, dropped, failed atomic.Uint64
	lastLog                   atomic.Int64 // Unix seconds of the last failure logged
}

func newExporter(cfg Export, protocol string, resource, scope []byte, log *slog.Logger) (*exporter, error) {
	x := &exporter{
		cfg: cfg, log: log, resource: resource, scope: scope,
		queue:   make(chan *record, cfg.MaxQueue),
		flushes: make(chan chan struct{}),
		stop:    make(chan struct{}),
		done:    make(chan struct{}),
	}
	x.free = make(chan *record, min(cfg.MaxQueue, 4096))
	var tlsCfg *tls.Config
	if cfg.CAFile != "" {
		pem, err := os.ReadFile(cfg.CAFile)
		if err != nil {
			return nil, fmt.Errorf("OTEL_EXPORTER_OTLP_CERTIFICATE: %w", err)
		}
		roots := x509.NewCertPool()
		if !roots.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("OTEL_EXPORTER_OTLP_CERTIFICATE %s: no PEM certificate in it", cfg.CAFile)
		}
		tlsCfg = &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12}
	}
	switch protocol {
	case ProtocolGRPC:
		creds := insecure.NewCredentials()
		if !cfg.Insecure {
			if tlsCfg == nil {
				tlsCfg = &tls.Config{MinVersion: tls.VersionTLS12}
			}
			creds = credentials.NewTLS(tlsCfg)
		}
		conn, err := grpc.NewClient(cfg.Endpoint, grpc.WithTransportCredentials(creds))
		if err != nil {
			return nil, fmt.Errorf("OTLP gRPC endpoint %q: %w", cfg.Endpoint, err)
		}
		var md metadata.MD
		if len(cfg.Headers) > 0 {
			md = metadata.New(cfg.Headers)
		}
		opts := []grpc.CallOption{grpc.ForceCodec(rawCodec{})}
		if cfg.Gzip {
			opts = append(opts, grpc.UseCompressor("gzip"))
		}
		x.send = func(ctx context.Context, body []byte) error {
			if md != nil {
				ctx = metadata.NewOutgoingContext(ctx, md)
			}
			var reply []byte
			return conn.Invoke(ctx, "/opentelemetry.proto.collector.trace.v1.TraceService/Export", &body, &reply, opts...)
		}
		x.close = func() { conn.Close() }
	default:
		tr := &http.Transport{TLSClientConfig: tlsCfg, MaxIdleConnsPerHost: 2, IdleConnTimeout: time.Minute, ForceAttemptHTTP2: true}
		client := &http.Client{Transport: tr}
		var zbuf bytes.Buffer
		zw := gzip.NewWriter(&zbuf)
		x.send = func(ctx context.Context, body []byte) error {
			if cfg.Gzip {
				zbuf.Reset()
				zw.Reset(&zbuf)
				if _, err := zw.Write(body); err != nil {
					return err
				}
				if err := zw.Close(); err != nil {
					return err
				}
				body = zbuf.Bytes()
			}
			req, err := http.NewRequestWithContext(ctx, http.MethodPost, cfg.Endpoint, bytes.NewReader(body))
			if err != nil {
				return err
			}
			req.Header.Set("Content-Type", "application/x-protobuf")
			if cfg.Gzip {
				req.Header.Set("Content-Encoding", "gzip")
			}
			for k, v := range cfg.Headers {
				req.Header.Set(k, v)
			}
			resp, err := client.Do(req)
			if err != nil {
				return err
			}
			msg, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
			resp.Body.Close()
			if resp.StatusCode/100 != 2 {
				return fmt.Errorf("the receiver answered %s: %s", resp.Status, strings.TrimSpace(string(msg)))
			}
			return nil
		}
		x.close = tr.CloseIdleConnections
	}
	go x.run()
	return x, nil
}

// rawCodec sends an encoded message as it is (the exporter writes the
// protobuf itself) and ignores the reply.
type rawCodec struct{}

func (rawCodec) Marshal(v any) ([]byte, error)      { return *v.(*[]byte), nil }
func (rawCodec) Unmarshal(data []byte, v any) error { return nil }
func (rawCodec) Name() string                       { return "proto" }

// get is a record to fill and put.
func (x *exporter) get() *record {
	select {
	case r := <-x.free:
		return r
	default:
		return &record{spans: make([]span, 0, 6)}
	}
}

// put queues r, or drops it when MaxQueue spans are waiting.
func (x *exporter) put(r *record) {
	n := int64(len(r.spans))
	if x.waiting.Add(n) > int64(x.cfg.MaxQueue) {
		x.waiting.Add(-n)
		x.dropped.Add(uint64(n))
		x.recycle(r)
		return
	}
	select {
	case x.queue <- r:
	default:
		x.waiting.Add(-n)
		x.dropped.Add(uint64(n))
		x.recycle(r)
	}
}

func (x *exporter) recycle(r *record) {
	for i := range r.spans {
		r.spans[i] = span{}
	}
	r.spans = r.spans[:0]
	if cap(r.spans) > 64 { // a /predict/batch request's: not kept
		return
	}
	select {
	case x.free <- r:
	default:
	}
}

// run is the exporter's goroutine: it encodes records as they come and
// sends a batch when it holds MaxBatch spans, when the oldest has waited
// Delay, on flush and at stop.
func (x *exporter) run() {
	defer close(x.done)
	var spans, scratch, body []byte
	n := 0
	timer := time.NewTimer(x.cfg.Delay)
	timer.Stop()
	add := func(r *record) {
		x.waiting.Add(-int64(len(r.spans)))
		for i := range r.spans {
			spans, scratch = appendSpan(spans, scratch, &r.spans[i])
		}
		if n == 0 {
			timer.Reset(x.cfg.Delay)
		}
		n += len(r.spans)
		x.recycle(r)
	}
	send := func() {
		if n == 0 {
			return
		}
		timer.Stop()
		body = request(body[:0], x.resource, x.scope, spans)
		ctx, cancel := context.WithTimeout(context.Background(), x.cfg.Timeout)
		err := x.send(ctx, body)
		cancel()
		if err != nil {
			x.failed.Add(uint64(n))
			if now := time.Now().Unix(); x.lastLog.Swap(now) < now-60 {
				x.log.Warn("sending traces failed; their spans are dropped (logged at most once a minute)",
					"receiver", x.cfg.Description, "spans", n, "err", err)
			}
		} else {
			x.exported.Add(uint64(n))
		}
		spans, n = spans[:0], 0
		if cap(spans) > 8<<20 { // a burst's buffer is not kept
			spans, body = nil, nil
		}
	}
	drain := func() {
		for {
			select {
			case r := <-x.queue:
				add(r)
				if n >= x.cfg.MaxBatch {
					send()
				}
			default:
				send()
				return
			}
		}
	}
	for {
		select {
		case r := <-x.queue:
			add(r)
			if n >= x.cfg.MaxBatch {
				send()
			}
		case <-timer.C:
			send()
		case ch := <-x.flushes:
			drain()
			close(ch)
		case <-x.stop:
			drain()
			return
		}
	}
}

// flush sends what is queued, waiting until it is sent or ctx ends.
func (x *exporter) flush(ctx context.Context) error {
	if err := worker.Ask(ctx, x.flushes, x.done); err != nil {
		return fmt.Errorf("flushing traces: %w", err)
	}
	return nil
}

// shutdown sends what is queued and stops; ctx bounds the wait.
func (x *exporter) shutdown(ctx context.Context) error {
	x.stopped.Do(func() {
		close(x.stop)
		go func() { <-x.done; x.close() }()
	})
	select {
	case <-x.done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("traces still queued at shutdown: %w", ctx.Err())
	}
}
