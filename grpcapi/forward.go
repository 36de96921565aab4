package grpcapi

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"google.golang.org/grpc/metadata"

	pb "github.com/fw-serve/fw/grpcapi/inferencepb"
	"github.com/fw-serve/fw/serving"
)

// maxRequestParameters bounds a request's parameters map (its keys are
// sorted before they are read).
const maxRequestParameters = 4096

// allowedTritonParameters are the "triton_" request parameters Triton's
// gRPC front end takes; others starting with "triton_" are refused.
var allowedTritonParameters = []string{"triton_enable_empty_final_response"}

// modelParameters are what req hands its model beside its tensors (a
// Python model's request.parameters()): its parameters that are not
// reserved (in key order), then the call's metadata whose keys
// Config.ForwardHeaders matches anywhere (tritonserver's
// --grpc-header-forward-pattern; gRPC writes keys in lower case), as
// strings. A stream's requests forward the stream's metadata.
func (s *Server) modelParameters(ctx context.Context, req *pb.ModelInferRequest) (serving.Parameters, error) {
	var p serving.Parameters
	if n := len(req.GetParameters()); n > maxRequestParameters {
		return p, fmt.Errorf("the request has %d parameters; at most %d", n, maxRequestParameters)
	}
	names := make([]string, 0, len(req.GetParameters()))
	for name := range req.GetParameters() {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		if slices.Contains(allowedTritonParameters, name) {
			continue // the front end's
		}
		if strings.HasPrefix(name, "triton_") {
			return p, &tritonParamError{name}
		}
		v := req.GetParameters()[name]
		val := paramValue(v)
		switch c := v.GetParameterChoice().(type) {
		case *pb.InferParameter_DoubleParam:
			val = c.DoubleParam
		case *pb.InferParameter_Uint64Param:
			if !serving.ReservedParameter(name) { // Triton's sentence, then which choices it takes
				return p, fmt.Errorf("invalid value type for '%s' parameter, expected int64_param, bool_param, or string_param. (fw: double_param too)", name)
			}
		}
		if err := p.Add(name, val); err != nil {
			return p, err
		}
	}
	re := s.cfg.ForwardHeaders
	if re == nil {
		return p, nil
	}
	md, _ := metadata.FromIncomingContext(ctx)
	keys := make([]string, 0, len(md))
	for k := range md {
		if !strings.HasPrefix(k, ":") && re.MatchString(k) { // not HTTP/2's pseudo-headers
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	for _, k := range keys {
		for _, v := range md[k] {
			if err := p.AddHeader(k, v); err != nil {
				return p, err
			}
		}
	}
	return p, nil
}

// tritonParamError is a request parameter starting with "triton_" that
// the gRPC front end does not take, in Triton's sentence.
type tritonParamError struct{ name string }

func (e *tritonParamError) Error() string {
	return "parameter keys starting with 'triton_' are reserved for Triton usage. Only the following keys starting with 'triton_' are allowed: " +
		strings.Join(allowedTritonParameters, " ") + " (fw: remove " + `"` + e.name + `"` + " from the request's parameters)"
}
