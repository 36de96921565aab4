/* fwtorch.h: the plain C ABI of fw's libtorch shim (libfwtorch.so).
 *
 * The Go engine dlopen()s the shim at run time, so the fw binary never links
 * libtorch and still runs (ONNX only) where libtorch is absent. Every function
 * catches every C++ exception and reports it through the err buffer; no
 * exception ever crosses this boundary.
 *
 * Element type codes are ONNX's TensorProto.DataType values, the same numbers
 * the Go engine uses for ONNX Runtime.
 */
#ifndef FW_TORCH_SHIM_H
#define FW_TORCH_SHIM_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* 2: fwt_load_package (AOTInductor packages). */
#define FWT_ABI_VERSION 2
#define FWT_MAX_DIMS 8

enum fwt_dtype {
  FWT_FLOAT32 = 1,
  FWT_UINT8 = 2,
  FWT_INT8 = 3,
  FWT_INT32 = 6,
  FWT_INT64 = 7,
  FWT_BOOL = 9,
  FWT_FLOAT16 = 10,
  FWT_FLOAT64 = 11,
};

/* A tensor passed across the ABI. For inputs, data points at the caller's
 * memory (borrowed for the call). For outputs, data points into a CPU tensor
 * owned by handle; release outputs with fwt_free_tensors. */
typedef struct fwt_tensor {
  int32_t dtype;
  int32_t ndim;
  int64_t shape[FWT_MAX_DIMS];
  void *data;
  size_t nbytes;
  void *handle;
} fwt_tensor;

typedef struct fwt_module fwt_module;

/* FWT_ABI_VERSION of the built shim; the Go side refuses a mismatch. */
int fwt_abi_version(void);
/* The libtorch version the shim was built against, e.g. "2.13.0". */
const char *fwt_torch_version(void);
/* 1 when libtorch sees a usable CUDA device. */
int fwt_cuda_available(void);

/* Loads a TorchScript file onto device ("cpu", "cuda" or "cuda:N") in eval
 * mode. Returns NULL and fills err on failure. */
fwt_module *fwt_load(const char *path, const char *device, char *err, size_t errlen);

/* Loads an AOTInductor package (a .pt2 written by torch._inductor.aoti_compile_and_package)
 * with torch::inductor::AOTIModelPackageLoader onto device ("cpu", "cuda" or "cuda:N").
 * Before the loader opens the package's compiled library, the package metadata is checked
 * against this process, and a mismatch fails with an error naming it (instead of a crash
 * later): the device the package was compiled for (AOTI_DEVICE_KEY), its platform and
 * machine, its vector instruction set (AOTI_CPU_ISA) and, for a package fw.export.aoti
 * compiled with -march=native, every CPU feature of the exporting machine (fw.cpu_flags).
 * Packages holding no compiled library (C++ sources only, which the loader would compile by
 * running a command line taken from the package) are refused. Inputs are checked by the
 * package's own code (AOTI_RUNTIME_CHECK_INPUTS is set to 1 when unset). The package is
 * extracted into a temporary directory (under TMPDIR) that fwt_free removes.
 * Returns NULL and fills err on failure. */
fwt_module *fwt_load_package(const char *path, const char *device, char *err, size_t errlen);

/* Writes a JSON description of forward's schema into a malloc'd string:
 * {"inputs":[{"name":"x","type":"Tensor"}],"outputs":[{"type":"Tensor"}]}.
 * For an AOTInductor package the inputs and outputs are not named; the object carries
 * "call_spec": the loader's [input treespec, output treespec] (torch.utils._pytree JSON).
 * Free it with fwt_free_string. Returns 0 on success. */
int fwt_describe(fwt_module *m, char **json, char *err, size_t errlen);

/* Sets libtorch's intra-op thread count (process-wide). Returns 0 on success. */
int fwt_set_threads(int n, char *err, size_t errlen);

/* Runs forward (an AOTInductor package's run) under c10::InferenceMode. Outputs (a tensor, or a tuple/list of
 * tensors) are returned as contiguous CPU tensors in a malloc'd array of
 * *nout entries. Returns 0 on success. */
int fwt_forward(fwt_module *m, const fwt_tensor *in, int nin, fwt_tensor **out, int *nout,
                char *err, size_t errlen);

void fwt_free_tensors(fwt_tensor *t, int n);
void fwt_free_string(char *s);
void fwt_free(fwt_module *m);

#ifdef __cplusplus
}
#endif
#endif
