// fwtorch.cpp: libtorch behind the plain C ABI declared in fwtorch.h.
// Every entry point is wrapped in guard(), which turns any C++ exception into
// an error string: nothing throws across the ABI.
#include "fwtorch.h"

#include <ATen/Parallel.h>
#include <ATen/cpu/Utils.h>
#include <caffe2/serialize/inline_container.h>
#include <dlfcn.h>
#include <glob.h>
#include <link.h>
#include <sys/utsname.h>
#include <torch/csrc/inductor/aoti_package/model_package_loader.h>
#include <torch/cuda.h>
#include <torch/script.h>
#include <torch/version.h>

#include <cctype>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <optional>
#include <sstream>
#include <string>
#include <unordered_map>
#include <vector>

// One loaded model: a TorchScript module, or an AOTInductor package.
struct fwt_module {
  c10::Device device;
  std::optional<torch::jit::Module> module;
  std::unique_ptr<torch::inductor::AOTIModelPackageLoader> package;
};

namespace {

// ---------------------------------------------------------------- CUDA's libraries
//
// PyPI's torch keeps CUDA's libraries in other wheels (site-packages/nvidia/...),
// found through libtorch's RUNPATH. Some are opened later by name, from code that
// does not carry that RUNPATH: cuDNN opens NVRTC (runtime-compiled kernels) and its
// own sub-libraries, cuSPARSE opens nvJitLink. dlopen by name finds them only when
// a library of that soname is already loaded; otherwise the load fails inside cuDNN
// and the first convolution on the GPU crashes (seen: a call through a null
// pointer on an H200, torch 2.11+cu130). Python's `import torch` avoids this by
// loading libtorch_global_deps.so with RTLD_GLOBAL and preloading those libraries
// (torch/__init__.py, _load_global_deps); fw loads libtorch without Python, so the
// shim does the same, once, before CUDA is first used.

struct FoundLib {
  std::string want;  // a soname prefix, e.g. "libcudart.so."
  std::string path;
};

int find_loaded(struct dl_phdr_info *info, size_t, void *data) {
  auto *f = static_cast<FoundLib *>(data);
  if (info->dlpi_name == nullptr) return 0;
  std::string name = info->dlpi_name;
  std::string base = name.substr(name.find_last_of('/') + 1);
  if (base.rfind(f->want, 0) == 0) {
    f->path = name;
    return 1;
  }
  return 0;
}

std::string dir_of(const std::string &path) {
  auto i = path.find_last_of('/');
  return i == std::string::npos ? "." : path.substr(0, i);
}

// The first file matching pattern (glob(3), sorted), or "".
std::string first_match(const std::string &pattern) {
  glob_t g{};
  std::string out;
  if (glob(pattern.c_str(), 0, nullptr, &g) == 0 && g.gl_pathc > 0) out = g.gl_pathv[0];
  globfree(&g);
  return out;
}

void preload_cuda_libraries() {
  static std::once_flag once;
  std::call_once(once, [] {
    Dl_info info{};
    if (dladdr(reinterpret_cast<void *>(&at::get_num_threads), &info) == 0 || info.dli_fname == nullptr) return;
    char resolved[4096];
    std::string torch_lib = dir_of(realpath(info.dli_fname, resolved) ? resolved : info.dli_fname);
    // libtorch_global_deps.so links cudart, cuBLAS, cuDNN...: loaded globally, as Python does.
    // Absent (a CPU-only libtorch) or failing (no CUDA libraries): nothing to do.
    if (dlopen((torch_lib + "/libtorch_global_deps.so").c_str(), RTLD_NOW | RTLD_GLOBAL) == nullptr) return;
    FoundLib cudart{"libcudart.so.", ""};
    dl_iterate_phdr(find_loaded, &cudart);
    std::string site = dir_of(dir_of(torch_lib));  // site-packages/torch/lib -> site-packages
    // Where the wheels put them: next to cudart (CUDA 13's nvidia/cu13/lib), or
    // nvidia/<folder>/lib (CUDA 12's wheels). Order as torch's _preload_cuda_deps:
    // cublasLt before cublas.
    const std::pair<const char *, const char *> libs[] = {
        {"cublas", "libcublasLt.so.*[0-9]"},   {"cublas", "libcublas.so.*[0-9]"},
        {"cudnn", "libcudnn.so.*[0-9]"},       {"cuda_nvrtc", "libnvrtc.so.*[0-9]"},
        {"cuda_nvrtc", "libnvrtc-builtins.so.*[0-9]"}, {"cuda_runtime", "libcudart.so.*[0-9]"},
        {"cufft", "libcufft.so.*[0-9]"},       {"curand", "libcurand.so.*[0-9]"},
        {"nvjitlink", "libnvJitLink.so.*[0-9]"}, {"cusparse", "libcusparse.so.*[0-9]"},
        {"cusolver", "libcusolver.so.*[0-9]"},
    };
    std::vector<std::string> dirs;
    if (!cudart.path.empty()) dirs.push_back(dir_of(cudart.path));
    for (const auto &[folder, pattern] : libs) {
      std::vector<std::string> tries = dirs;
      tries.push_back(site + "/nvidia/" + folder + "/lib");
      for (const auto &d : tries) {
        std::string p = first_match(d + "/" + pattern);
        if (!p.empty()) {
          dlopen(p.c_str(), RTLD_NOW | RTLD_GLOBAL);
          break;
        }
      }
    }
    // cuDNN 9 opens its engine sub-libraries by name from libcudnn_graph: load the
    // set that sits next to the dispatcher, so a system cuDNN never mixes in.
    FoundLib cudnn{"libcudnn.so.", ""};
    dl_iterate_phdr(find_loaded, &cudnn);
    if (!cudnn.path.empty()) {
      glob_t g{};
      if (glob((dir_of(cudnn.path) + "/libcudnn_*.so.*[0-9]").c_str(), 0, nullptr, &g) == 0) {
        for (size_t i = 0; i < g.gl_pathc; i++) dlopen(g.gl_pathv[i], RTLD_NOW | RTLD_GLOBAL);
      }
      globfree(&g);
    }
  });
}

void set_err(char *err, size_t errlen, const std::string &msg) {
  if (err == nullptr || errlen == 0) return;
  size_t n = msg.size() < errlen - 1 ? msg.size() : errlen - 1;
  std::memcpy(err, msg.data(), n);
  err[n] = '\0';
}

// Runs fn; returns 0, or -1 with the exception's message in err.
template <typename F>
int guard(char *err, size_t errlen, F &&fn) {
  try {
    fn();
    return 0;
  } catch (const c10::Error &e) {
    set_err(err, errlen, e.what_without_backtrace());
  } catch (const std::exception &e) {
    set_err(err, errlen, e.what());
  } catch (...) {
    set_err(err, errlen, "unknown C++ exception in libtorch");
  }
  return -1;
}

at::ScalarType to_scalar(int32_t dtype) {
  switch (dtype) {
    case FWT_FLOAT32: return at::kFloat;
    case FWT_FLOAT64: return at::kDouble;
    case FWT_FLOAT16: return at::kHalf;
    case FWT_INT64: return at::kLong;
    case FWT_INT32: return at::kInt;
    case FWT_INT8: return at::kChar;
    case FWT_UINT8: return at::kByte;
    case FWT_BOOL: return at::kBool;
  }
  throw std::runtime_error("unsupported input dtype code " + std::to_string(dtype));
}

int32_t from_scalar(at::ScalarType t) {
  switch (t) {
    case at::kFloat: return FWT_FLOAT32;
    case at::kDouble: return FWT_FLOAT64;
    case at::kHalf: return FWT_FLOAT16;
    case at::kLong: return FWT_INT64;
    case at::kInt: return FWT_INT32;
    case at::kChar: return FWT_INT8;
    case at::kByte: return FWT_UINT8;
    case at::kBool: return FWT_BOOL;
    default: break;
  }
  throw std::runtime_error(std::string("unsupported output dtype ") + c10::toString(t));
}

void json_escape(std::ostringstream &o, const std::string &s) {
  o << '"';
  for (char c : s) {
    if (c == '"' || c == '\\') o << '\\' << c;
    else if (static_cast<unsigned char>(c) < 0x20) o << ' ';
    else o << c;
  }
  o << '"';
}

void collect(const c10::IValue &v, std::vector<at::Tensor> &outs) {
  if (v.isTensor()) {
    outs.push_back(v.toTensor());
  } else if (v.isTuple()) {
    for (const auto &e : v.toTupleRef().elements()) collect(e, outs);
  } else if (v.isList()) {
    for (const auto &e : v.toListRef()) collect(e, outs);
  } else {
    throw std::runtime_error("forward returned " + v.tagKind() +
                             "; fw serves models that return a tensor or a tuple/list of tensors");
  }
}

// ---- AOTInductor packages

using Strings = std::unordered_map<std::string, std::string>;

std::string get(const Strings &m, const std::string &key) {
  auto it = m.find(key);
  return it == m.end() ? std::string() : it->second;
}

std::vector<std::string> words(const std::string &s) {
  std::vector<std::string> out;
  std::istringstream in(s);
  for (std::string w; in >> w;) out.push_back(w);
  return out;
}

std::string lower(std::string s) {
  for (auto &c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

std::string join(const std::vector<std::string> &v) {
  std::string out;
  for (const auto &w : v) out += (out.empty() ? "" : ", ") + w;
  return out;
}

// The machine name as Python's platform.machine() spells it on Linux.
std::string this_machine() {
  struct utsname u;
  if (uname(&u) != 0) return "";
  std::string m = u.machine;
  if (m == "arm64") m = "aarch64";
  if (m == "AMD64") m = "x86_64";
  return m;
}

// The CPU features torch sees here (torch.cpu.get_capabilities()): name -> present.
std::unordered_map<std::string, bool> cpu_features() {
  std::unordered_map<std::string, bool> out;
  for (const auto &kv : at::cpu::get_cpu_capabilities()) {
    if (kv.second.isBool()) out[kv.first] = kv.second.toBool();
  }
  return out;
}

// The torch CPU features each of Inductor's vector ISA names (AOTI_CPU_ISA, see
// torch/_inductor/cpu_vec_isa.py) needs; an empty list is checked by the machine alone.
const std::unordered_map<std::string, std::vector<std::string>> &isa_features() {
  static const std::unordered_map<std::string, std::vector<std::string>> m = {
      {"avx2", {"avx2"}},
      {"avx512", {"avx512_f", "avx512_dq", "avx512_vl", "avx512_bw"}},
      {"avx512_vnni", {"avx512_vnni"}},
      {"amx_tile", {"amx_tile"}},
      {"neon", {}},
      {"sve128", {"sve"}},
      {"sve256", {"sve"}},
      {"vsx", {}},
      {"zvector", {}},
      {"invalid_vec_isa", {}},
  };
  return m;
}

// Refuses a package this process cannot run: compiled for another device, OS or
// machine, or needing CPU instructions this CPU lacks (which would crash with
// SIGILL instead of failing).
void check_package(const Strings &meta, const c10::Device &dev) {
  std::string key = get(meta, "AOTI_DEVICE_KEY");
  if (key.empty()) throw std::runtime_error("the package's metadata names no device (AOTI_DEVICE_KEY): not an AOTInductor package, or a damaged one");
  std::string want = dev.is_cuda() ? "cuda" : "cpu";
  if (key != want) {
    throw std::runtime_error("the package was compiled for " + key + " but is being loaded on " + dev.str() +
                             ": an AOTInductor package runs only on the device it was compiled for; load it with --device " + key +
                             " (on a machine that has one), or export it again with fw.export.aoti(..., device='" + want + "')");
  }
  std::string platform = get(meta, "AOTI_PLATFORM");
  if (!platform.empty() && platform != "linux") {
    throw std::runtime_error("the package was compiled for platform " + platform + ", this is linux: export it again on linux");
  }
  std::string machine = get(meta, "AOTI_MACHINE"), here = this_machine();
  if (!machine.empty() && machine != here) {
    throw std::runtime_error("the package was compiled for a " + machine + " CPU, this machine is " + here + ": export it again on a " + here + " machine");
  }
  if (!dev.is_cpu()) return;
  auto have = cpu_features();
  auto has = [&](const std::string &f) { auto it = have.find(f); return it != have.end() && it->second; };
  std::vector<std::string> missing;
  for (const auto &isa : words(lower(get(meta, "AOTI_CPU_ISA")))) {
    auto it = isa_features().find(isa);
    if (it == isa_features().end()) {
      throw std::runtime_error("the package was compiled for the CPU instruction set " + isa +
                               ", which this fw does not know how to check: export it again on this kind of machine");
    }
    for (const auto &f : it->second) {
      if (!has(f)) missing.push_back(f);
    }
  }
  for (const auto &f : words(get(meta, "fw.cpu_flags"))) {
    if (!has(f)) missing.push_back(f);
  }
  if (!missing.empty()) {
    throw std::runtime_error("the package was compiled (AOTI_CPU_ISA " + get(meta, "AOTI_CPU_ISA") +
                             ", -march=native) for a CPU with " + join(missing) +
                             ", which this CPU lacks; its code would stop the process with an illegal instruction. Export it again on "
                             "this kind of machine, or for a portable instruction set: fw.export.aoti(..., inductor_configs={\"cpp.march\": "
                             "\"x86-64-v3\", \"cpp.simdlen\": 256})");
  }
}

// Refuses a package without a compiled library: AOTIModelPackageLoader would
// compile its C++ sources with a command line read from the package itself.
void check_compiled(const std::string &path) {
  caffe2::serialize::PyTorchStreamReader reader(path);
  for (const auto &name : reader.getAllRecords()) {
    if (name.rfind("data/aotinductor/model/", 0) == 0 && name.size() > 3 && name.compare(name.size() - 3, 3, ".so") == 0) return;
  }
  throw std::runtime_error(
      "the package holds no compiled library for model 'model' (data/aotinductor/model/*.so): a sources-only package would "
      "make libtorch run a compiler command taken from the file, which fw refuses; export it with fw.export.aoti");
}

}  // namespace

extern "C" {

int fwt_abi_version(void) { return FWT_ABI_VERSION; }

const char *fwt_torch_version(void) { return TORCH_VERSION; }

int fwt_cuda_available(void) {
  try {
    preload_cuda_libraries();
    return torch::cuda::is_available() ? 1 : 0;
  } catch (...) {
    return 0;
  }
}

fwt_module *fwt_load(const char *path, const char *device, char *err, size_t errlen) {
  fwt_module *out = nullptr;
  guard(err, errlen, [&] {
    c10::Device dev(device == nullptr || *device == '\0' ? "cpu" : device);
    if (dev.is_cuda()) preload_cuda_libraries();
    if (dev.is_cuda() && !torch::cuda::is_available()) {
      throw std::runtime_error(
          "device cuda requested but libtorch sees no CUDA device (driver missing, or no GPU); use --device cpu");
    }
    auto m = torch::jit::load(path, dev);
    m.eval();
    out = new fwt_module{dev, std::move(m), nullptr};
  });
  return out;
}

fwt_module *fwt_load_package(const char *path, const char *device, char *err, size_t errlen) {
  fwt_module *out = nullptr;
  guard(err, errlen, [&] {
    c10::Device dev(device == nullptr || *device == '\0' ? "cpu" : device);
    if (!dev.is_cpu() && !dev.is_cuda()) throw std::runtime_error("device " + dev.str() + ": fw runs AOTInductor packages on cpu or cuda");
    if (dev.is_cuda()) preload_cuda_libraries();
    if (dev.is_cuda() && !torch::cuda::is_available()) {
      throw std::runtime_error(
          "device cuda requested but libtorch sees no CUDA device (driver missing, or no GPU); use --device cpu with a package compiled for cpu");
    }
    std::string p(path);
    check_compiled(p);
    check_package(torch::inductor::AOTIModelPackageLoader::load_metadata_from_package(p, "model"), dev);
    // The package's generated code checks each input's dtype, shape and strides
    // only when this is set (read once per package library, on its first run).
    static std::once_flag env_once;
    std::call_once(env_once, [] { setenv("AOTI_RUNTIME_CHECK_INPUTS", "1", 0); });
    auto loader = std::make_unique<torch::inductor::AOTIModelPackageLoader>(
        p, "model", /*run_single_threaded=*/false, /*num_runners=*/1,
        dev.is_cuda() ? static_cast<c10::DeviceIndex>(dev.has_index() ? dev.index() : 0) : static_cast<c10::DeviceIndex>(-1));
    out = new fwt_module{dev, std::nullopt, std::move(loader)};
  });
  return out;
}

int fwt_describe(fwt_module *m, char **json, char *err, size_t errlen) {
  return guard(err, errlen, [&] {
    if (m->package) {
      auto spec = m->package->get_call_spec();
      std::ostringstream o;
      o << "{\"inputs\":[],\"outputs\":[],\"call_spec\":[";
      for (size_t i = 0; i < spec.size(); i++) {
        if (i > 0) o << ',';
        json_escape(o, spec[i]);
      }
      o << "]}";
      std::string s = o.str();
      char *buf = static_cast<char *>(std::malloc(s.size() + 1));
      if (buf == nullptr) throw std::bad_alloc();
      std::memcpy(buf, s.c_str(), s.size() + 1);
      *json = buf;
      return;
    }
    const auto &schema = m->module->get_method("forward").function().getSchema();
    std::ostringstream o;
    o << "{\"inputs\":[";
    bool first = true;
    for (const auto &a : schema.arguments()) {
      if (a.name() == "self") continue;
      if (!first) o << ',';
      first = false;
      o << "{\"name\":";
      json_escape(o, a.name());
      o << ",\"type\":";
      json_escape(o, a.type()->str());
      o << '}';
    }
    o << "],\"outputs\":[";
    first = true;
    for (const auto &r : schema.returns()) {
      if (!first) o << ',';
      first = false;
      o << "{\"type\":";
      json_escape(o, r.type()->str());
      o << '}';
    }
    o << "]}";
    std::string s = o.str();
    char *buf = static_cast<char *>(std::malloc(s.size() + 1));
    if (buf == nullptr) throw std::bad_alloc();
    std::memcpy(buf, s.c_str(), s.size() + 1);
    *json = buf;
  });
}

int fwt_set_threads(int n, char *err, size_t errlen) {
  return guard(err, errlen, [&] {
    if (n < 1) throw std::runtime_error("thread count must be at least 1");
    at::set_num_threads(n);
  });
}

int fwt_forward(fwt_module *m, const fwt_tensor *in, int nin, fwt_tensor **out, int *nout,
                char *err, size_t errlen) {
  *out = nullptr;
  *nout = 0;
  return guard(err, errlen, [&] {
    c10::InferenceMode guard_mode;
    std::vector<at::Tensor> args;
    args.reserve(nin);
    for (int i = 0; i < nin; i++) {
      const fwt_tensor &t = in[i];
      if (t.ndim < 0 || t.ndim > FWT_MAX_DIMS) throw std::runtime_error("bad rank");
      std::vector<int64_t> shape(t.shape, t.shape + t.ndim);
      auto x = torch::from_blob(t.data, shape, torch::TensorOptions().dtype(to_scalar(t.dtype)));
      args.push_back(m->device.is_cpu() ? x : x.to(m->device));
    }
    std::vector<at::Tensor> outs;
    if (m->package) {
      // Inductor's CPU kernels open OpenMP regions with the calling thread's
      // thread count: give this thread the count set with fwt_set_threads.
      at::init_num_threads();
      outs = m->package->run(args);
    } else {
      std::vector<c10::IValue> ivalues(args.begin(), args.end());
      collect(m->module->forward(ivalues), outs);
    }
    auto *arr = static_cast<fwt_tensor *>(std::calloc(outs.size() == 0 ? 1 : outs.size(), sizeof(fwt_tensor)));
    if (arr == nullptr) throw std::bad_alloc();
    size_t made = 0;
    try {
      for (auto &o : outs) {
        at::Tensor c = o.to(at::kCPU).contiguous();
        if (c.is_quantized()) c = c.dequantize();
        if (c.dim() > FWT_MAX_DIMS) throw std::runtime_error("output rank above 8");
        fwt_tensor &r = arr[made];
        r.dtype = from_scalar(c.scalar_type());
        r.ndim = static_cast<int32_t>(c.dim());
        for (int64_t d = 0; d < c.dim(); d++) r.shape[d] = c.size(d);
        r.nbytes = c.numel() * c.element_size();
        auto *holder = new at::Tensor(std::move(c));
        r.data = holder->data_ptr();
        r.handle = holder;
        made++;
      }
    } catch (...) {
      fwt_free_tensors(arr, static_cast<int>(made));
      throw;
    }
    *out = arr;
    *nout = static_cast<int>(made);
  });
}

void fwt_free_tensors(fwt_tensor *t, int n) {
  if (t == nullptr) return;
  for (int i = 0; i < n; i++) delete static_cast<at::Tensor *>(t[i].handle);
  std::free(t);
}

void fwt_free_string(char *s) { std::free(s); }

void fwt_free(fwt_module *m) {
  try {
    delete m;
  } catch (...) {
  }
}

}  // extern "C"
