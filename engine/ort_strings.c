//go:build cgo

// ort_strings.c: see ort_strings.h.
#include "ort_strings.h"

#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

const OrtApi *fwort_api(const char *path, char *err, size_t errlen) {
  // RTLD_NOLOAD: the library onnxruntime_go opened, never a second copy.
  // The handle is kept: the API table lives in the library, which stays
  // loaded for the life of the process.
  void *h = dlopen(path, RTLD_LAZY | RTLD_NOLOAD);
  if (h == NULL) {
    const char *e = dlerror();
    snprintf(err, errlen, "%s is not loaded: %s", path, e ? e : "dlopen failed");
    return NULL;
  }
  const OrtApiBase *(*get_base)(void) = NULL;
  *(void **)(&get_base) = dlsym(h, "OrtGetApiBase");
  if (get_base == NULL) {
    snprintf(err, errlen, "%s has no OrtGetApiBase", path);
    dlclose(h);
    return NULL;
  }
  const OrtApiBase *base = get_base();
  const OrtApi *api = base ? base->GetApi(FWORT_API_VERSION) : NULL;
  if (api == NULL) {
    snprintf(err, errlen, "ONNX Runtime %s at %s does not offer C API version %d (ONNX Runtime 1.16 or later does)",
             base ? base->GetVersionString() : "(unknown version)", path, FWORT_API_VERSION);
    dlclose(h);
    return NULL;
  }
  return api;
}

// fail copies status's message into err and releases status.
static int fail(const OrtApi *api, OrtStatus *status, char *err, size_t errlen) {
  snprintf(err, errlen, "%s", api->GetErrorMessage(status));
  api->ReleaseStatus(status);
  return -1;
}

int fwort_fill_strings(const OrtApi *api, OrtValue *value, const unsigned char *data, size_t len, size_t n,
                       char *err, size_t errlen) {
  OrtTensorTypeAndShapeInfo *info = NULL;
  OrtStatus *st = api->GetTensorTypeAndShape(value, &info);
  if (st != NULL) return fail(api, st, err, errlen);
  size_t count = 0;
  ONNXTensorElementDataType type = ONNX_TENSOR_ELEMENT_DATA_TYPE_UNDEFINED;
  st = api->GetTensorShapeElementCount(info, &count);
  if (st == NULL) st = api->GetTensorElementType(info, &type);
  api->ReleaseTensorTypeAndShapeInfo(info);
  if (st != NULL) return fail(api, st, err, errlen);
  if (type != ONNX_TENSOR_ELEMENT_DATA_TYPE_STRING) {
    snprintf(err, errlen, "the tensor holds element type %d, not strings", (int)type);
    return -1;
  }
  if (count != n) {
    snprintf(err, errlen, "the tensor has %zu elements, the data %zu", count, n);
    return -1;
  }
  size_t off = 0;  // always <= len
  for (size_t k = 0; k < n; k++) {
    if (len - off < 4) {
      snprintf(err, errlen, "element %zu: the data ends inside its 4-byte length", k);
      return -1;
    }
    const unsigned char *p = data + off;
    uint32_t l = (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
    off += 4;
    if ((uint64_t)l > (uint64_t)(len - off)) {
      snprintf(err, errlen, "element %zu: its length %u runs past the end of the data (%zu bytes left)", k, l, len - off);
      return -1;
    }
    char *buf = NULL;
    st = api->GetResizedStringTensorElementBuffer(value, k, (size_t)l, &buf);
    if (st != NULL) return fail(api, st, err, errlen);
    if (l > 0) {
      if (buf == NULL) {
        snprintf(err, errlen, "element %zu: ONNX Runtime gave no buffer for %u bytes", k, l);
        return -1;
      }
      memcpy(buf, data + off, l);
    }
    off += l;
  }
  if (off != len) {
    snprintf(err, errlen, "%zu bytes follow the %zu elements", len - off, n);
    return -1;
  }
  return 0;
}
