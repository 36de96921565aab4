package tune

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net"
	"net/http"
	"slices"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	pb "github.com/fw-serve/fw/grpcapi/inferencepb"
	"github.com/fw-serve/fw/internal/procstat"
)

// driver sends one request and waits for its answer; it is safe for
// concurrent use.
type driver interface {
	Do(ctx context.Context) error
	Close()
}

// spec is an input as GET /model describes it.
type spec struct {
	Name  string  `json:"name"`
	DType string  `json:"dtype"`
	Shape []int64 `json:"shape"`
}

type modelInfo struct {
	Name    string `json:"name"`
	Version string `json:"version"`
	Inputs  []spec `json:"inputs"`
}

// describe reads the served model's name and inputs.
func describe(ctx context.Context, url string) (modelInfo, error) {
	var mi modelInfo
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url+"/model", nil)
	if err != nil {
		return mi, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return mi, fmt.Errorf("reading the model's inputs: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return mi, fmt.Errorf("reading the model's inputs: GET /model answered %d", resp.StatusCode)
	}
	if err := json.NewDecoder(resp.Body).Decode(&mi); err != nil {
		return mi, fmt.Errorf("reading the model's inputs: %w", err)
	}
	if len(mi.Inputs) == 0 {
		return mi, errors.New("the model lists no inputs")
	}
	return mi, nil
}

// shapeOf is the shape of one request's tensor for sp: rows on a batch
// axis (-1 first), else the model's whole shape; other variable axes 1.
func shapeOf(sp spec, rows int) []int64 {
	shape := slices.Clone(sp.Shape)
	for i, d := range shape {
		if d < 0 {
			shape[i] = 1
			if i == 0 {
				shape[i] = int64(rows)
			}
		}
	}
	return shape
}

func count(shape []int64) int {
	n := 1
	for _, d := range shape {
		n *= int(d)
	}
	return n
}

// value is element i of a generated input: numbers in [0, 1) for floats,
// small integers otherwise (valid token IDs and class indexes).
func value(dtype string, rng *rand.Rand) any {
	switch dtype {
	case "float32", "float64", "float16", "bfloat16":
		return math.Round(rng.Float64()*1000) / 1000
	case "bool":
		return rng.IntN(2) == 1
	case "string":
		return "a"
	}
	return rng.IntN(2)
}

// nest builds rows nested to shape from flat values.
func nest(flat []any, shape []int64) any {
	if len(shape) <= 1 {
		return flat
	}
	step := len(flat) / int(shape[0])
	out := make([]any, shape[0])
	for i := range out {
		out[i] = nest(flat[i*step:(i+1)*step], shape[1:])
	}
	return out
}

// httpDriver posts one /predict body.
type httpDriver struct {
	url    string
	body   []byte
	client *http.Client
}

func newHTTPDriver(ctx context.Context, url string, rows int) (driver, error) {
	mi, err := describe(ctx, url)
	if err != nil {
		return nil, err
	}
	rng := rand.New(rand.NewPCG(1, 2))
	inputs := map[string]any{}
	for _, sp := range mi.Inputs {
		shape := shapeOf(sp, rows)
		flat := make([]any, count(shape))
		for i := range flat {
			flat[i] = value(sp.DType, rng)
		}
		inputs[sp.Name] = nest(flat, shape)
	}
	body, err := json.Marshal(map[string]any{"inputs": inputs})
	if err != nil {
		return nil, err
	}
	tr := &http.Transport{MaxIdleConnsPerHost: 1024, DisableCompression: true}
	return &httpDriver{url: url + "/predict", body: body, client: &http.Client{Transport: tr, Timeout: time.Minute}}, nil
}

func (d *httpDriver) Do(ctx context.Context) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, d.url, bytes.NewReader(d.body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := d.client.Do(req)
	if err != nil {
		return err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("POST /predict answered %d", resp.StatusCode)
	}
	return nil
}

func (d *httpDriver) Close() { d.client.CloseIdleConnections() }

// grpcDriver sends one ModelInfer with raw input contents.
type grpcDriver struct {
	conn   *grpc.ClientConn
	client pb.GRPCInferenceServiceClient
	req    *pb.ModelInferRequest
}

// v2Types are the V2 datatypes and element sizes of the dtypes fw reports.
var v2Types = map[string]struct {
	name string
	size int
}{
	"float32": {"FP32", 4}, "float64": {"FP64", 8}, "int64": {"INT64", 8}, "int32": {"INT32", 4},
	"int16": {"INT16", 2}, "int8": {"INT8", 1}, "uint8": {"UINT8", 1}, "bool": {"BOOL", 1},
}

func newGRPCDriver(ctx context.Context, url, addr string, rows int) (driver, error) {
	mi, err := describe(ctx, url)
	if err != nil {
		return nil, err
	}
	req := &pb.ModelInferRequest{ModelName: mi.Name, ModelVersion: mi.Version}
	rng := rand.New(rand.NewPCG(1, 2))
	for _, sp := range mi.Inputs {
		t, ok := v2Types[sp.DType]
		if !ok {
			return nil, fmt.Errorf("input %q is %s, which the gRPC load does not generate; use --protocol http", sp.Name, sp.DType)
		}
		shape := shapeOf(sp, rows)
		raw := make([]byte, count(shape)*t.size)
		for i := 0; i < count(shape); i++ {
			switch sp.DType {
			case "float32":
				binary.LittleEndian.PutUint32(raw[i*4:], math.Float32bits(rng.Float32()))
			case "float64":
				binary.LittleEndian.PutUint64(raw[i*8:], math.Float64bits(rng.Float64()))
			default:
				raw[i*t.size] = byte(rng.IntN(2)) // small integers, little-endian
			}
		}
		req.Inputs = append(req.Inputs, &pb.ModelInferRequest_InferInputTensor{Name: sp.Name, Datatype: t.name, Shape: shape})
		req.RawInputContents = append(req.RawInputContents, raw)
	}
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, fmt.Errorf("connecting to %s: %w", addr, err)
	}
	return &grpcDriver{conn: conn, client: pb.NewGRPCInferenceServiceClient(conn), req: req}, nil
}

func (d *grpcDriver) Do(ctx context.Context) error {
	_, err := d.client.ModelInfer(ctx, d.req)
	return err
}

func (d *grpcDriver) Close() { _ = d.conn.Close() }

// drive runs c closed-loop clients for warm, then measures them for dur:
// answers, failures, latencies, and the CPU time process pid spent.
func drive(ctx context.Context, d driver, pid, c int, warm, dur time.Duration) (Point, error) {
	p := Point{Concurrency: c}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var stopped sync.WaitGroup
	begin := time.Now().Add(warm)
	end := begin.Add(dur)
	lats := make([][]time.Duration, c)
	fails := make([]int, c)
	var firstErr error
	var errOnce sync.Once
	stopped.Add(c)
	for w := range c {
		go func() {
			defer stopped.Done()
			for {
				t0 := time.Now()
				if t0.After(end) || ctx.Err() != nil {
					break
				}
				err := d.Do(ctx)
				t1 := time.Now()
				if t0.Before(begin) {
					continue
				}
				if t1.After(end) {
					break
				}
				if err != nil {
					fails[w]++
					errOnce.Do(func() { firstErr = err })
					continue
				}
				lats[w] = append(lats[w], t1.Sub(t0))
			}
		}()
	}
	// CPU time over the measured window.
	time.Sleep(time.Until(begin))
	cpu0, cpuErr := procstat.CPU(pid)
	time.Sleep(time.Until(end))
	cpu1, cpuErr1 := procstat.CPU(pid)
	stopped.Wait()
	if ctx.Err() != nil {
		return p, ctx.Err()
	}
	var all []time.Duration
	for w := range c {
		all = append(all, lats[w]...)
		p.Failed += fails[w]
	}
	slices.Sort(all)
	p.Answered = len(all)
	p.Throughput = float64(len(all)) / dur.Seconds()
	p.P50, p.P99 = percentile(all, 0.50), percentile(all, 0.99)
	if cpuErr == nil && cpuErr1 == nil && len(all) > 0 {
		p.CPU = (cpu1 - cpu0) / time.Duration(len(all))
	}
	if p.Answered == 0 && firstErr != nil {
		return p, fmt.Errorf("no request was answered: %w", firstErr)
	}
	return p, nil
}

// freePort is a free loopback TCP port (for the gRPC listener).
func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}
