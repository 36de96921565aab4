package engine

import (
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
