package grpcapi

import (
	"context"
	"regexp"
	"strings"
	"testing"

	"google.golang.org/grpc/metadata"

	pb "github.com/fw-serve/fw/grpcapi/inferencepb"
)

func TestModelParameters(t *testing.T) {
	s := &Server{cfg: Config{ForwardHeaders: regexp.MustCompile("(?i)^x-tenant")}}
	str := func(v string) *pb.InferParameter {
		return &pb.InferParameter{ParameterChoice: &pb.InferParameter_StringParam{StringParam: v}}
	}
	req := &pb.ModelInferRequest{Parameters: map[string]*pb.InferParameter{
		"b_stop":                             str("END"),
		"a_n":                                {ParameterChoice: &pb.InferParameter_Int64Param{Int64Param: -3}},
		"c_top_p":                            {ParameterChoice: &pb.InferParameter_DoubleParam{DoubleParam: 1}},
		"d_stream":                           {ParameterChoice: &pb.InferParameter_BoolParam{BoolParam: true}},
		"sequence_id":                        {ParameterChoice: &pb.InferParameter_Uint64Param{Uint64Param: 9}}, // the front end's
		"triton_enable_empty_final_response": {ParameterChoice: &pb.InferParameter_BoolParam{BoolParam: true}},
	}}
	ctx := metadata.NewIncomingContext(context.Background(), metadata.Pairs("x-tenant", "acme", "x-other", "no", ":authority", "h"))
	p, err := s.modelParameters(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := p.JSON(), `{"a_n":-3,"b_stop":"END","c_top_p":1.0,"d_stream":true,"x-tenant":"acme"}`; got != want {
		t.Fatalf("parameters %s, want %s (sorted keys, the forwarded metadata last)", got, want)
	}
	for name, v := range map[string]*pb.InferParameter{
		"triton_mine": str("x"),
		"count":       {ParameterChoice: &pb.InferParameter_Uint64Param{Uint64Param: 1}},
	} {
		_, err := s.modelParameters(context.Background(), &pb.ModelInferRequest{Parameters: map[string]*pb.InferParameter{name: v}})
		if err == nil || !strings.Contains(err.Error(), name) {
			t.Errorf("%s: %v", name, err)
		}
	}
	reserved := metadata.NewIncomingContext(context.Background(), metadata.Pairs("x-tenant", "a", "timeout", "1"))
	s.cfg.ForwardHeaders = regexp.MustCompile(".*")
	if _, err := s.modelParameters(reserved, &pb.ModelInferRequest{}); err == nil || !strings.Contains(err.Error(), "Header 'timeout' is reserved for Triton usage") {
		t.Fatalf("reserved metadata: %v", err)
	}
}
