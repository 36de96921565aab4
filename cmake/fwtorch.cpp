// fwtorch.cpp: libtorch behind the plain C ABI declared in fwtorch.h.
// Every entry point is wrapped in guard(), which turns any C++ exception into
// an error string: nothing throws across the ABI.
#include "fwtorch.h"

#include <ATen/Parallel.h>
#include <torch/cuda.h>
#include <torch/script.h>
#include <torch/version.h>

#include <cstdlib>
#include <cstring>
#include <sstream>
#include <string>
#include <vector>

struct fwt_module {
  torch::jit::Module module;
  c10::Device device;
};

namespace {

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

}  // namespace

extern "C" {

int fwt_abi_version(void) { return FWT_ABI_VERSION; }

const char *fwt_torch_version(void) { return TORCH_VERSION; }

int fwt_cuda_available(void) {
  try {
    return torch::cuda::is_available() ? 1 : 0;
  } catch (...) {
    return 0;
  }
}

fwt_module *fwt_load(const char *path, const char *device, char *err, size_t errlen) {
  fwt_module *out = nullptr;
  guard(err, errlen, [&] {
    c10::Device dev(device == nullptr || *device == '\0' ? "cpu" : device);
    if (dev.is_cuda() && !torch::cuda::is_available()) {
      throw std::runtime_error(
          "device cuda requested but libtorch sees no CUDA device (driver missing, or no GPU); use --device cpu");
    }
    auto m = torch::jit::load(path, dev);
    m.eval();
    out = new fwt_module{std::move(m), dev};
  });
  return out;
}

int fwt_describe(fwt_module *m, char **json, char *err, size_t errlen) {
  return guard(err, errlen, [&] {
    const auto &schema = m->module.get_method("forward").function().getSchema();
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
    std::vector<c10::IValue> args;
    args.reserve(nin);
    for (int i = 0; i < nin; i++) {
      const fwt_tensor &t = in[i];
      if (t.ndim < 0 || t.ndim > FWT_MAX_DIMS) throw std::runtime_error("bad rank");
      std::vector<int64_t> shape(t.shape, t.shape + t.ndim);
      auto x = torch::from_blob(t.data, shape, torch::TensorOptions().dtype(to_scalar(t.dtype)));
      args.emplace_back(m->device.is_cpu() ? x : x.to(m->device));
    }
    c10::IValue result = m->module.forward(args);
    std::vector<at::Tensor> outs;
    collect(result, outs);
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
