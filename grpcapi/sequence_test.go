package grpcapi

import (
	"context"
	"encoding/binary"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/fw-serve/fw/batcher"
	"github.com/fw-serve/fw/engine"
	pb "github.com/fw-serve/fw/grpcapi/inferencepb"
	"github.com/fw-serve/fw/httpapi"
	"github.com/fw-serve/fw/internal/testmodels"
	"github.com/fw-serve/fw/modelrepo"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
)

// startRepo serves the stateful sample simple_sequence_state (an
// accumulator with implicit state, python/fw/triton_samples.py) from a
// model repository over a real gRPC socket.
func startRepo(t *testing.T) pb.GRPCInferenceServiceClient {
	t.Helper()
	root := filepath.Join(testmodels.Dir(t), "triton")
	if _, err := os.Stat(filepath.Join(root, "simple_sequence_state", "config.pbtxt")); err != nil {
		testmodels.Require(t, "the stateful sample models are missing in "+root+": run `make models`")
	}
	return startRepoWith(t, modelrepo.Config{Roots: []string{root}, Mode: modelrepo.ModeExplicit, LoadModels: []string{"simple_sequence_state"},
		Engine: engine.Options{Threads: 1}, Batcher: batcher.DefaultConfig(), SkipWarmup: true})
}

// startRepoWith serves the repository cfg describes over a real gRPC socket.
func startRepoWith(t *testing.T, cfg modelrepo.Config) pb.GRPCInferenceServiceClient {
	t.Helper()
	reg := prometheus.NewRegistry()
	repo, err := modelrepo.New(cfg, httpapi.NewMetrics(reg), quietLog())
	if err != nil {
		t.Fatal(err)
	}
	if err := repo.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	base, cancel := context.WithCancel(context.Background())
	srv := New(base, Config{Version: "test"}, repo, reg, quietLog())
	gs := grpc.NewServer(srv.ServerOptions()...)
	srv.Register(gs)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan struct{})
	go func() { defer close(served); _ = gs.Serve(ln) }()
	conn, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		conn.Close()
		gs.Stop()
		<-served
		cancel()
		if err := repo.Shutdown(context.Background(), deadline); err != nil {
			t.Errorf("shutdown: %v", err)
		}
	})
	return pb.NewGRPCInferenceServiceClient(conn)
}

// seqRequest is one request of a sequence, as tritonclient sends it.
func seqRequest(id string, seq int64, start, end bool, x int32) *pb.ModelInferRequest {
	raw := make([]byte, 4)
	binary.LittleEndian.PutUint32(raw, uint32(x))
	return &pb.ModelInferRequest{
		ModelName: "simple_sequence_state", Id: id,
		Inputs:           []*pb.ModelInferRequest_InferInputTensor{{Name: "INPUT", Datatype: "INT32", Shape: []int64{1, 1}}},
		RawInputContents: [][]byte{raw},
		Parameters: map[string]*pb.InferParameter{
			"sequence_id":    {ParameterChoice: &pb.InferParameter_Int64Param{Int64Param: seq}},
			"sequence_start": {ParameterChoice: &pb.InferParameter_BoolParam{BoolParam: start}},
			"sequence_end":   {ParameterChoice: &pb.InferParameter_BoolParam{BoolParam: end}},
		},
	}
}

// Several sequences sent request by request in turn on one stream, without
// waiting for answers: the stream's requests run concurrently, yet each
// sequence's run in the order sent, each with its own state, and its
// answers come back in that order; a request refused for its inputs
// mid-sequence does not enter it.
func TestStreamSequencesInOrder(t *testing.T) {
	client := startRepo(t)
	ctx := callCtx(t)
	stream, err := client.ModelStreamInfer(ctx)
	if err != nil {
		t.Fatal(err)
	}
	const seqs, steps = 6, 15
	sent := 0
	for i := range steps {
		for s := range seqs {
			req := seqRequest(fmt.Sprintf("%d_%d", s, i), int64(100+s), i == 0, i == steps-1, int32(s*100+i))
			if err := stream.Send(req); err != nil {
				t.Fatal(err)
			}
			sent++
			if i == 5 && s == 0 { // a wrong input name, carrying END: refused, and the sequence goes on
				bad := seqRequest("bad", 100, false, true, 1)
				bad.Inputs[0].Name = "NOPE"
				if err := stream.Send(bad); err != nil {
					t.Fatal(err)
				}
				sent++
			}
		}
	}
	if err := stream.CloseSend(); err != nil {
		t.Fatal(err)
	}
	got := map[string]int32{}
	next := make([]int, seqs) // the step each sequence's next answer must be: answers leave in the order sent
	for range sent {
		r, err := stream.Recv()
		if err != nil {
			t.Fatal(err)
		}
		id := r.GetInferResponse().GetId()
		if id == "bad" {
			if r.GetErrorMessage() == "" {
				t.Fatal("a request with a wrong input was answered")
			}
			continue
		}
		if r.GetErrorMessage() != "" {
			t.Fatalf("%s: %s", id, r.GetErrorMessage())
		}
		var s, i int
		if _, err := fmt.Sscanf(id, "%d_%d", &s, &i); err != nil {
			t.Fatalf("answer id %q: %v", id, err)
		}
		if i != next[s] {
			t.Fatalf("sequence %d: the answer to step %d came before step %d's (Triton answers a sequence in order)", s, i, next[s])
		}
		next[s]++
		out := r.GetInferResponse()
		if len(out.GetOutputs()) != 1 || out.GetOutputs()[0].GetName() != "OUTPUT" {
			t.Fatalf("%s: outputs %v; the state must stay in the server", id, out.GetOutputs())
		}
		got[id] = int32(binary.LittleEndian.Uint32(out.GetRawOutputContents()[0]))
	}
	for s := range seqs {
		sum := int32(0)
		for i := range steps {
			sum += int32(s*100 + i)
			if v := got[fmt.Sprintf("%d_%d", s, i)]; v != sum {
				t.Fatalf("sequence %d request %d: %d, want the running sum %d", s, i, v, sum)
			}
		}
	}
}

// Triton's sentences, with Triton's status codes, over a unary call.
func TestSequenceRefusalsUnary(t *testing.T) {
	client := startRepo(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err := client.ModelInfer(ctx, seqRequest("", 555, false, false, 1))
	wantCode(t, err, codes.InvalidArgument, "inference request for sequence 555 to model 'simple_sequence_state' must specify the START flag on the first request of the sequence")
	req := seqRequest("", 0, true, false, 1)
	_, err = client.ModelInfer(ctx, req)
	wantCode(t, err, codes.InvalidArgument, "inference request to model 'simple_sequence_state' must specify a non-zero or non-empty correlation ID")
	req.Parameters["sequence_id"] = &pb.InferParameter{ParameterChoice: &pb.InferParameter_DoubleParam{DoubleParam: 1.5}}
	_, err = client.ModelInfer(ctx, req)
	wantCode(t, err, codes.InvalidArgument, `request parameter "sequence_id" must be an unsigned integer or a string, got a double_param`)
	req.Parameters["sequence_id"] = &pb.InferParameter{ParameterChoice: &pb.InferParameter_StringParam{StringParam: "s-1"}}
	if _, err := client.ModelInfer(ctx, req); err != nil {
		t.Fatalf("a string sequence ID: %v", err)
	}
}
