//go:build cgo

package engine

/*
#cgo CFLAGS: -I${SRCDIR}/../cmake -O2
#cgo LDFLAGS: -ldl
#include <stdlib.h>
#include "torch_dl.h"
*/
import "C"

import (
	"context"
	"encoding/json"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"unsafe"
)

const errBufLen = 4096

// torchRuntime guards the dlopen of the shim, which is process-wide: it is
// opened once, from the first path used.
var torchRuntime struct {
	once sync.Once
	path string
	err  error
}

// TorchShimPath is where fw looks for libfwtorch.so: override
// (Options.TorchShim; fw reads FW_TORCH_SHIM into it) when set, else
// build/lib or lib/ next to the binary or above the working directory.
func TorchShimPath(override string) string {
	return findLibrary(override, "build/lib/libfwtorch.so", "lib/libfwtorch.so")
}

func initTorch(override string) error {
	torchRuntime.once.Do(func() {
		p := TorchShimPath(override)
		if p == "" {
			torchRuntime.err = fmt.Errorf("the libtorch shim (libfwtorch.so) is not built: run `make shim` (it builds against the torch in .venv) or set FW_TORCH_SHIM; ONNX models work without it")
			return
		}
		torchRuntime.path = p
		cp := C.CString(p)
		defer C.free(unsafe.Pointer(cp))
		var buf [errBufLen]C.char
		if C.fwdl_open(cp, &buf[0], errBufLen) != 0 {
			torchRuntime.err = fmt.Errorf("open libtorch shim %s: %s", p, C.GoString(&buf[0]))
			return
		}
		if v := int(C.fwdl_abi_version()); v != C.FWT_ABI_VERSION {
			torchRuntime.err = fmt.Errorf("libtorch shim %s has ABI version %d, this fw needs %d: rebuild it with `make shim`", p, v, C.FWT_ABI_VERSION)
		}
	})
	return torchRuntime.err
}

// TorchVersion reports the libtorch version the shim was built against.
func TorchVersion(override string) (string, error) {
	if err := initTorch(override); err != nil {
		return "", err
	}
	return C.GoString(C.fwdl_torch_version()), nil
}

// TorchCUDAAvailable reports whether libtorch sees a CUDA device.
func TorchCUDAAvailable(override string) bool {
	return initTorch(override) == nil && C.fwdl_cuda_available() == 1
}

type torchBackend struct {
	mu      sync.RWMutex // Close waits for running forwards
	mod     *C.fwt_module
	inputs  []TensorSpec
	outputs []TensorSpec
}

// newTorchBackend loads a TorchScript file, or with pkg an AOTInductor
// package, into libtorch through the shim.
func newTorchBackend(path string, opts Options, pkg bool) (Backend, error) {
	fail := func(code, msg string, err error, hint string) (Backend, error) {
		return nil, &LoadError{Path: path, Code: code, Msg: msg, Err: err, Hint: hint}
	}
	if err := initTorch(opts.TorchShim); err != nil {
		return fail(CodeBackend, "libtorch is unavailable", err, "")
	}
	var buf [errBufLen]C.char
	if C.fwdl_set_threads(C.int(opts.threads()), &buf[0], errBufLen) != 0 {
		return fail(CodeEngine, "set libtorch threads", fmt.Errorf("%s", C.GoString(&buf[0])), "")
	}
	device := string(opts.Device)
	if device == "" {
		device = "cpu"
	}
	cpath, cdev := C.CString(path), C.CString(strings.ToLower(device))
	defer C.free(unsafe.Pointer(cpath))
	defer C.free(unsafe.Pointer(cdev))
	var mod *C.fwt_module
	if pkg {
		mod = C.fwdl_load_package(cpath, cdev, &buf[0], errBufLen)
	} else {
		mod = C.fwdl_load(cpath, cdev, &buf[0], errBufLen)
	}
	if mod == nil {
		return fail(CodeEngine, "libtorch cannot load the model", fmt.Errorf("%s", firstLine(C.GoString(&buf[0]))), "")
	}
	b := &torchBackend{mod: mod}
	var js *C.char
	if C.fwdl_describe(mod, &js, &buf[0], errBufLen) == 0 {
		var desc struct {
			Inputs   []struct{ Name, Type string }
			CallSpec []string `json:"call_spec"`
		}
		err := json.Unmarshal([]byte(C.GoString(js)), &desc)
		C.fwdl_free_string(js)
		if err == nil && pkg {
			nin, nout, err := callSpecCounts(desc.CallSpec)
			if err != nil {
				b.Close()
				return fail(CodeEngine, "cannot use the AOTInductor package's call spec", err, "")
			}
			// The package names no inputs or outputs, and checks dtypes and
			// shapes itself: those come from fw.json when present.
			for i := range nin {
				b.inputs = append(b.inputs, TensorSpec{Name: fmt.Sprintf("input_%d", i)})
			}
			for i := range nout {
				b.outputs = append(b.outputs, TensorSpec{Name: fmt.Sprintf("output_%d", i)})
			}
		} else if err == nil {
			for _, in := range desc.Inputs {
				if !strings.HasPrefix(in.Type, "Tensor") {
					b.Close()
					return fail(CodeEngine, fmt.Sprintf("forward() argument %q is a %s; fw feeds tensors only", in.Name, in.Type), nil, "")
				}
				// TorchScript's schema carries no dtype or shape: those come
				// from fw.json, or are checked by the model itself.
				b.inputs = append(b.inputs, TensorSpec{Name: in.Name})
			}
		}
	}
	return b, nil
}

func firstLine(s string) string {
	s = strings.TrimSpace(s)
	// libtorch messages carry a long C++ stack trace after the first lines.
	if i := strings.Index(s, "\nException raised from"); i > 0 {
		s = s[:i]
	}
	return strings.TrimSpace(s)
}

func (b *torchBackend) Inputs() []TensorSpec  { return b.inputs }
func (b *torchBackend) Outputs() []TensorSpec { return b.outputs }

func (b *torchBackend) Run(ctx context.Context, inputs []Tensor) ([]Tensor, error) {
	b.mu.RLock()
	defer b.mu.RUnlock()
	if b.mod == nil {
		return nil, fmt.Errorf("model is closed")
	}
	n := len(inputs)
	cin := (*C.fwt_tensor)(C.calloc(C.size_t(max(n, 1)), C.sizeof_fwt_tensor))
	defer C.free(unsafe.Pointer(cin))
	ins := unsafe.Slice(cin, max(n, 1))
	var pinner runtime.Pinner
	defer pinner.Unpin()
	for i, t := range inputs {
		if len(t.Shape) > C.FWT_MAX_DIMS {
			return nil, fmt.Errorf("input %d has rank %d; at most %d is supported", i, len(t.Shape), C.FWT_MAX_DIMS)
		}
		if len(t.Data) == 0 {
			return nil, fmt.Errorf("input %d is empty", i)
		}
		pinner.Pin(&t.Data[0])
		ins[i].dtype = C.int32_t(t.DType)
		ins[i].ndim = C.int32_t(len(t.Shape))
		for j, d := range t.Shape {
			ins[i].shape[j] = C.int64_t(d)
		}
		ins[i].data = unsafe.Pointer(&t.Data[0])
		ins[i].nbytes = C.size_t(len(t.Data))
	}
	var out *C.fwt_tensor
	var nout C.int
	var buf [errBufLen]C.char
	if C.fwdl_forward(b.mod, cin, C.int(n), &out, &nout, &buf[0], errBufLen) != 0 {
		return nil, fmt.Errorf("%s", firstLine(C.GoString(&buf[0])))
	}
	defer C.fwdl_free_tensors(out, nout)
	outs := unsafe.Slice(out, int(nout))
	results := make([]Tensor, len(outs))
	for i, o := range outs {
		shape := make([]int64, int(o.ndim))
		for j := range shape {
			shape[j] = int64(o.shape[j])
		}
		t, err := NewTensor(DType(o.dtype), shape)
		if err != nil {
			return nil, fmt.Errorf("output %d: %w", i, err)
		}
		if len(t.Data) != int(o.nbytes) {
			return nil, fmt.Errorf("output %d: %d bytes for shape %v", i, int(o.nbytes), shape)
		}
		if o.nbytes > 0 {
			copy(t.Data, unsafe.Slice((*byte)(o.data), int(o.nbytes)))
		}
		results[i] = t
	}
	return results, nil
}

func (b *torchBackend) Close() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.mod != nil {
		C.fwdl_free(b.mod)
		b.mod = nil
	}
	return nil
}
