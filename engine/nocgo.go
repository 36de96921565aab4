//go:build !cgo

package engine

import "errors"

var errNoCgo = errors.New("this fw binary was built without cgo (CGO_ENABLED=0), so neither ONNX Runtime nor libtorch can be loaded; rebuild with cgo")

func newORTBackend(path string, opts Options) (Backend, *Metadata, error) {
	return nil, nil, &LoadError{Path: path, Code: CodeBackend, Msg: "ONNX Runtime is unavailable", Err: errNoCgo}
}

func newTorchBackend(path string, opts Options, pkg bool) (Backend, error) {
	return nil, &LoadError{Path: path, Code: CodeBackend, Msg: "libtorch is unavailable", Err: errNoCgo}
}

// ORTVersion reports that ONNX Runtime is unavailable without cgo.
func ORTVersion(string) (string, error) { return "", errNoCgo }

// TorchVersion reports that libtorch is unavailable without cgo.
func TorchVersion(string) (string, error) { return "", errNoCgo }

// TorchCUDAAvailable is false without cgo.
func TorchCUDAAvailable(string) bool { return false }

// ORTLibraryPath is where fw would look for libonnxruntime.so.1.
func ORTLibraryPath(override string) string {
	return findLibrary(override, "third_party/onnxruntime/lib/libonnxruntime.so.1", "lib/libonnxruntime.so.1")
}

// TorchShimPath is where fw would look for libfwtorch.so.
func TorchShimPath(override string) string {
	return findLibrary(override, "build/lib/libfwtorch.so", "lib/libfwtorch.so")
}
