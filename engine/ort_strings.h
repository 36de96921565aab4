// ort_strings.h: fills ONNX Runtime string tensors byte-exactly through the
// C API (GetResizedStringTensorElementBuffer), which onnxruntime_go does not
// expose: its StringTensor.SetContents passes C strings, which end at the
// first NUL byte. onnxruntime_c_api.h is ONNX Runtime's C API header (MIT),
// the copy engine/onnxruntime_go carries (onnxruntime_go v1.27.0's; found
// through the package's -I); fw calls only functions of C API version
// FWORT_API_VERSION.
#ifndef FW_ORT_STRINGS_H
#define FW_ORT_STRINGS_H
#include <stddef.h>

#include "onnxruntime_c_api.h"

// The C API version fw asks for: GetResizedStringTensorElementBuffer came
// with ONNX Runtime 1.16 (version 16).
#define FWORT_API_VERSION 16

// Returns the C API of the ONNX Runtime library at path, which must already
// be loaded (onnxruntime_go loaded it): NULL with the reason in err when it
// is not, or lacks OrtGetApiBase or C API version FWORT_API_VERSION.
const OrtApi *fwort_api(const char *path, char *err, size_t errlen);

// Fills the n elements of the string tensor value from data, len bytes of
// fw's serialized form (for each element its length as 4 bytes
// little-endian, then its bytes). Every length is checked against len, n
// against the tensor's element count, and the data must end with the last
// element. Returns 0, or -1 with the reason in err; value stays owned by the
// caller either way.
int fwort_fill_strings(const OrtApi *api, OrtValue *value, const unsigned char *data, size_t len, size_t n,
                       char *err, size_t errlen);
#endif
