package main

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"encoding/binary"
	"fmt"
	"image"
	"image/png"
	"math"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fw-serve/fw/internal/testbomb"
)

// A request costs memory in proportion to what it is allowed to be: with the
// default limits (64 MiB bodies, 4096 rows), the largest bodies each
// endpoint accepts and refuses, JSON and V2 binary alike, raise the peak
// resident memory of a real fw serve (VmHWM, reset before each request
// through /proc/PID/clear_refs) by at most 4x the body and at most 256 MiB.
// It once took 6.1 GB for one refused 64 MB body.
func TestPeakMemoryPerRequest(t *testing.T) {
	if testing.Short() {
		t.Skip("sends bodies of up to 70 MB")
	}
	if raceDetector {
		t.Skip("the race detector multiplies the server's memory (it is this test binary); make test-go runs this test without -race")
	}
	p := startServe(t, "--model", filepath.Join(modelsDir(t), "digits_mlp.onnx"))
	pid := p.cmd.Process.Pid
	if err := os.WriteFile(fmt.Sprintf("/proc/%d/clear_refs", pid), []byte("5"), 0); err != nil {
		t.Skipf("cannot reset the peak RSS of the server (/proc/PID/clear_refs): %v", err)
	}
	addr := strings.TrimPrefix(p.url, "http://")
	const limit = 256 << 20

	// A number padded to width characters (valid JSON, the same float).
	num := func(width int) string {
		s := "0.5"
		return s + strings.Repeat("0", max(0, width-len(s)))
	}
	rowsJSON := func(rows, width int) []byte {
		var b bytes.Buffer
		n := num(width)
		b.WriteString(`{"data":[`)
		for r := range rows {
			if r > 0 {
				b.WriteByte(',')
			}
			b.WriteByte('[')
			for c := range 64 {
				if c > 0 {
					b.WriteByte(',')
				}
				b.WriteString(n)
			}
			b.WriteByte(']')
		}
		b.WriteString("]}")
		return b.Bytes()
	}
	v2JSON := func(rows, width int) []byte {
		var b bytes.Buffer
		n := num(width)
		fmt.Fprintf(&b, `{"inputs":[{"name":"input","shape":[%d,64],"datatype":"FP32","data":[`, rows)
		for i := range rows * 64 {
			if i > 0 {
				b.WriteByte(',')
			}
			b.WriteString(n)
		}
		b.WriteString("]}]}")
		return b.Bytes()
	}
	v2Binary := func(rows int) ([]byte, int) {
		raw := make([]byte, rows*64*4)
		for i := 0; i < len(raw); i += 4 {
			binary.LittleEndian.PutUint32(raw[i:], math.Float32bits(0.5))
		}
		hdr := fmt.Sprintf(`{"inputs":[{"name":"input","shape":[%d,64],"datatype":"FP32","parameters":{"binary_data_size":%d}}]}`, rows, len(raw))
		return append([]byte(hdr), raw...), len(hdr)
	}
	ndjson := func(lines, width int) []byte {
		var b bytes.Buffer
		row := string(rowsJSON(1, width))
		for range lines {
			b.WriteString(row)
			b.WriteByte('\n')
		}
		return b.Bytes()
	}
	// Padding that makes 4096 rows of 64 numbers about 60 MB.
	wide := 60 << 20 / (4096 * 64)
	bin, hl := v2Binary(4096)
	binRefused, hlRefused := v2Binary(200_000)
	cases := []struct {
		name, path, ctype string
		body              []byte
		hdr               []string
		status            int
		compressed        bool // an image or a compressed body: bounded by a limit, not by the body
	}{
		{"/predict 4096 rows, 60 MB (accepted)", "/predict", "application/json", rowsJSON(4096, wide), nil, 200, false},
		{"/predict 200,000 rows, 64 MB (refused: --max-rows)", "/predict", "application/json", rowsJSON(200_000, 4), nil, 413, false},
		{"/predict 70 MB (refused: --max-body-bytes)", "/predict", "application/json", rowsJSON(4096, 70<<20/(4096*64)), nil, 413, false},
		{"V2 JSON 4096 rows, 60 MB (accepted)", "/v2/models/digits_mlp/infer", "application/json", v2JSON(4096, wide), nil, 200, false},
		{"V2 binary 4096 rows (accepted)", "/v2/models/digits_mlp/infer", "application/octet-stream", bin, []string{"Inference-Header-Content-Length", strconv.Itoa(hl)}, 200, false},
		{"V2 binary 200,000 rows, 51 MB (refused: --max-rows)", "/v2/models/digits_mlp/infer", "application/octet-stream", binRefused, []string{"Inference-Header-Content-Length", strconv.Itoa(hlRefused)}, 400, false}, // Triton's status on /v2
		{"/predict/batch NDJSON 60 MB (accepted, streamed)", "/predict/batch", "application/x-ndjson", ndjson(4000, 60<<20/(4000*64)), nil, 200, false},
		{"/predict/image 6000x6000 RGBA PNG (accepted, 36 Mpx)", "/predict/image", "image/png", bigPNG(t, 6000, 6000), nil, 200, true},
		{"/predict/image 7000x7000 PNG (refused: --max-image-pixels)", "/predict/image", "image/png", bigPNG(t, 7000, 7000), nil, 413, true},
		{"/predict 60 MB gzipped (accepted)", "/predict", "application/json", gzipped(t, rowsJSON(4096, wide)), []string{"Content-Encoding", "gzip"}, 200, true},
		{"/predict 10 GiB of zeros gzipped (refused: decompressed)", "/predict", "application/json", testbomb.Gzip(10), []string{"Content-Encoding", "gzip"}, 413, true},
		{"V2 10 GiB of zeros as zlib (refused: decompressed)", "/v2/models/digits_mlp/infer", "application/json", testbomb.Zlib(10), []string{"Content-Encoding", "deflate"}, 400, true}, // Triton's status on /v2
		{"NDJSON 10 GiB of zeros gzipped (ended: decompressed)", "/predict/batch", "application/x-ndjson", testbomb.Gzip(10), []string{"Content-Encoding", "gzip"}, 200, true},
	}
	for _, c := range cases {
		if err := os.WriteFile(fmt.Sprintf("/proc/%d/clear_refs", pid), []byte("5"), 0); err != nil {
			t.Fatal(err)
		}
		base := procStatusKB(t, pid, "VmRSS")
		status := rawPost(t, addr, c.path, c.ctype, c.body, c.hdr...)
		peak := procStatusKB(t, pid, "VmHWM")
		grew := (peak - base) << 10
		t.Logf("%-52s body %5.1f MB: status %d, peak RSS +%6.1f MB (%.2fx the body)", c.name, float64(len(c.body))/1e6, status, float64(grew)/1e6, float64(grew)/float64(len(c.body)))
		if status != c.status {
			t.Errorf("%s: status %d, want %d", c.name, status, c.status)
		}
		// 4x the body, plus 8 MiB for what any request may touch first
		// (heap and stack growth, the engine's buffers): a 1 MB body once
		// measured +5 MB here, all of it such noise.
		if grew > limit || (!c.compressed && grew > 4*int64(len(c.body))+8<<20) {
			t.Errorf("%s: peak RSS grew by %d bytes for a %d-byte body; want at most 4x the body + 8 MiB, and 256 MiB", c.name, grew, len(c.body))
		}
	}
}

// gzipped is p compressed with gzip.
func gzipped(t *testing.T, p []byte) []byte {
	var b bytes.Buffer
	w := gzip.NewWriter(&b)
	if _, err := w.Write(p); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// bigPNG is a w x h RGBA picture that compresses to little: what a
// decompression bomb looks like to the server.
func bigPNG(t *testing.T, w, h int) []byte {
	img := image.NewNRGBA(image.Rect(0, 0, w, h))
	for i := 3; i < len(img.Pix); i += 4 {
		img.Pix[i] = 255
	}
	var b bytes.Buffer
	if err := (&png.Encoder{CompressionLevel: png.BestSpeed}).Encode(&b, img); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// procStatusKB reads one "Name: N kB" line of /proc/PID/status.
func procStatusKB(t *testing.T, pid int, name string) int64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, name+":"); ok {
			v, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return v
		}
	}
	t.Fatalf("no %s in /proc/%d/status", name, pid)
	return 0
}

// rawPost sends the whole body on a new connection before reading anything,
// as a client that does not wait for 100-continue does, and returns the
// status; the answer must come (or the connection close) within a deadline,
// never a stall. The rest of a streamed answer is read to its end.
func rawPost(t *testing.T, addr, path, ctype string, body []byte, hdr ...string) int {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(120 * time.Second))
	var h strings.Builder
	fmt.Fprintf(&h, "POST %s HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: %s\r\nContent-Length: %d\r\nConnection: close\r\n", path, ctype, len(body))
	for i := 0; i+1 < len(hdr); i += 2 {
		fmt.Fprintf(&h, "%s: %s\r\n", hdr[i], hdr[i+1])
	}
	h.WriteString("\r\n")
	sent := make(chan error, 1)
	go func() {
		_, err := c.Write(append([]byte(h.String()), body...))
		sent <- err
	}()
	r := bufio.NewReader(c)
	line, err := r.ReadString('\n')
	if err != nil {
		t.Fatalf("POST %s: no status line: %v", path, err)
	}
	f := strings.Fields(line)
	if len(f) < 2 {
		t.Fatalf("POST %s: status line %q", path, line)
	}
	code, _ := strconv.Atoi(f[1])
	_, _ = r.WriteTo(discard{}) // the rest of the answer (Connection: close)
	<-sent                      // a refusal may close before the whole body is taken
	return code
}

type discard struct{}

func (discard) Write(p []byte) (int, error) { return len(p), nil }
