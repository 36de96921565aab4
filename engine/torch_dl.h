// torch_dl.h: loads fw's libtorch shim (libfwtorch.so) with dlopen and calls
// its C ABI (cmake/fwtorch.h) through function pointers, so the fw binary has
// no link-time dependency on libtorch.
#ifndef FW_TORCH_DL_H
#define FW_TORCH_DL_H
#include "fwtorch.h"

// Opens the shim at path; returns 0, or -1 with dlerror()'s text in err.
int fwdl_open(const char *path, char *err, size_t errlen);
int fwdl_abi_version(void);
const char *fwdl_torch_version(void);
int fwdl_cuda_available(void);
fwt_module *fwdl_load(const char *path, const char *device, char *err, size_t errlen);
fwt_module *fwdl_load_package(const char *path, const char *device, char *err, size_t errlen);
int fwdl_describe(fwt_module *m, char **json, char *err, size_t errlen);
int fwdl_set_threads(int n, char *err, size_t errlen);
int fwdl_forward(fwt_module *m, const fwt_tensor *in, int nin, fwt_tensor **out, int *nout, char *err, size_t errlen);
void fwdl_free_tensors(fwt_tensor *t, int n);
void fwdl_free_string(char *s);
void fwdl_free(fwt_module *m);
#endif
