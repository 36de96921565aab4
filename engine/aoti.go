package engine

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
)

// AOTInductor packages (.pt2) run on the libtorch backend. What is not C++
// lives here: the torch release check and reading the loader's call spec.

// checkPackageTorch refuses an AOTInductor package that fw.json says was
// compiled by another torch release (major.minor) than the libtorch the shim
// was built against: the package's compiled code calls into libtorch, and fw
// promises nothing across releases. A package without fw.json, or a shim that
// is not there (newTorchBackend reports that), is not checked here.
func checkPackageTorch(path string, md *Metadata, shim string) error {
	if md == nil || md.TorchVersion == "" {
		return nil
	}
	have, err := TorchVersion(shim)
	if err != nil {
		return nil
	}
	if torchRelease(md.TorchVersion) == torchRelease(have) {
		return nil
	}
	return &LoadError{Path: path, Code: CodeTorchVersion,
		Msg: fmt.Sprintf("the AOTInductor package was compiled with torch %s but fw runs libtorch %s", md.TorchVersion, have),
		Hint: fmt.Sprintf("export it again with torch %s (the libtorch of fw's shim), or rebuild the shim (`make shim`) against torch %s; ONNX files do not depend on the torch release",
			torchRelease(have), torchRelease(md.TorchVersion))}
}

// torchRelease is the major.minor part of a torch version ("2.13.0+cu130" -> "2.13").
func torchRelease(v string) string {
	v, _, _ = strings.Cut(v, "+")
	parts := strings.SplitN(v, ".", 3)
	if len(parts) < 2 {
		return v
	}
	return parts[0] + "." + parts[1]
}

// treeSpec is one node of a torch.utils._pytree TreeSpec as JSON
// (treespec_dumps): a leaf has a null type.
type treeSpec struct {
	Type     *string    `json:"type"`
	Children []treeSpec `json:"children_spec"`
}

// maxSpecDepth bounds the recursion over a call spec read from a package.
const maxSpecDepth = 64

func (t treeSpec) leaves(depth int) (int, error) {
	if depth > maxSpecDepth {
		return 0, fmt.Errorf("call spec nested deeper than %d", maxSpecDepth)
	}
	if t.Type == nil {
		return 1, nil
	}
	n := 0
	for _, c := range t.Children {
		k, err := c.leaves(depth + 1)
		if err != nil {
			return 0, err
		}
		n += k
	}
	return n, nil
}

func parseTreeSpec(s string) (treeSpec, error) {
	var doc []json.RawMessage // [protocol, root]
	if err := json.Unmarshal([]byte(s), &doc); err != nil || len(doc) != 2 {
		return treeSpec{}, fmt.Errorf("call spec is not a [protocol, treespec] pair")
	}
	var root treeSpec
	if err := json.Unmarshal(doc[1], &root); err != nil {
		return treeSpec{}, fmt.Errorf("call spec: %w", err)
	}
	return root, nil
}

// callSpecCounts reads an AOTInductor package's call spec (the loader's
// get_call_spec(): the input and output treespecs of torch.export) and returns
// how many positional tensor inputs it takes and how many tensors it returns.
// fw feeds inputs positionally, so a spec with keyword inputs is refused.
func callSpecCounts(spec []string) (inputs, outputs int, err error) {
	if len(spec) != 2 {
		return 0, 0, fmt.Errorf("call spec has %d entries, want 2 (inputs, outputs)", len(spec))
	}
	in, err := parseTreeSpec(spec[0])
	if err != nil {
		return 0, 0, err
	}
	// The inputs are (args, kwargs): a tuple of a tuple and a dict.
	if in.Type == nil || len(in.Children) != 2 {
		return 0, 0, fmt.Errorf("input call spec is not (args, kwargs)")
	}
	if inputs, err = in.Children[0].leaves(1); err != nil {
		return 0, 0, err
	}
	kw, err := in.Children[1].leaves(1)
	if err != nil {
		return 0, 0, err
	}
	if kw > 0 {
		return 0, 0, fmt.Errorf("the model takes %d keyword inputs; fw feeds inputs positionally (export forward(x, ...) with positional tensors)", kw)
	}
	out, err := parseTreeSpec(spec[1])
	if err != nil {
		return 0, 0, err
	}
	if outputs, err = out.leaves(0); err != nil {
		return 0, 0, err
	}
	return inputs, outputs, nil
}

// batchRange reads the batch sizes an AOTInductor package accepts from
// fw.json (export.batch_min, export.batch_max; fw.export.aoti measures them
// after compiling: Inductor narrows torch.export's 1.. range from the example,
// e.g. to 2..15 for a CPU convolution compiled from 8 rows, and the package
// refuses the rest). high is 0 for no upper bound; a package without them
// (no fw.json, or an older export) gives 1, 0: every batch is passed as is.
func batchRange(md *Metadata) (low, high int64, err error) {
	low = 1
	if md == nil || md.Export == nil {
		return low, 0, nil
	}
	num := func(key string) (int64, bool, error) {
		v, ok := md.Export[key]
		if !ok || v == nil {
			return 0, false, nil
		}
		f, isNum := v.(float64)
		if !isNum || f < 1 || f > 1<<40 || f != float64(int64(f)) {
			return 0, false, fmt.Errorf("export.%s must be a positive integer or null, got %v", key, v)
		}
		return int64(f), true, nil
	}
	if v, ok, err := num("batch_min"); err != nil {
		return 0, 0, err
	} else if ok {
		low = v
	}
	if v, ok, err := num("batch_max"); err != nil {
		return 0, 0, err
	} else if ok {
		if v < low {
			return 0, 0, fmt.Errorf("export.batch_max %d is below export.batch_min %d", v, low)
		}
		high = v
	}
	return low, high, nil
}

// rangedBackend runs an AOTInductor package at any batch size: batches
// above its range are split, batches below it padded (see runInBatchRange).
type rangedBackend struct {
	Backend
	low, high int64
}

func (r rangedBackend) Run(ctx context.Context, inputs []Tensor) ([]Tensor, error) {
	return runInBatchRange(ctx, inputs, r.low, r.high, r.Backend.Run)
}

// runInBatchRange calls run with batches of low..high rows (high 0: no upper
// bound): a larger batch is split into chunks of high rows, a chunk below low
// is padded by repeating its first row, and the padded rows' outputs dropped.
// Every input and output has the batch on axis 0 (fw.json's rule).
func runInBatchRange(ctx context.Context, inputs []Tensor, low, high int64,
	run func(context.Context, []Tensor) ([]Tensor, error)) ([]Tensor, error) {
	if len(inputs) == 0 || len(inputs[0].Shape) == 0 {
		return run(ctx, inputs)
	}
	n := inputs[0].Shape[0]
	if n >= low && (high == 0 || n <= high) {
		return run(ctx, inputs)
	}
	step := n
	if high > 0 {
		step = high
	}
	var parts [][]Tensor
	for start := int64(0); start < n; start += step {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		k := min(step, n-start)
		chunk := make([]Tensor, len(inputs))
		for i, t := range inputs {
			c, err := takeRows(t, start, k, max(k, low))
			if err != nil {
				return nil, fmt.Errorf("input %d: %w", i, err)
			}
			chunk[i] = c
		}
		out, err := run(ctx, chunk)
		if err != nil {
			return nil, err
		}
		for i, o := range out {
			if len(o.Shape) == 0 || o.Shape[0] != max(k, low) {
				return nil, fmt.Errorf("output %d has shape %v for a batch of %d rows", i, o.Shape, max(k, low))
			}
			if out[i], err = takeRows(o, 0, k, k); err != nil {
				return nil, fmt.Errorf("output %d: %w", i, err)
			}
		}
		parts = append(parts, out)
	}
	return concatRows(parts)
}

// takeRows returns rows start..start+k of t, repeating row start until the
// result has rows rows (rows >= k); without padding it shares t's memory.
func takeRows(t Tensor, start, k, rows int64) (Tensor, error) {
	if len(t.Shape) == 0 || t.Shape[0] <= 0 || start < 0 || k <= 0 || start+k > t.Shape[0] || rows < k {
		return Tensor{}, fmt.Errorf("rows %d..%d of shape %v", start, start+k, t.Shape)
	}
	rb := int64(len(t.Data)) / t.Shape[0]
	shape := append([]int64{rows}, t.Shape[1:]...)
	if rows == k {
		return Tensor{DType: t.DType, Shape: shape, Data: t.Data[start*rb : (start+k)*rb]}, nil
	}
	p, err := NewTensor(t.DType, shape)
	if err != nil {
		return Tensor{}, err
	}
	copy(p.Data, t.Data[start*rb:(start+k)*rb])
	for r := k; r < rows; r++ {
		copy(p.Data[r*rb:], t.Data[start*rb:(start+1)*rb])
	}
	return p, nil
}

// concatRows joins the outputs of several chunks along axis 0.
func concatRows(parts [][]Tensor) ([]Tensor, error) {
	if len(parts) == 1 {
		return parts[0], nil
	}
	out := make([]Tensor, len(parts[0]))
	for i := range out {
		var rows int64
		for _, p := range parts {
			if len(p) != len(out) || p[i].DType != parts[0][i].DType || len(p[i].Shape) != len(parts[0][i].Shape) {
				return nil, fmt.Errorf("chunks disagree on output %d", i)
			}
			rows += p[i].Shape[0]
		}
		t, err := NewTensor(parts[0][i].DType, append([]int64{rows}, parts[0][i].Shape[1:]...))
		if err != nil {
			return nil, err
		}
		off := 0
		for _, p := range parts {
			if off+len(p[i].Data) > len(t.Data) {
				return nil, fmt.Errorf("chunks disagree on the shape of output %d", i)
			}
			off += copy(t.Data[off:], p[i].Data)
		}
		if off != len(t.Data) {
			return nil, fmt.Errorf("chunks disagree on the shape of output %d", i)
		}
		out[i] = t
	}
	return out, nil
}
