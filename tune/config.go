package tune

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strconv"

	pb "github.com/fw-serve/fw/grpcapi/inferencepb"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/encoding/prototext"
)

// fieldSpaces matches a text-format field name and the spaces after its colon.
var fieldSpaces = regexp.MustCompile(`(?m)^(\s*[A-Za-z_][A-Za-z0-9_]*):\s+`)

// servedConfig reads the model configuration fw serve answers for the
// model it serves at url (Triton's JSON form, reflecting its flags).
func servedConfig(ctx context.Context, url, name string) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url+"/v2/models/"+name+"/config", nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("reading the model configuration: %w", err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil || resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("reading the model configuration: status %d: %v", resp.StatusCode, err)
	}
	return b, nil
}

// Pbtxt is the config.pbtxt that serves the model with setting s from a
// model repository: the configuration fw serve answered under s (its
// batching, queue delay and instance count), with s's threads as the ONNX
// Runtime backend's intra_op_thread_count parameter, which fw reads as
// Triton's onnxruntime backend does.
func Pbtxt(served []byte, s Setting) ([]byte, error) {
	cfg := &pb.ModelConfig{}
	if err := (protojson.UnmarshalOptions{DiscardUnknown: true}).Unmarshal(served, cfg); err != nil {
		return nil, fmt.Errorf("reading the served configuration: %w", err)
	}
	if cfg.GetMaxBatchSize() > 0 && cfg.GetSequenceBatching() == nil {
		cfg.MaxBatchSize = int32(s.MaxBatch)
		cfg.SchedulingChoice = &pb.ModelConfig_DynamicBatching{DynamicBatching: &pb.ModelDynamicBatching{MaxQueueDelayMicroseconds: uint64(s.MaxDelay.Microseconds())}}
	}
	cfg.InstanceGroup = []*pb.ModelInstanceGroup{{Count: int32(s.Instances), Kind: pb.ModelInstanceGroup_KIND_CPU}}
	if cfg.Parameters == nil {
		cfg.Parameters = map[string]*pb.ModelParameter{}
	}
	cfg.Parameters["intra_op_thread_count"] = &pb.ModelParameter{StringValue: strconv.Itoa(s.Threads)}
	if cfg.GetDynamicBatching() != nil {
		// Measured as fw serve's --max-delay works: an idle engine never
		// waits (a repository's default is Triton's holding).
		cfg.Parameters["fw_hold_when_idle"] = &pb.ModelParameter{StringValue: "false"}
	}
	out, err := (prototext.MarshalOptions{Multiline: true, Indent: "  "}).Marshal(cfg)
	if err != nil {
		return nil, err
	}
	// prototext varies the spaces after a field name between runs (so that
	// nobody compares its bytes); a file for people gets one space.
	out = fieldSpaces.ReplaceAll(out, []byte("$1: "))
	return append([]byte("# Written by fw tune: the best setting found (docs/serving.md, Tuning).\n"), out...), nil
}
