// Command ceiling gives bench/serve.sh its ceilings.
//
// Default mode (the HTTP ceiling): a bare fasthttp server, the same fasthttp
// version as fw serve, that answers every request with a fixed small JSON
// body. Whatever a model server does on top of HTTP can only make it slower
// than this on the same machine and the same load generator.
//
//	go run ./bench/ceiling -addr 127.0.0.1:18100
//
// -grpc ADDR (the gRPC ceiling): a bare grpc-go server, the same version and
// generated service as fw serve --grpc-port, whose ModelInfer answers every
// request with a fixed small output (the digits model's 10 logits) and does
// nothing else: the most any gRPC model server can answer on this machine
// with the same load generator.
//
//	go run ./bench/ceiling -grpc 127.0.0.1:18119
//
// -engine PATH (the engine ceiling): no HTTP at all; the model is loaded with
// github.com/fw-serve/fw/engine and called back to back, single-threaded
// caller, at each batch size; it prints one JSON line per batch size and a
// final {"best_rows_per_s": ...} line.
//
//	go run ./bench/ceiling -engine build/models/resnet18.onnx -batches 1,8,16,32 -seconds 3
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"net"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/fw-serve/fw/engine"
	pb "github.com/fw-serve/fw/grpcapi/inferencepb"
	"github.com/valyala/fasthttp"
	"google.golang.org/grpc"
)

var body = []byte(`{"predictions":[[0.1,0.2,0.3,0.4,0.5,0.6,0.7,0.8,0.9,1.0]],"labels":["9"]}`)

func main() {
	addr := flag.String("addr", "127.0.0.1:18100", "listen address (loopback)")
	model := flag.String("engine", "", "measure the engine on this model file instead of serving HTTP")
	batches := flag.String("batches", "1,8,16,32", "engine mode: batch sizes")
	seconds := flag.Float64("seconds", 3, "engine mode: seconds per batch size")
	threads := flag.Int("threads", 0, "engine mode: intra-op threads (0: available CPUs, as fw serve with one instance)")
	grpcAddr := flag.String("grpc", "", "serve the gRPC ceiling (ModelInfer with a fixed answer) on this address instead of HTTP")
	flag.Parse()
	if *grpcAddr != "" {
		if err := grpcCeiling(*grpcAddr); err != nil {
			fmt.Fprintln(os.Stderr, "ceiling:", err)
			os.Exit(1)
		}
		return
	}
	if *model != "" {
		if err := engineCeiling(*model, *batches, *seconds, *threads); err != nil {
			fmt.Fprintln(os.Stderr, "ceiling:", err)
			os.Exit(1)
		}
		return
	}
	s := &fasthttp.Server{
		Name: "ceiling",
		Handler: func(ctx *fasthttp.RequestCtx) {
			ctx.SetContentType("application/json")
			ctx.SetBody(body)
		},
	}
	go func() {
		ch := make(chan os.Signal, 1)
		signal.Notify(ch, syscall.SIGINT, syscall.SIGTERM)
		<-ch
		_ = s.Shutdown()
	}()
	fmt.Printf("ceiling: listening on http://%s\n", *addr)
	if err := s.ListenAndServe(*addr); err != nil {
		fmt.Fprintln(os.Stderr, "ceiling:", err)
		os.Exit(1)
	}
}

type result struct {
	Batch    int     `json:"batch"`
	Calls    int     `json:"calls"`
	P50ms    float64 `json:"p50_ms"`
	RowsPerS float64 `json:"rows_per_s"`
	Threads  int     `json:"threads"`
}

func engineCeiling(path, batches string, seconds float64, threads int) error {
	ctx := context.Background()
	if threads == 0 {
		threads = engine.AvailableCPUs()
	}
	m, err := engine.Load(ctx, path, engine.Options{Threads: threads})
	if err != nil {
		return err
	}
	defer m.Close()
	best := result{}
	for _, s := range strings.Split(batches, ",") {
		b, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || b < 1 {
			return fmt.Errorf("bad batch size %q", s)
		}
		in, err := m.ExampleInputs(b)
		if err != nil {
			return err
		}
		for i := 0; i < 2; i++ {
			if _, err := m.Run(ctx, in); err != nil {
				return err
			}
		}
		var lat []time.Duration
		budget := time.Duration(seconds * float64(time.Second))
		start := time.Now()
		for len(lat) < 3 || time.Since(start) < budget {
			t0 := time.Now()
			if _, err := m.Run(ctx, in); err != nil {
				return err
			}
			lat = append(lat, time.Since(t0))
		}
		total := time.Since(start)
		slices.Sort(lat)
		r := result{Batch: b, Calls: len(lat), Threads: threads,
			P50ms:    float64(lat[len(lat)/2].Microseconds()) / 1000,
			RowsPerS: float64(b*len(lat)) / total.Seconds()}
		line, _ := json.Marshal(r)
		fmt.Println(string(line))
		if r.RowsPerS > best.RowsPerS {
			best = r
		}
	}
	line, _ := json.Marshal(map[string]any{"best_rows_per_s": best.RowsPerS, "best_batch": best.Batch, "threads": threads, "model": m.Name()})
	fmt.Println(string(line))
	return nil
}

// ceilingService answers ModelInfer with a fixed output.
type ceilingService struct {
	pb.UnimplementedGRPCInferenceServiceServer
}

var logits = make([]byte, 40) // FP32 [1, 10]

func (ceilingService) ModelInfer(_ context.Context, req *pb.ModelInferRequest) (*pb.ModelInferResponse, error) {
	return &pb.ModelInferResponse{ModelName: req.GetModelName(), Id: req.GetId(),
		Outputs:           []*pb.ModelInferResponse_InferOutputTensor{{Name: "logits", Datatype: "FP32", Shape: []int64{1, 10}}},
		RawOutputContents: [][]byte{logits}}, nil
}

func grpcCeiling(addr string) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	gs := grpc.NewServer()
	pb.RegisterGRPCInferenceServiceServer(gs, ceilingService{})
	go func() {
		ch := make(chan os.Signal, 1)
		signal.Notify(ch, syscall.SIGINT, syscall.SIGTERM)
		<-ch
		gs.Stop()
	}()
	fmt.Printf("ceiling: gRPC on %s\n", addr)
	return gs.Serve(ln)
}
