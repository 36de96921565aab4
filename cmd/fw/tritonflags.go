package main

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"math"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/keepalive"

	"github.com/fw-serve/fw/internal/logswitch"
)

// tritonserver's command-line options, taken by fw serve so that a Triton
// command line moves over with the binary's name changed. Those fw has a
// name of its own for (--http-port is --port) set the same setting, the
// last given winning; those with a meaning of their own here are read by
// tritonOptions.resolve; options that tune Triton's own machinery (thread
// pools, memory pools, GPU metrics) are taken, checked for their type, and
// listed once at start as having no effect; options for what fw does not
// do (a response cache, the rate limiter, SageMaker) are refused with the
// reason, never ignored silently. tritonserver's booleans take a value
// (--exit-on-error false, --allow-grpc=1), as its parser does.

// parseTritonBool reads a boolean as tritonserver does: true, on or 1,
// false, off or 0, in any case.
func parseTritonBool(s string) (bool, error) {
	switch strings.ToLower(s) {
	case "true", "on", "1":
		return true, nil
	case "false", "off", "0":
		return false, nil
	}
	return false, fmt.Errorf("invalid value for bool option: %s (use true or false)", s)
}

// tritonBool is a boolean flag that takes a value, as tritonserver's do;
// given records that the command line (or the environment) set it.
type tritonBool struct {
	p     *bool
	given bool
}

func (b *tritonBool) String() string {
	if b == nil || b.p == nil {
		return ""
	}
	return strconv.FormatBool(*b.p)
}

func (b *tritonBool) Set(s string) error {
	v, err := parseTritonBool(s)
	if err != nil {
		return err
	}
	*b.p, b.given = v, true
	return nil
}

// TritonBool registers a boolean flag that takes its value as
// tritonserver's do (--exit-on-error false); its environment variable is
// FW_<NAME>.
func (e *envFlags) TritonBool(name string, def bool, usage string) *tritonBool {
	key := envKey(name)
	b := newTritonBool(def)
	if v, ok := os.LookupEnv(key); ok {
		if err := b.Set(v); err != nil {
			e.fail(key, v, "true or false")
		}
	}
	e.fs.Var(b, name, usage+" (true or false) ["+key+"]")
	return b
}

// newTritonBool is a tritonBool holding def.
func newTritonBool(def bool) *tritonBool {
	b := &tritonBool{p: new(bool)}
	*b.p = def
	return b
}

// secondsFlag sets a duration from whole seconds (--exit-timeout-secs).
type secondsFlag struct{ p *time.Duration }

func (s secondsFlag) String() string {
	if s.p == nil {
		return ""
	}
	return strconv.Itoa(int(s.p.Seconds()))
}

func (s secondsFlag) Set(v string) error {
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 {
		return fmt.Errorf("%q is not a whole number of seconds", v)
	}
	*s.p = time.Duration(n) * time.Second
	return nil
}

// checkedValue is an option taken for its type only: tritonOptions lists or
// refuses it after parsing.
type checkedValue struct {
	kind  string // "bool", "int" or "string"
	val   string
	given bool
}

func (c *checkedValue) String() string { return c.val }

func (c *checkedValue) Set(v string) error {
	switch c.kind {
	case "bool":
		b, err := parseTritonBool(v)
		if err != nil {
			return err
		}
		v = strconv.FormatBool(b)
	case "int":
		if _, err := strconv.ParseInt(v, 10, 64); err != nil {
			return fmt.Errorf("%q is not an integer", v)
		}
	}
	c.val, c.given = v, true
	return nil
}

// inertOptions are tritonserver's options that tune its own machinery,
// with why they change nothing in fw.
var inertOptions = []struct{ name, kind, why string }{
	{"http-thread-count", "int", "fasthttp serves each connection on its own goroutine"},
	{"grpc-infer-thread-count", "int", "grpc-go serves each call on its own goroutine"},
	{"grpc-infer-allocation-pool-size", "int", "Go's allocator and GC manage the messages"},
	{"grpc-max-response-pool-size", "int", "Go's allocator and GC manage the messages"},
	{"buffer-manager-thread-count", "int", "fw copies tensors on the request's goroutine"},
	{"model-load-thread-count", "int", "fw loads the start-up models one at a time, and on-demand loads concurrently"},
	{"pinned-memory-pool-byte-size", "int", "fw has no pinned host memory pool"},
	{"cuda-memory-pool-byte-size", "string", "the engines allocate CUDA memory themselves"},
	{"cuda-virtual-address-size", "string", "the engines allocate CUDA memory themselves"},
	{"min-supported-compute-capability", "string", "the engines check the GPU when a model loads"},
	{"enable-peer-access", "bool", "the engines manage GPU peer access"},
	{"allow-gpu-metrics", "bool", "fw exports no GPU metrics"},
	{"allow-cpu-metrics", "bool", "fw's process metrics are always on /metrics"},
	{"metrics-interval-ms", "int", "fw's metrics are read when scraped"},
	{"metrics-config", "string", "fw's latency histograms are fixed (docs/serving.md)"},
	{"backend-directory", "string", "fw's engines are built in"},
	{"repoagent-directory", "string", "fw has no repository agents"},
	{"backend-config", "string", "fw's engines take their settings from config.pbtxt and fw serve's flags"},
	{"host-policy", "string", "the engines place their threads themselves"},
	{"model-load-gpu-limit", "string", "fw does not budget GPU memory per device"},
	{"strict-readiness", "bool", "fw is ready once its start-up loads are done (with --exit-on-error false, whichever failed) and not while loading or draining"},
	{"grpc-http2-max-pings-without-data", "int", "grpc-go has no such setting"},
	{"grpc-http2-max-ping-strikes", "int", "grpc-go closes a connection on its third ping strike"},
	{"cache-directory", "string", "fw keeps no compilation cache"},
}

// refusedOptions are tritonserver's options for what fw does not do,
// with the value that asks nothing of it ("" when every value asks).
var refusedOptions = []struct{ name, kind, fine, why string }{
	{"allow-sagemaker", "bool", "false", "fw serves no SageMaker front end"},
	{"sagemaker-port", "int", "", "fw serves no SageMaker front end"},
	{"sagemaker-safe-port-range", "string", "", "fw serves no SageMaker front end"},
	{"sagemaker-thread-count", "int", "", "fw serves no SageMaker front end"},
	{"allow-vertex-ai", "bool", "false", "fw serves no Vertex AI front end"},
	{"vertex-ai-port", "int", "", "fw serves no Vertex AI front end"},
	{"vertex-ai-thread-count", "int", "", "fw serves no Vertex AI front end"},
	{"vertex-ai-default-model", "string", "", "fw serves no Vertex AI front end"},
	{"rate-limit", "string", "off", "fw has no rate limiter across models; each model's --max-queue bounds its waiting requests"},
	{"rate-limit-resource", "string", "", "fw has no rate limiter across models"},
	{"model-load-retry-count", "int", "0", "fw does not retry a failed load: the model stays UNAVAILABLE with its reason, and a load request (or the next poll) tries again"},
	{"model-namespacing", "bool", "false", "fw serves one model of a name across its repositories"},
	{"reuse-http-port", "bool", "false", "fw binds its ports alone"},
	{"reuse-grpc-port", "bool", "false", "fw binds its ports alone"},
	{"allow-http", "bool", "true", "fw always serves HTTP (its health, metrics and /v2 routes)"},
}

// tritonOptions holds tritonserver's options that fw serve reads after
// parsing (tritonOptions.resolve).
type tritonOptions struct {
	fs                                  *flag.FlagSet
	id                                  string
	configName                          string
	logFile                             string
	logVerbose                          string
	logInfo, logWarning, logError       *tritonBool
	allowGRPC, allowMetrics             *tritonBool
	strictModelConfig                   *tritonBool
	httpAddress, grpcAddress, metricsAd string
	httpForward, grpcForward            string
	grpcSSL, grpcSSLMutual              *tritonBool
	grpcCert, grpcKey, grpcRoot         string
	grpcCompression                     string
	kaTime, kaTimeout                   int
	kaPermit                            *tritonBool
	kaMinPing, maxAge, maxAgeGrace      int
	checked                             map[string]*checkedValue
	cacheConfigs                        *listFlag
	cacheBytes                          int64
}

// registerTritonOptions adds tritonserver's options to ef. Those that
// set one of fw's own settings write it through the pointers given.
func registerTritonOptions(ef *envFlags, port *int, shutdown *time.Duration) *tritonOptions {
	fs := ef.fs
	t := &tritonOptions{fs: fs, checked: map[string]*checkedValue{}}
	tb := func(name string, def bool, usage string) *tritonBool {
		b := newTritonBool(def)
		fs.Var(b, name, "tritonserver's option: "+usage+" (true or false)")
		return b
	}
	fs.IntVar(port, "http-port", *port, "tritonserver's name for --port (whichever is given last wins)")
	if l := fs.Lookup("model-repository"); l != nil {
		fs.Var(l.Value, "model-store", "tritonserver's older name for --model-repository")
	}
	fs.Var(secondsFlag{shutdown}, "exit-timeout-secs", "tritonserver's name for --shutdown-timeout, in seconds")
	fs.StringVar(&t.configName, "model-config-name", "", "tritonserver's option: with --model-repository, each model's configs/NAME.pbtxt where it has one, else its config.pbtxt")
	t.cacheConfigs = &listFlag{}
	fs.Var(t.cacheConfigs, "cache-config", "tritonserver's option: the response cache, local,size=BYTES (the answers of models whose config.pbtxt has response_cache { enable: true }, least recently used evicted); repeatable")
	fs.Int64Var(&t.cacheBytes, "response-cache-byte-size", 0, "tritonserver's older option: the same as --cache-config local,size=BYTES")
	fs.StringVar(&t.id, "id", "", "tritonserver's option: the server's name in GET /v2 and ServerMetadata (default: fw)")
	fs.StringVar(&t.logFile, "log-file", "", "tritonserver's option: append the log to this file instead of standard error")
	fs.StringVar(&t.logVerbose, "log-verbose", "", "tritonserver's option: a level above 0 (or true) logs at debug level; with --log-info, --log-warning and --log-error it switches each severity on or off, over --log-level")
	t.logInfo = tb("log-info", true, "log at info level")
	t.logWarning = tb("log-warning", true, "log warnings")
	t.logError = tb("log-error", true, "log errors")
	t.strictModelConfig = tb("strict-model-config", false, "deprecated by Triton: true is --disable-auto-complete-config")
	t.allowGRPC = tb("allow-grpc", false, "true serves gRPC on --grpc-port, 8001 when not given; false turns gRPC off")
	t.allowMetrics = tb("allow-metrics", true, "true serves /metrics on --metrics-port, 8002 when not given; false turns --metrics-port off (/metrics on --port stays)")
	fs.StringVar(&t.httpAddress, "http-address", "", "tritonserver's option: the HTTP listener's address (default: --host)")
	fs.StringVar(&t.grpcAddress, "grpc-address", "", "tritonserver's option: the gRPC listener's address (default: --host)")
	fs.StringVar(&t.metricsAd, "metrics-address", "", "tritonserver's option: the --metrics-port listener's address (default: --host)")
	fs.StringVar(&t.httpForward, "http-header-forward-pattern", "", "tritonserver's option: request headers whose names match this regular expression (anywhere, in any case unless it starts with (?-i)) reach the model as request parameters (a Python model's request.parameters()); Triton's reserved names are refused with 400")
	fs.StringVar(&t.grpcForward, "grpc-header-forward-pattern", "", "tritonserver's option: the same for gRPC call metadata (whose keys are lower case)")
	t.grpcSSL = tb("grpc-use-ssl", false, "serve gRPC over TLS with --grpc-server-cert and --grpc-server-key")
	t.grpcSSLMutual = tb("grpc-use-ssl-mutual", false, "serve gRPC over TLS and require client certificates signed by --grpc-root-cert")
	fs.StringVar(&t.grpcCert, "grpc-server-cert", "", "tritonserver's option: the gRPC server's certificate file (PEM)")
	fs.StringVar(&t.grpcKey, "grpc-server-key", "", "tritonserver's option: the gRPC server's private key file (PEM)")
	fs.StringVar(&t.grpcRoot, "grpc-root-cert", "", "tritonserver's option: the CA certificates (PEM) client certificates must chain to, with --grpc-use-ssl-mutual")
	fs.StringVar(&t.grpcCompression, "grpc-infer-response-compression-level", "", "tritonserver's option: none, low, medium or high; fw answers a gzip- or deflate-compressed request compressed, and others not")
	fs.IntVar(&t.kaTime, "grpc-keepalive-time", 0, "tritonserver's option: milliseconds of idle before the server pings a client (0: grpc-go's 2 hours)")
	fs.IntVar(&t.kaTimeout, "grpc-keepalive-timeout", 0, "tritonserver's option: milliseconds to wait for a ping's answer before closing (0: grpc-go's 20 s)")
	t.kaPermit = tb("grpc-keepalive-permit-without-calls", false, "let clients ping on a connection with no calls")
	fs.IntVar(&t.kaMinPing, "grpc-http2-min-recv-ping-interval-without-data", 0, "tritonserver's option: the shortest interval in milliseconds between a client's pings (0: grpc-go's 5 minutes)")
	fs.IntVar(&t.maxAge, "grpc-max-connection-age", 0, "tritonserver's option: milliseconds after which a connection is closed gracefully (0: no limit)")
	fs.IntVar(&t.maxAgeGrace, "grpc-max-connection-age-grace", 0, "tritonserver's option: milliseconds calls get to finish once a connection is past its age (0: no limit)")
	for _, o := range inertOptions {
		c := &checkedValue{kind: o.kind}
		t.checked[o.name] = c
		fs.Var(c, o.name, "tritonserver's option, taken with no effect in fw: "+o.why)
	}
	for _, o := range refusedOptions {
		c := &checkedValue{kind: o.kind}
		t.checked[o.name] = c
		fs.Var(c, o.name, "tritonserver's option, refused unless "+cmpOr(o.fine, "absent")+": "+o.why)
	}
	return t
}

func cmpOr(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// tritonSettings is what tritonserver's options decide beyond the flags
// they share with fw.
type tritonSettings struct {
	name                            string // "" is fw
	configName                      string // --model-config-name
	cacheBytes                      int64  // the response cache's budget; 0: none
	httpHost, grpcHost, metricsHost string
	httpForward, grpcForward        *regexp.Regexp
	grpcOptions                     []grpc.ServerOption
	logFile                         string
	// logSwitches are the severities --log-info, --log-warning,
	// --log-error and --log-verbose switch (nil when none is given).
	logSwitches *logswitch.Settings
	notes       []string // options taken with no effect, to log
}

// resolve checks the options given and applies those that change fw's
// settings: the log level (when --log-verbose, --log-info, --log-warning
// or --log-error is given, over --log-level), --disable-auto-complete-config
// (which --strict-model-config false does not undo), the gRPC and metrics
// ports.
func (t *tritonOptions) resolve(host string, logLevel *string, noAuto *bool, grpcPort, metricsPort *int) (tritonSettings, error) {
	s := tritonSettings{name: t.id, logFile: t.logFile, configName: t.configName,
		httpHost: cmpOr(t.httpAddress, host), grpcHost: cmpOr(t.grpcAddress, host), metricsHost: cmpOr(t.metricsAd, host)}
	for _, o := range refusedOptions {
		if c := t.checked[o.name]; c.given && (o.fine == "" || !strings.EqualFold(c.val, o.fine)) {
			return s, fmt.Errorf("--%s %s: %s", o.name, c.val, o.why)
		}
	}
	for _, o := range inertOptions {
		if t.checked[o.name].given {
			s.notes = append(s.notes, fmt.Sprintf("--%s has no effect in fw: %s", o.name, o.why))
		}
	}
	if t.logVerbose != "" || t.logInfo.given || t.logWarning.given || t.logError.given {
		verbose := 0
		if t.logVerbose != "" {
			switch v := strings.ToLower(t.logVerbose); v {
			case "true":
				verbose = 1
			case "false":
			default:
				n, err := strconv.Atoi(v)
				if err != nil || n < 0 {
					return s, fmt.Errorf("--log-verbose %q: use a level, 0 or more", t.logVerbose)
				}
				verbose = n
			}
		}
		switch {
		case verbose > 0:
			*logLevel = "debug"
		case *t.logInfo.p:
			*logLevel = "info"
		case *t.logWarning.p:
			*logLevel = "warn"
		default:
			*logLevel = "error"
		}
		// Each severity on its own, as tritonserver's: --log-warning=false
		// keeps info, --log-error=false silences errors.
		s.logSwitches = &logswitch.Settings{Info: *t.logInfo.p, Warning: *t.logWarning.p, Error: *t.logError.p, Verbose: int32(min(verbose, math.MaxInt32))}
	}
	if t.strictModelConfig.given {
		*noAuto = *noAuto || *t.strictModelConfig.p // --disable-auto-complete-config wins, as in tritonserver
		s.notes = append(s.notes, "--strict-model-config is deprecated (by Triton too): use --disable-auto-complete-config")
	}
	if t.allowGRPC.given {
		switch {
		case !*t.allowGRPC.p:
			*grpcPort = 0
		case *grpcPort == 0:
			*grpcPort = 8001 // tritonserver's
		}
	}
	if t.allowMetrics.given {
		switch {
		case !*t.allowMetrics.p:
			*metricsPort = 0
		case *metricsPort == 0:
			*metricsPort = 8002 // tritonserver's
		}
	}
	var err error
	if s.httpForward, err = forwardPattern("http-header-forward-pattern", t.httpForward); err != nil {
		return s, err
	}
	if s.grpcForward, err = forwardPattern("grpc-header-forward-pattern", t.grpcForward); err != nil {
		return s, err
	}
	switch strings.ToLower(t.grpcCompression) {
	case "", "none", "low", "medium", "high":
	default:
		return s, fmt.Errorf("--grpc-infer-response-compression-level %q: use none, low, medium or high", t.grpcCompression)
	}
	if s.grpcOptions, err = t.grpcServerOptions(); err != nil {
		return s, err
	}
	if len(s.grpcOptions) > 0 && *grpcPort == 0 {
		s.notes = append(s.notes, "the gRPC TLS and keepalive options have no effect: gRPC is off (--grpc-port or --allow-grpc true turns it on)")
	}
	if s.cacheBytes, err = t.cacheSize(); err != nil {
		return s, err
	}
	return s, nil
}

// cacheSize is the response cache's budget in bytes from --cache-config
// (local,size=BYTES; the last size given wins) and
// --response-cache-byte-size; 0 when neither asks for one.
func (t *tritonOptions) cacheSize() (int64, error) {
	if t.cacheBytes < 0 {
		return 0, fmt.Errorf("--response-cache-byte-size %d: bytes, 0 or more", t.cacheBytes)
	}
	size := t.cacheBytes
	for _, c := range t.cacheConfigs.vals {
		name, setting, _ := strings.Cut(c, ",")
		if name != "local" {
			return 0, fmt.Errorf("--cache-config %q: fw has the local cache only (local,size=BYTES)", c)
		}
		k, v, _ := strings.Cut(setting, "=")
		n, err := strconv.ParseInt(v, 10, 64)
		if k != "size" || err != nil || n < 0 {
			return 0, fmt.Errorf("--cache-config %q: use local,size=BYTES", c)
		}
		size = n
	}
	return size, nil
}

// forwardPattern compiles a header forward pattern as tritonserver does:
// matched anywhere in the name, in any case unless the pattern says
// otherwise ((?-i) at its start).
func forwardPattern(flagName, p string) (*regexp.Regexp, error) {
	if p == "" {
		return nil, nil
	}
	re, err := regexp.Compile("(?i)" + p)
	if err != nil {
		return nil, fmt.Errorf("--%s %q: %w", flagName, p, err)
	}
	return re, nil
}

// grpcServerOptions are the gRPC server's TLS and keepalive settings.
func (t *tritonOptions) grpcServerOptions() ([]grpc.ServerOption, error) {
	var opts []grpc.ServerOption
	for name, v := range map[string]int{"grpc-keepalive-time": t.kaTime, "grpc-keepalive-timeout": t.kaTimeout,
		"grpc-http2-min-recv-ping-interval-without-data": t.kaMinPing, "grpc-max-connection-age": t.maxAge, "grpc-max-connection-age-grace": t.maxAgeGrace} {
		if v < 0 {
			return nil, fmt.Errorf("--%s %d: milliseconds, 0 or more", name, v)
		}
	}
	ms := func(n int) time.Duration { return time.Duration(n) * time.Millisecond }
	if t.kaTime > 0 || t.kaTimeout > 0 || t.maxAge > 0 || t.maxAgeGrace > 0 {
		opts = append(opts, grpc.KeepaliveParams(keepalive.ServerParameters{
			Time: ms(t.kaTime), Timeout: ms(t.kaTimeout), MaxConnectionAge: ms(t.maxAge), MaxConnectionAgeGrace: ms(t.maxAgeGrace)}))
	}
	if t.kaPermit.given || t.kaMinPing > 0 {
		minTime := ms(t.kaMinPing)
		if minTime == 0 {
			minTime = 5 * time.Minute // grpc-go's default
		}
		opts = append(opts, grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: minTime, PermitWithoutStream: *t.kaPermit.p}))
	}
	if !*t.grpcSSL.p && !*t.grpcSSLMutual.p {
		if t.grpcCert != "" || t.grpcKey != "" || t.grpcRoot != "" {
			return nil, errors.New("--grpc-server-cert, --grpc-server-key and --grpc-root-cert need --grpc-use-ssl true (or --grpc-use-ssl-mutual true)")
		}
		return opts, nil
	}
	if t.grpcCert == "" || t.grpcKey == "" {
		return nil, errors.New("--grpc-use-ssl needs --grpc-server-cert and --grpc-server-key (PEM files)")
	}
	cert, err := tls.LoadX509KeyPair(t.grpcCert, t.grpcKey)
	if err != nil {
		return nil, fmt.Errorf("--grpc-server-cert / --grpc-server-key: %w", err)
	}
	cfg := &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	if *t.grpcSSLMutual.p {
		if t.grpcRoot == "" {
			return nil, errors.New("--grpc-use-ssl-mutual needs --grpc-root-cert: the CA certificates client certificates must chain to")
		}
		pem, err := os.ReadFile(t.grpcRoot)
		if err != nil {
			return nil, fmt.Errorf("--grpc-root-cert: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("--grpc-root-cert %s holds no PEM certificate", t.grpcRoot)
		}
		cfg.ClientCAs, cfg.ClientAuth = pool, tls.RequireAndVerifyClientCert
	}
	return append(opts, grpc.Creds(credentials.NewTLS(cfg))), nil
}

// logNotes logs the options taken with no effect, once, at start.
func (s tritonSettings) logNotes(log *slog.Logger) {
	for _, n := range s.notes {
		log.Info(n)
	}
}

// expandPrefixes spells out each option of args given as a prefix of one
// option's name only (--log-warn for --log-warning), as tritonserver's
// getopt_long reads them, so that Triton command lines written that way
// move over; an exact name always wins, and a prefix of several names is
// refused with them. Parsing stops where fs's does: at "--" or the first
// argument that is not an option.
func expandPrefixes(fs *flag.FlagSet, args []string) ([]string, error) {
	out := slices.Clone(args)
	for i := 0; i < len(out); i++ {
		a := out[i]
		if a == "--" || len(a) < 2 || a[0] != '-' {
			return out, nil
		}
		name := strings.TrimPrefix(strings.TrimPrefix(a, "-"), "-")
		name, val, hasVal := strings.Cut(name, "=")
		f := fs.Lookup(name)
		if f == nil && name != "" && name != "h" && name != "help" {
			var hits []string
			fs.VisitAll(func(g *flag.Flag) {
				if strings.HasPrefix(g.Name, name) {
					hits = append(hits, g.Name)
				}
			})
			switch len(hits) {
			case 0:
				return out, nil // fs refuses it, with its usage
			case 1:
				f = fs.Lookup(hits[0])
				out[i] = "--" + hits[0]
				if hasVal {
					out[i] += "=" + val
				}
			default:
				return nil, fmt.Errorf("option --%s is ambiguous: it begins --%s", name, strings.Join(hits, ", --"))
			}
		}
		if f != nil && !hasVal && !isBoolFlag(f) {
			i++ // its value
		}
	}
	return out, nil
}

// isBoolFlag reports whether f takes no value (--flag alone).
func isBoolFlag(f *flag.Flag) bool {
	b, ok := f.Value.(interface{ IsBoolFlag() bool })
	return ok && b.IsBoolFlag()
}
