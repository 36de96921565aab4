//go:build cgo

package engine

/*
#cgo CFLAGS: -I${SRCDIR}/onnxruntime_go -O2
#cgo LDFLAGS: -ldl
#include <stdlib.h>
#include "ort_strings.h"
*/
import "C"

import (
	"fmt"
	"reflect"
	"strings"
	"unsafe"

	ort "github.com/yalue/onnxruntime_go"
)

// ortAPI is ONNX Runtime's C API table (OrtApi), nil before initORT.
type ortAPI = *C.OrtApi

// ortStringAPI returns the C API of the ONNX Runtime library at path, which
// initORT has loaded, for fillStrings.
func ortStringAPI(path string) (ortAPI, error) {
	cp := C.CString(path)
	defer C.free(unsafe.Pointer(cp))
	var buf [errBufLen]C.char
	api := C.fwort_api(cp, &buf[0], errBufLen)
	if api == nil {
		return nil, fmt.Errorf("ONNX Runtime's C API for string tensors: %s", C.GoString(&buf[0]))
	}
	return api, nil
}

// ortStringInput makes the ONNX Runtime value of a String input, each
// element byte for byte: onnxruntime_go creates the tensor, fw fills it
// through the C API (a NUL byte is an ordinary byte; onnxruntime_go's
// SetContents would cut the element there). t must be a String tensor; its
// Data is checked again while it is copied, whatever the caller checked.
func ortStringInput(t Tensor) (ort.Value, error) {
	if ortRuntime.api == nil {
		return nil, fmt.Errorf("ONNX Runtime is not initialised")
	}
	v, err := ort.NewStringTensor(ort.NewShape(t.Shape...))
	if err != nil {
		return nil, err
	}
	if err := fillStrings(ortRuntime.api, v, t.Data, NumElements(t.Shape)); err != nil {
		v.Destroy() // releases the OrtValue
		return nil, err
	}
	return v, nil
}

// fillStrings writes data (the serialized form, n elements) into the
// string tensor v.
func fillStrings(api ortAPI, v *ort.StringTensor, data []byte, n int64) error {
	p, err := ortValueOf(v)
	if err != nil {
		return err
	}
	if n < 0 {
		return fmt.Errorf("negative element count %d", n)
	}
	var ptr *C.uchar
	if len(data) > 0 {
		ptr = (*C.uchar)(unsafe.Pointer(unsafe.SliceData(data)))
	}
	var buf [errBufLen]C.char
	if C.fwort_fill_strings(api, p, ptr, C.size_t(len(data)), C.size_t(n), &buf[0], errBufLen) != 0 {
		return fmt.Errorf("fill the string tensor: %s", C.GoString(&buf[0]))
	}
	return nil
}

// ortValueOf returns the OrtValue behind v. onnxruntime_go keeps it in an
// unexported field (ValueInternalData.ortValue, reached through the exported
// GetInternals) and has no accessor for it; fw reads it with reflection,
// checking the field's name, kind and type, so that a release of the module
// that changes it fails here with an error (and in the engine's tests)
// instead of handing ONNX Runtime something else. The pointer is valid
// until v is destroyed.
func ortValueOf(v ort.Value) (*C.OrtValue, error) {
	in := v.GetInternals()
	if in == nil {
		return nil, fmt.Errorf("onnxruntime_go returned no internals for a %T", v)
	}
	f := reflect.ValueOf(in).Elem().FieldByName("ortValue")
	if !f.IsValid() || f.Kind() != reflect.Pointer || !strings.HasSuffix(f.Type().Elem().Name(), "OrtValue") {
		return nil, fmt.Errorf("onnxruntime_go's ValueInternalData has no ortValue pointer field (the module changed: engine/ort_strings.go reads it)")
	}
	if f.IsNil() {
		return nil, fmt.Errorf("the %T has no OrtValue (destroyed?)", v)
	}
	return (*C.OrtValue)(f.UnsafePointer()), nil
}
