package main

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"flag"
	"github.com/fw-serve/fw/internal/logswitch"
	"io"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"

	pb "github.com/fw-serve/fw/grpcapi/inferencepb"
	"github.com/fw-serve/fw/internal/testlog"
)

// selfSigned writes a certificate for 127.0.0.1 and its key (PEM) into dir.
func selfSigned(t *testing.T, dir string) (certFile, keyFile string, pool *x509.CertPool) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "fw test"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, IsCA: true, BasicConstraintsValid: true}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile = filepath.Join(dir, "server.crt"), filepath.Join(dir, "server.key")
	os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600)
	os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}), 0o600)
	cert, _ := x509.ParseCertificate(der)
	pool = x509.NewCertPool()
	pool.AddCert(cert)
	return certFile, keyFile, pool
}

// TestTritonCommandLine: a tritonserver command line, its binary's name
// changed, serves: Triton's names for fw's settings (--http-port,
// --exit-timeout-secs, --model-store), booleans with a separate value,
// --id in both front ends' server metadata, --log-verbose and --log-file,
// gRPC over TLS, and a tuning option taken with a logged note.
func TestTritonCommandLine(t *testing.T) {
	dir := t.TempDir()
	repo := filepath.Join(dir, "models")
	os.MkdirAll(filepath.Join(repo, "digits_mlp", "1"), 0o755)
	copyFile(t, filepath.Join(modelsDir(t), "digits_mlp.onnx"), filepath.Join(repo, "digits_mlp", "1", "model.onnx"))
	os.MkdirAll(filepath.Join(repo, "digits_mlp", "configs"), 0o755) // --model-config-name picks it over config.pbtxt
	os.WriteFile(filepath.Join(repo, "digits_mlp", "config.pbtxt"), []byte("max_batch_size: 8\n"), 0o644)
	os.WriteFile(filepath.Join(repo, "digits_mlp", "configs", "small.pbtxt"), []byte("max_batch_size: 4\n"), 0o644)
	certFile, keyFile, pool := selfSigned(t, dir)
	logFile := filepath.Join(dir, "server.log")
	port, gport := freePort(t), freePort(t)
	cmd := fwCmd("serve", "--model-store="+repo, "--http-port", strconv.Itoa(port), "--grpc-port="+strconv.Itoa(gport),
		"--allow-grpc", "true", "--exit-on-error", "false", "--strict-model-config", "false", "--exit-timeout-secs", "20",
		"--id", "triton", "--model-config-name", "small", "--log-verbose=1", "--log-file", logFile, "--log-format", "default", "--pinned-memory-pool-byte-size", "268435456",
		"--grpc-use-ssl", "1", "--grpc-server-cert", certFile, "--grpc-server-key", keyFile,
		"--grpc-keepalive-time", "10000", "--grpc-keepalive-permit-without-calls", "True", "--threads", "1")
	out := &testlog.Buffer{}
	cmd.Stderr, cmd.Stdout = out, io.Discard
	p := startProc(t, "fw serve", cmd, port, out, 60*time.Second)

	if code, body := call(t, "GET", p.url+"/v2", "", "", ""); code != 200 || body["name"] != "triton" {
		t.Fatalf("GET /v2 with --id triton: %d %v", code, body)
	}
	if code, body := call(t, "GET", p.url+"/v2/models/digits_mlp/config", "", "", ""); code != 200 || body["max_batch_size"] != 4.0 {
		t.Fatalf("config with --model-config-name small: %d %v", code, body)
	}
	if code, body := call(t, "GET", p.url+"/v2/logging", "", "", ""); code != 200 || body["log_verbose_level"] != 1.0 || body["log_file"] != logFile || body["log_format"] != "default" {
		t.Fatalf("GET /v2/logging with --log-verbose=1: %d %v", code, body)
	}
	// Triton's lines from the start; ISO8601 ones once the logging extension switches.
	if code, body := call(t, "POST", p.url+"/v2/logging", "", "application/json", `{"log_format": "ISO8601"}`); code != 200 || body["log_format"] != "ISO8601" {
		t.Fatalf("POST /v2/logging log_format ISO8601: %d %v", code, body)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	addr := "127.0.0.1:" + strconv.Itoa(gport)
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{RootCAs: pool})))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	c := pb.NewGRPCInferenceServiceClient(conn)
	md, err := c.ServerMetadata(ctx, &pb.ServerMetadataRequest{})
	if err != nil || md.Name != "triton" {
		t.Fatalf("ServerMetadata over TLS: %v %v", md, err)
	}
	if _, err := c.ModelInfer(ctx, &pb.ModelInferRequest{ModelName: "digits_mlp",
		Inputs:           []*pb.ModelInferRequest_InferInputTensor{{Name: "input", Datatype: "FP32", Shape: []int64{1, 64}}},
		RawInputContents: [][]byte{make([]byte, 4*64)}}); err != nil {
		t.Fatalf("ModelInfer over TLS: %v", err)
	}
	plain, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	short, cancelShort := context.WithTimeout(ctx, 2*time.Second)
	defer cancelShort()
	if _, err := pb.NewGRPCInferenceServiceClient(plain).ServerLive(short, &pb.ServerLiveRequest{}); err == nil {
		t.Fatal("a plaintext gRPC client was answered by a server given --grpc-use-ssl")
	}

	p.cmd.Process.Signal(os.Interrupt)
	if code := p.exitCode(t); code != 0 {
		t.Fatalf("exit %d:\n%s", code, out.String())
	}
	log, _ := os.ReadFile(logFile)
	for _, want := range []string{"--pinned-memory-pool-byte-size has no effect in fw", "--strict-model-config is deprecated", "stopped",
		// tritonserver's lines that scripts wait for, once the models are ready, and at the stop
		"Started GRPCInferenceService at 127.0.0.1:" + strconv.Itoa(gport), "Started HTTPService at 127.0.0.1:" + strconv.Itoa(port),
		"Waiting for in-flight requests to complete."} {
		if !strings.Contains(string(log), want) {
			t.Errorf("--log-file lacks %q:\n%s", want, log)
		}
	}
	lines := strings.Split(strings.TrimSpace(string(log)), "\n")
	defaultLine := regexp.MustCompile(`^[EWI]\d{4} \d{2}:\d{2}:\d{2}\.\d{6} \d+ [\w.]+:\d+\] ".*"$`)
	isoLine := regexp.MustCompile(`^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}Z [EWI] \d+ [\w.]+:\d+\] ".*"$`)
	if !defaultLine.MatchString(lines[0]) || !isoLine.MatchString(lines[len(lines)-1]) {
		t.Errorf("--log-format default, then ISO8601: first line %q, last %q", lines[0], lines[len(lines)-1])
	}
	if strings.Contains(out.String(), "level=") {
		t.Errorf("with --log-file the log still went to standard error:\n%s", out.String())
	}
}

// TestTritonOptionsRefusedOrChecked: options for what fw does not do are
// refused with the reason, values are checked as tritonserver checks them,
// and the harmless values of refused options pass.
func TestTritonOptionsRefusedOrChecked(t *testing.T) {
	f := func(wantCode int, wantMsg string, args ...string) {
		t.Helper()
		expectExit(t, wantCode, wantMsg, nil, append([]string{"serve", "--model", "/nonexistent/model.onnx", "--port", "0"}, args...)...)
	}
	f(2, "--rate-limit execution_count: fw has no rate limiter", "--rate-limit", "execution_count")
	f(2, `--cache-config "redis,host=x": fw has the local cache only`, "--cache-config", "redis,host=x")
	f(2, `--cache-config "local,size=big": use local,size=BYTES`, "--cache-config=local,size=big")
	f(2, "--allow-http false: fw always serves HTTP", "--allow-http", "false")
	f(2, "--model-load-retry-count 3: fw does not retry", "--model-load-retry-count", "3")
	f(2, "invalid value for bool option: maybe", "--log-info", "maybe")
	f(2, `"x" is not an integer`, "--http-thread-count", "x")
	f(2, "--grpc-use-ssl needs --grpc-server-cert", "--grpc-use-ssl", "true")
	f(2, "--grpc-server-cert, --grpc-server-key and --grpc-root-cert need --grpc-use-ssl", "--grpc-server-cert", "c.pem")
	f(2, `--http-header-forward-pattern "(": error parsing regexp`, "--http-header-forward-pattern", "(")
	f(2, `--log-verbose "loud"`, "--log-verbose", "loud")
	f(2, "--model-config-name needs --model-repository", "--model-config-name", "h100")
	// Taken: the load is what fails, after the options were read.
	f(1, "cannot open the model file", "--rate-limit", "OFF", "--allow-sagemaker", "false", "--allow-http=1",
		"--http-thread-count", "8", "--backend-config", "onnxruntime,default-max-batch-size=8", "--log-error", "off", "--log-format", "ISO8601")
}

// resolve's table, without a process: how tritonserver's options set fw's.
func TestTritonOptionsResolve(t *testing.T) {
	run := func(args ...string) (tritonSettings, string, bool, int, int, error) {
		fs := flag.NewFlagSet("t", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		ef := &envFlags{fs: fs}
		ef.List("model-repository", "")
		port, shutdown := 8000, 30*time.Second
		tr := registerTritonOptions(ef, &port, &shutdown)
		noAuto := fs.Bool("disable-auto-complete-config", false, "")
		level, grpcPort, metricsPort := "info", 0, 0
		fs.IntVar(&grpcPort, "grpc-port", 0, "")
		fs.IntVar(&metricsPort, "metrics-port", 0, "")
		if err := fs.Parse(args); err != nil {
			return tritonSettings{}, "", false, 0, 0, err
		}
		s, err := tr.resolve("127.0.0.1", &level, noAuto, &grpcPort, &metricsPort)
		return s, level, *noAuto, grpcPort, metricsPort, err
	}
	for _, c := range []struct {
		args                  []string
		level                 string
		noAuto                bool
		grpcPort, metricsPort int
	}{
		{nil, "info", false, 0, 0},
		{[]string{"--log-verbose", "2"}, "debug", false, 0, 0},
		{[]string{"--log-info", "false"}, "warn", false, 0, 0},
		{[]string{"--log-info=off", "--log-warning", "0", "--log-error", "false"}, "error", false, 0, 0},
		{[]string{"--strict-model-config", "true"}, "info", true, 0, 0},
		{[]string{"--disable-auto-complete-config", "--strict-model-config", "false"}, "info", true, 0, 0},
		{[]string{"--allow-grpc", "true", "--allow-metrics=1"}, "info", false, 8001, 8002},
		{[]string{"--allow-grpc", "true", "--grpc-port", "9001"}, "info", false, 9001, 0},
		{[]string{"--grpc-port", "9001", "--allow-grpc", "false", "--metrics-port", "9002", "--allow-metrics", "off"}, "info", false, 0, 0},
	} {
		_, level, noAuto, gp, mp, err := run(c.args...)
		if err != nil || level != c.level || noAuto != c.noAuto || gp != c.grpcPort || mp != c.metricsPort {
			t.Errorf("%v: level %s noAuto %v grpc %d metrics %d (%v); want %s %v %d %d", c.args, level, noAuto, gp, mp, err, c.level, c.noAuto, c.grpcPort, c.metricsPort)
		}
	}
	// Each severity switches alone, over --log-level's base.
	for _, c := range []struct {
		args []string
		want *logswitch.Settings
	}{
		{nil, nil},
		{[]string{"--log-warning=false"}, &logswitch.Settings{Info: true, Warning: false, Error: true}},
		{[]string{"--log-error", "false", "--log-verbose", "2"}, &logswitch.Settings{Info: true, Warning: true, Error: false, Verbose: 2}},
	} {
		s, _, _, _, _, err := run(c.args...)
		if err != nil || (s.logSwitches == nil) != (c.want == nil) || c.want != nil && *s.logSwitches != *c.want {
			t.Errorf("%v: switches %+v (%v), want %+v", c.args, s.logSwitches, err, c.want)
		}
	}
	s, _, _, _, _, err := run("--http-address", "0.0.0.0", "--grpc-keepalive-time", "1000", "--cache-config", "local,size=64", "--response-cache-byte-size", "8")
	if err != nil || s.httpHost != "0.0.0.0" || s.grpcHost != "127.0.0.1" || s.cacheBytes != 64 || len(s.grpcOptions) != 1 ||
		!strings.Contains(strings.Join(s.notes, "\n"), "gRPC is off") {
		t.Fatalf("%+v %v", s, err)
	}
}

// TRITONSERVER_DELAY_SCHEDULER and TRITONSERVER_BACKLOG_DELAY_SCHEDULER,
// Triton's test hooks, are read as counts;
// anything else stops fw serve with the reason.
func TestDelaySchedulerFrom(t *testing.T) {
	for v, want := range map[string]int{"": 0, "0": 0, " 12 ": 12} {
		if n, err := delaySchedulerFrom("TRITONSERVER_DELAY_SCHEDULER", v); err != nil || n != want {
			t.Errorf("%q: %d, %v; want %d", v, n, err, want)
		}
	}
	for _, v := range []string{"-1", "x", "99999999999"} {
		if _, err := delaySchedulerFrom("TRITONSERVER_BACKLOG_DELAY_SCHEDULER", v); err == nil || !strings.Contains(err.Error(), "TRITONSERVER_BACKLOG_DELAY_SCHEDULER is") {
			t.Errorf("%q: err %v", v, err)
		}
	}
}

// tritonserver's getopt_long takes a long option by a prefix only it has:
// L0_logging starts it with --log-warn=false.
func TestExpandPrefixes(t *testing.T) {
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	fs.Bool("verbose", false, "")
	fs.String("log-warning", "", "")
	fs.String("log-verbose", "", "")
	fs.String("model", "", "")
	fs.String("model-repository", "", "")
	for _, c := range []struct{ in, want []string }{
		{[]string{"--log-warn=false"}, []string{"--log-warning=false"}},
		{[]string{"--log-warn", "false", "--verb"}, []string{"--log-warning", "false", "--verbose"}},
		{[]string{"--model", "m", "--model-rep=/r"}, []string{"--model", "m", "--model-repository=/r"}}, // exact wins
		{[]string{"-log-w", "--x"}, []string{"--log-warning", "--x"}},                                   // --x is a value
		{[]string{"--nope", "--log-warn"}, []string{"--nope", "--log-warn"}},                            // unknown: left to the parser
		{[]string{"m.onnx", "--log-warn"}, []string{"m.onnx", "--log-warn"}},                            // options end
		{[]string{"--", "--log-warn"}, []string{"--", "--log-warn"}},
	} {
		got, err := expandPrefixes(fs, c.in)
		if err != nil || !slices.Equal(got, c.want) {
			t.Errorf("%q: %q %v, want %q", c.in, got, err, c.want)
		}
	}
	if _, err := expandPrefixes(fs, []string{"--log=1"}); err == nil || !strings.Contains(err.Error(), "ambiguous") {
		t.Errorf("--log (log-warning, log-verbose): %v", err)
	}
}
