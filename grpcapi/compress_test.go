package grpcapi

import (
	"bytes"
	"context"
	"encoding/binary"
	"io"
	"net/http"
	"runtime"
	"strings"
	"sync"
	"testing"

	"github.com/fw-serve/fw/engine"
	pb "github.com/fw-serve/fw/grpcapi/inferencepb"
	"github.com/fw-serve/fw/internal/deflate"
	"github.com/fw-serve/fw/internal/testbomb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/stats"
	"google.golang.org/protobuf/proto"
)

// encodings records the grpc-encoding of the responses a client receives.
type encodings struct {
	mu  sync.Mutex
	got []string
}

func (e *encodings) TagRPC(ctx context.Context, _ *stats.RPCTagInfo) context.Context { return ctx }
func (e *encodings) HandleRPC(_ context.Context, s stats.RPCStats) {
	if h, ok := s.(*stats.InHeader); ok && h.Client {
		e.mu.Lock()
		e.got = append(e.got, h.Compression)
		e.mu.Unlock()
	}
}
func (e *encodings) TagConn(ctx context.Context, _ *stats.ConnTagInfo) context.Context { return ctx }
func (e *encodings) HandleConn(context.Context, stats.ConnStats)                       {}

func (e *encodings) last() string {
	e.mu.Lock()
	defer e.mu.Unlock()
	if len(e.got) == 0 {
		return "(none)"
	}
	return e.got[len(e.got)-1]
}

// A request compressed with gzip or deflate (as tritonclient.grpc's
// compression_algorithm sends it) is answered like the uncompressed one,
// compressed the same way, unary and streaming.
func TestCompressedMessages(t *testing.T) {
	f := start(t, options{})
	rec := &encodings{}
	conn, err := grpc.NewClient(f.addr, grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithStatsHandler(rec))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	client := pb.NewGRPCInferenceServiceClient(conn)
	ctx := callCtx(t)
	x := rows(64, 64)
	req := &pb.ModelInferRequest{ModelName: "digits_mlp", Id: "z",
		Inputs:           []*pb.ModelInferRequest_InferInputTensor{{Name: "input", Datatype: "FP32", Shape: []int64{64, 64}}},
		RawInputContents: [][]byte{f32bytes(x)}}
	want, err := client.ModelInfer(ctx, req)
	if err != nil || rec.last() != "" {
		t.Fatalf("uncompressed: %v, response grpc-encoding %q", err, rec.last())
	}
	if string(want.RawOutputContents[0]) != string(direct(t, "digits_mlp.onnx", engine.FromFloat32([]int64{64, 64}, x)).Data) {
		t.Fatal("uncompressed: not the engine's outputs")
	}
	for _, enc := range []string{"gzip", "deflate"} {
		got, err := client.ModelInfer(ctx, req, grpc.UseCompressor(enc))
		if err != nil || !proto.Equal(got, want) || rec.last() != enc {
			t.Fatalf("%s: %v, response grpc-encoding %q, equal %v", enc, err, rec.last(), proto.Equal(got, want))
		}
		stream, err := client.ModelStreamInfer(ctx, grpc.UseCompressor(enc))
		if err != nil {
			t.Fatal(err)
		}
		for range 3 {
			if err := stream.Send(req); err != nil {
				t.Fatal(err)
			}
			r, err := stream.Recv()
			if err != nil || r.ErrorMessage != "" || !proto.Equal(r.InferResponse, want) {
				t.Fatalf("%s stream: %v %q", enc, err, r.GetErrorMessage())
			}
		}
		stream.CloseSend()
		if _, err := stream.Recv(); err != io.EOF {
			t.Fatalf("%s stream end: %v", enc, err)
		}
		if rec.last() != enc {
			t.Fatalf("%s stream: response grpc-encoding %q", enc, rec.last())
		}
	}
}

// deflate on the wire is zlib, what gRPC's C core and grpc-java read; bare
// deflate data is read too.
func TestDeflateIsZlib(t *testing.T) {
	c := encoding.GetCompressor("deflate")
	if c == nil {
		t.Fatal(`no "deflate" compressor registered`)
	}
	msg := bytes.Repeat([]byte("fw "), 1000)
	for range 2 { // the second from the pool
		var b bytes.Buffer
		w, err := c.Compress(&b)
		if err != nil {
			t.Fatal(err)
		}
		w.Write(msg)
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
		if !deflate.IsZlibHeader(b.Bytes()) {
			t.Fatalf("not zlib: % x", b.Bytes()[:2])
		}
		r, err := c.Decompress(&b)
		if err != nil {
			t.Fatal(err)
		}
		if got, err := io.ReadAll(r); err != nil || !bytes.Equal(got, msg) {
			t.Fatalf("round trip: %d bytes, %v", len(got), err)
		}
	}
	raw := []byte{0x4b, 0x2b, 0x57, 0x00, 0x00} // "fw " as bare deflate data
	r, err := c.Decompress(bytes.NewReader(raw))
	if err != nil {
		t.Fatal(err)
	}
	if got, err := io.ReadAll(r); err != nil || string(got) != "fw " {
		t.Fatalf("bare deflate: %q, %v", got, err)
	}
}

// grpcCall posts one length-prefixed, compressed gRPC message (a frame any
// client could send, a bomb included) to method over HTTP/2 without TLS,
// and returns the call's grpc-status and grpc-message.
func grpcCall(t *testing.T, addr, method, enc string, msg []byte) (string, string) {
	t.Helper()
	frame := make([]byte, 5, 5+len(msg))
	frame[0] = 1 // compressed
	binary.BigEndian.PutUint32(frame[1:], uint32(len(msg)))
	frame = append(frame, msg...)
	var p http.Protocols
	p.SetUnencryptedHTTP2(true)
	tr := &http.Transport{Protocols: &p}
	defer tr.CloseIdleConnections()
	req, err := http.NewRequestWithContext(callCtx(t), "POST", "http://"+addr+method, bytes.NewReader(frame))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/grpc")
	req.Header.Set("Te", "trailers")
	req.Header.Set("Grpc-Encoding", enc)
	resp, err := (&http.Client{Transport: tr}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	io.Copy(io.Discard, resp.Body)
	if s := resp.Header.Get("Grpc-Status"); s != "" { // a trailers-only answer
		return s, resp.Header.Get("Grpc-Message")
	}
	return resp.Trailer.Get("Grpc-Status"), resp.Trailer.Get("Grpc-Message")
}

// A decompression bomb (10 GiB of zeros in about 10 MB, under the message
// limit as sent) is refused with RESOURCE_EXHAUSTED once the limit is
// decompressed (grpc-go reads one byte past MaxRecvMsgSize from the
// decompressor, never the whole), in memory bounded by the limit, and the
// server goes on serving; an encoding the server does not know is
// UNIMPLEMENTED.
func TestDecompressionBomb(t *testing.T) {
	const max = 16 << 20
	f := start(t, options{maxMsg: max})
	ctx := callCtx(t)
	for enc, bomb := range map[string][]byte{"gzip": testbomb.Gzip(10), "deflate": testbomb.Zlib(10)} {
		if len(bomb) >= max {
			t.Fatalf("the %s bomb is %d bytes, not under the limit", enc, len(bomb))
		}
		var code, msg string
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		code, msg = grpcCall(t, f.addr, "/inference.GRPCInferenceService/ModelInfer", enc, bomb)
		runtime.ReadMemStats(&after)
		if code != "8" || !strings.Contains(msg, "larger than max") {
			t.Fatalf("%s bomb: grpc-status %s (want 8, RESOURCE_EXHAUSTED): %s", enc, code, msg)
		}
		if n := after.TotalAlloc - before.TotalAlloc; n > 256<<20 {
			t.Errorf("%s bomb: %d MiB allocated for a %d MiB limit", enc, n>>20, max>>20)
		}
		if _, err := f.client.ServerLive(ctx, &pb.ServerLiveRequest{}); err != nil {
			t.Fatalf("after the %s bomb: %v", enc, err)
		}
	}
	if code, _ := grpcCall(t, f.addr, "/inference.GRPCInferenceService/ModelInfer", "br", []byte("x")); code != "12" {
		t.Fatalf("grpc-encoding br: grpc-status %s, want 12 (UNIMPLEMENTED)", code)
	}
	_, err := f.client.ModelInfer(ctx, &pb.ModelInferRequest{ModelName: "digits_mlp",
		Inputs:           []*pb.ModelInferRequest_InferInputTensor{{Name: "input", Datatype: "FP32", Shape: []int64{1, 64}}},
		RawInputContents: [][]byte{f32bytes(rows(1, 64))}}, grpc.UseCompressor("gzip"))
	if err != nil {
		t.Fatalf("a compressed call after the bombs: %v", err)
	}
}
