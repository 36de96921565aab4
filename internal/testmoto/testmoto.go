// Package testmoto starts moto's S3-protocol server (PyPI's moto 5.2.5 in
// server mode, its own venv: scripts/setup-moto-venv.sh) on a free port of
// 127.0.0.1 for a test, with a bucket, and stops it when the test ends: a
// real S3 server for the dashboard's object storage (dashboard/blob).
package testmoto

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
)

// Server is a running moto server with one bucket.
type Server struct {
	// Endpoint is its http:// URL.
	Endpoint string
	// Bucket was created for the test.
	Bucket string
	// AccessKey and SecretKey are accepted by moto (any are).
	AccessKey, SecretKey string
}

// Start starts moto_server (the path in FW_MOTO_SERVER, which `make
// test-s3` and `make test-replicas` set from scripts/setup-moto-venv.sh),
// or skips the test when it is unset (fails with FW_REQUIRE_S3=1).
func Start(t testing.TB) *Server {
	t.Helper()
	bin := os.Getenv("FW_MOTO_SERVER")
	if bin == "" {
		msg := "moto's S3 server is needed: FW_MOTO_SERVER=$(bash scripts/setup-moto-venv.sh) (make test-s3)"
		if os.Getenv("FW_REQUIRE_S3") == "1" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	cmd := exec.Command(bin, "-H", "127.0.0.1", "-p", fmt.Sprint(port))
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	out := &limited{max: 64 << 10}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting %s: %v", bin, err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			<-done
		}
	})
	s := &Server{Endpoint: fmt.Sprintf("http://127.0.0.1:%d", port), AccessKey: "fwtest", SecretKey: "fwtest-secret"}
	for deadline := time.Now().Add(60 * time.Second); ; {
		if r, err := http.Get(s.Endpoint + "/moto-api/"); err == nil {
			r.Body.Close()
			break
		}
		select {
		case <-done:
			t.Fatalf("moto_server exited: %s", out.String())
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("moto_server did not answer within 60s: %s", out.String())
		}
	}
	var b [6]byte
	_, _ = rand.Read(b[:])
	s.Bucket = "fw-test-" + hex.EncodeToString(b[:])
	c, err := minio.New(fmt.Sprintf("127.0.0.1:%d", port), &minio.Options{Creds: credentials.NewStaticV4(s.AccessKey, s.SecretKey, ""), Region: "us-east-1", BucketLookup: minio.BucketLookupPath})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.MakeBucket(context.Background(), s.Bucket, minio.MakeBucketOptions{Region: "us-east-1"}); err != nil {
		t.Fatalf("creating bucket %s: %v", s.Bucket, err)
	}
	return s
}

// limited keeps the first max bytes written to it (the server's output,
// for a failure message).
type limited struct {
	mu  sync.Mutex
	max int
	b   []byte
}

func (l *limited) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if room := l.max - len(l.b); room > 0 {
		l.b = append(l.b, p[:min(room, len(p))]...)
	}
	return len(p), nil
}

func (l *limited) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return string(l.b)
}
