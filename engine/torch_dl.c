//go:build cgo

// torch_dl.c: see torch_dl.h. The table is filled once, under the Go side's
// sync.Once, before any other call.
#include "torch_dl.h"

#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

static struct {
  int (*abi_version)(void);
  const char *(*torch_version)(void);
  int (*cuda_available)(void);
  fwt_module *(*load)(const char *, const char *, char *, size_t);
  fwt_module *(*load_package)(const char *, const char *, char *, size_t);
  int (*describe)(fwt_module *, char **, char *, size_t);
  int (*set_threads)(int, char *, size_t);
  int (*forward)(fwt_module *, const fwt_tensor *, int, fwt_tensor **, int *, char *, size_t);
  void (*free_tensors)(fwt_tensor *, int);
  void (*free_string)(char *);
  void (*free_module)(fwt_module *);
} shim;

#define LOAD(field, name)                                              \
  do {                                                                 \
    *(void **)(&shim.field) = dlsym(h, name);                          \
    if (shim.field == NULL) {                                          \
      snprintf(err, errlen, "symbol %s missing from the shim", name);  \
      return -1;                                                       \
    }                                                                  \
  } while (0)

int fwdl_open(const char *path, char *err, size_t errlen) {
  /* The C++ runtime first, into the global scope, as a C++ program or Python
   * (through torch's libtorch_global_deps.so) has it. Without it, libstdc++'s
   * own references to std::call_once's thread-local state (__once_call) can
   * bind to a copy in the first library of the shim's group, while cuDNN's
   * sub-libraries, which libcudnn opens later in a group of their own, bind to
   * libstdc++'s: cuDNN's first handle then calls a null pointer (seen on an
   * H200 with torch 2.11+cu130 and the image's g++ 13: every convolution on
   * the GPU crashed, and LD_PRELOAD=libstdc++.so.6 cured it). Best effort: a
   * machine without it cannot load libtorch either, and says so below. */
  dlopen("libstdc++.so.6", RTLD_NOW | RTLD_GLOBAL);
  void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (h == NULL) {
    const char *e = dlerror();
    snprintf(err, errlen, "%s", e ? e : "dlopen failed");
    return -1;
  }
  LOAD(abi_version, "fwt_abi_version");
  /* Checked before the other symbols: an older shim lacks some of them. */
  if (shim.abi_version() != FWT_ABI_VERSION) {
    snprintf(err, errlen, "the shim has ABI version %d, this fw needs %d: rebuild it with `make shim`", shim.abi_version(),
             FWT_ABI_VERSION);
    return -1;
  }
  LOAD(torch_version, "fwt_torch_version");
  LOAD(cuda_available, "fwt_cuda_available");
  LOAD(load, "fwt_load");
  LOAD(load_package, "fwt_load_package");
  LOAD(describe, "fwt_describe");
  LOAD(set_threads, "fwt_set_threads");
  LOAD(forward, "fwt_forward");
  LOAD(free_tensors, "fwt_free_tensors");
  LOAD(free_string, "fwt_free_string");
  LOAD(free_module, "fwt_free");
  return 0;
}

int fwdl_abi_version(void) { return shim.abi_version(); }
const char *fwdl_torch_version(void) { return shim.torch_version(); }
int fwdl_cuda_available(void) { return shim.cuda_available(); }
fwt_module *fwdl_load(const char *path, const char *device, char *err, size_t errlen) {
  return shim.load(path, device, err, errlen);
}
fwt_module *fwdl_load_package(const char *path, const char *device, char *err, size_t errlen) {
  return shim.load_package(path, device, err, errlen);
}
int fwdl_describe(fwt_module *m, char **json, char *err, size_t errlen) {
  return shim.describe(m, json, err, errlen);
}
int fwdl_set_threads(int n, char *err, size_t errlen) { return shim.set_threads(n, err, errlen); }
int fwdl_forward(fwt_module *m, const fwt_tensor *in, int nin, fwt_tensor **out, int *nout, char *err,
                 size_t errlen) {
  return shim.forward(m, in, nin, out, nout, err, errlen);
}
void fwdl_free_tensors(fwt_tensor *t, int n) { shim.free_tensors(t, n); }
void fwdl_free_string(char *s) { shim.free_string(s); }
void fwdl_free(fwt_module *m) { shim.free_module(m); }
