package serving

import (
	"fmt"
)

// Rules of an Open Inference Protocol request that do not depend on its
// transport: the HTTP (httpapi) and gRPC (grpcapi) front ends call these
// so that the same request gets the same answer, with the same message,
// over both.

// RowLimit is the --max-rows limit (maxRows, 0: none) on the first axis of
// an input of inst's model: maxRows for a batched model, whose first axis
// counts rows, and 0 for an unbatched one, whose inputs are whole tensors
// that its specs size (the body limit bounds them).
func RowLimit(inst *Instance, maxRows int) int {
	if !inst.Model.Batched() {
		return 0
	}
	return maxRows
}

// TooManyRows is the message refusing an input whose first axis, shape[0],
// is above maxRows (0: no limit), "" when it is within it. Both transports
// answer it with their "too large" status (HTTP 413, gRPC RESOURCE_EXHAUSTED).
func TooManyRows(input string, shape []int64, maxRows int) string {
	if maxRows <= 0 || len(shape) == 0 || shape[0] <= int64(maxRows) {
		return ""
	}
	return fmt.Sprintf("input %q: shape %s has %d rows on its first axis, above the limit of %d per request (--max-rows); split the request",
		input, ShapeString(shape), shape[0], maxRows)
}
