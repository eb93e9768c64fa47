// gdn_host.h: the host side of a packed gdn solution (CUDA runtime API + tvm-ffi; no device code).
// The kernels are gdn's CUBINs for sm_90a, embedded by `gdn pack` (gdn_cubin.cpp, base64) and loaded once per device
// with cudaLibraryLoadData; each call launches them with cudaLaunchKernelEx on the caller's stream
// (TVMFFIEnvGetStream), the launches after a call's first with programmatic dependent launch, as gdn does.
// A device that is not compute capability 9.0 is refused with an error, before anything is loaded.
// After a device's first call the host path allocates nothing (a prefill workspace grows only when a call needs
// more than any before it), never synchronises and never reads device memory.
#pragma once
#include <cuda_runtime.h>
#include <tvm/ffi/container/tensor.h>
#include <tvm/ffi/error.h>
#include <tvm/ffi/extra/c_env_api.h>

#include <atomic>
#include <cmath>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "gdn_plan.h"

// One process may load several solutions (flashinfer-bench's persistent worker loads every solution it evaluates
// on a device into one process). Each must keep its own kernels, so nothing of this host code is exported from the
// solution's library but the entry point: the two arrays of gdn_cubin.cpp have hidden visibility, everything else
// lies in an unnamed namespace. (Exported, the per-device kernel table -- a static of an inline function, which GCC
// makes an STB_GNU_UNIQUE symbol, bound process-wide even under RTLD_LOCAL -- would be one object for all the
// solutions: the first solution called would fill it, the others would launch its kernels.)
#define GDN_PACK_HIDDEN __attribute__((visibility("hidden")))

// gdn_cubin.cpp: every module's CUBIN as base64, and its length in bytes.
extern "C" GDN_PACK_HIDDEN const char* const gdn_pack_module_base64[];
extern "C" GDN_PACK_HIDDEN const unsigned long long gdn_pack_module_bytes[];

namespace gdn_pack {
namespace {  // internal linkage: see above

using tvm::ffi::TensorView;

struct DeviceKernels {
  std::atomic<bool> ready{false};
  cudaLibrary_t libs[kNumModules];
  cudaKernel_t kernels[kNumKernels];
  uint64_t sms = 0;
  void* workspace = nullptr;
  uint64_t workspace_bytes = 0;
};

constexpr int kMaxDevices = 64;
inline std::mutex& init_mutex() {
  static std::mutex m;
  return m;
}
inline DeviceKernels* devices() {
  static DeviceKernels d[kMaxDevices];
  return d;
}

inline void check(cudaError_t e, const std::string& what) {
  if (e != cudaSuccess) {
    TVM_FFI_THROW(RuntimeError) << "gdn: " << what << ": " << cudaGetErrorName(e) << " (" << cudaGetErrorString(e)
                                << ")";
  }
}

inline int base64_value(char c) {
  if (c >= 'A' && c <= 'Z') return c - 'A';
  if (c >= 'a' && c <= 'z') return c - 'a' + 26;
  if (c >= '0' && c <= '9') return c - '0' + 52;
  if (c == '+') return 62;
  if (c == '/') return 63;
  return -1;
}

inline std::vector<unsigned char> base64_decode(const char* s, unsigned long long n) {
  std::vector<unsigned char> out;
  out.reserve(n);
  uint32_t acc = 0;
  int bits = 0;
  for (; *s != '\0'; ++s) {
    int v = base64_value(*s);
    if (v < 0) continue;  // '=' padding
    acc = (acc << 6) | static_cast<uint32_t>(v);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out.push_back(static_cast<unsigned char>((acc >> bits) & 0xff));
    }
  }
  if (out.size() != n) TVM_FFI_THROW(RuntimeError) << "gdn: an embedded CUBIN is damaged (" << out.size() << " of " << n << " bytes)";
  return out;
}

// The kernels of `device`, loaded on its first call (compute capability checked first).
inline DeviceKernels& device_kernels(int device) {
  if (device < 0 || device >= kMaxDevices) TVM_FFI_THROW(ValueError) << "gdn: CUDA device " << device << " out of range";
  DeviceKernels& d = devices()[device];
  if (d.ready.load(std::memory_order_acquire)) return d;
  std::lock_guard<std::mutex> lock(init_mutex());
  if (d.ready.load(std::memory_order_relaxed)) return d;
  int major = 0, minor = 0, sms = 0;
  check(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device), "compute capability");
  check(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device), "compute capability");
  if (major != kCcMajor || minor != kCcMinor) {
    cudaDeviceProp prop;
    std::string name = cudaGetDeviceProperties(&prop, device) == cudaSuccess ? prop.name : "unknown";
    TVM_FFI_THROW(RuntimeError) << "gdn: this solution's kernels are built for compute capability " << kCcMajor << "."
                                << kCcMinor << " (Hopper, " << kArch << ") only; CUDA device " << device << " ("
                                << name << ") is " << major << "." << minor;
  }
  check(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device), "SM count");
  for (int m = 0; m < kNumModules; ++m) {
    std::vector<unsigned char> cubin = base64_decode(gdn_pack_module_base64[m], gdn_pack_module_bytes[m]);
    check(cudaLibraryLoadData(&d.libs[m], cubin.data(), nullptr, nullptr, 0, nullptr, nullptr, 0),
          std::string("loading module ") + kModuleNames[m]);
  }
  for (int i = 0; i < kNumKernels; ++i) {
    const Kernel& k = kKernels[i];
    check(cudaLibraryGetKernel(&d.kernels[i], d.libs[k.module], k.name), std::string("kernel ") + k.name);
    const void* fn = reinterpret_cast<const void*>(d.kernels[i]);
    if (k.dyn_smem > 48 * 1024) {
      check(cudaFuncSetAttribute(fn, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(k.dyn_smem)),
            std::string("raising the dynamic shared memory of ") + k.name);
    }
    cudaFuncAttributes attr;
    check(cudaFuncGetAttributes(&attr, fn), std::string("attributes of ") + k.name);
    if (static_cast<uint32_t>(attr.maxThreadsPerBlock) < k.block) {
      TVM_FFI_THROW(RuntimeError) << "gdn: " << k.name << " takes at most " << attr.maxThreadsPerBlock
                                  << " threads per block; its launch needs " << k.block;
    }
  }
  d.sms = static_cast<uint64_t>(sms);
  d.ready.store(true, std::memory_order_release);
  return d;
}

// A workspace of at least `bytes` on the device (grown, never shrunk; the old one is freed after the stream's
// earlier work: cudaFree waits for the device).
inline uint64_t workspace(DeviceKernels& d, uint64_t bytes) {
  if (bytes == 0) return 0;
  std::lock_guard<std::mutex> lock(init_mutex());
  if (d.workspace_bytes < bytes) {
    if (d.workspace != nullptr) check(cudaFree(d.workspace), "freeing the workspace");
    d.workspace = nullptr;
    d.workspace_bytes = 0;
    check(cudaMalloc(&d.workspace, bytes), "allocating a " + std::to_string(bytes) + "-byte workspace");
    d.workspace_bytes = bytes;
  }
  return reinterpret_cast<uint64_t>(d.workspace);
}

// One launch of kernel `ki` with its params struct passed by value (`params`).
inline void launch(DeviceKernels& d, int ki, Grid g, void* params, cudaStream_t stream, bool pdl) {
  const Kernel& k = kKernels[ki];
  if (g.x == 0 || g.y == 0 || g.z == 0) return;
  if (g.x > 0x7fffffffull || g.y > 65535 || g.z > 65535) {
    TVM_FFI_THROW(ValueError) << "gdn: " << k.name << " grid (" << g.x << ", " << g.y << ", " << g.z
                              << ") exceeds the hardware's limits (too many tokens or sequences for one call)";
  }
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(static_cast<unsigned>(g.x), static_cast<unsigned>(g.y), static_cast<unsigned>(g.z));
  cfg.blockDim = dim3(k.block, 1, 1);
  cfg.dynamicSmemBytes = k.dyn_smem;
  cfg.stream = stream;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  cfg.attrs = pdl ? attr : nullptr;
  cfg.numAttrs = pdl ? 1 : 0;
  void* args[1] = {params};
  cudaError_t e = cudaLaunchKernelExC(&cfg, reinterpret_cast<const void*>(d.kernels[ki]), args);
  if (e != cudaSuccess) {
    check(e, std::string("launching ") + k.name + " grid (" + std::to_string(g.x) + ", " + std::to_string(g.y) + ", " +
                 std::to_string(g.z) + ")");
  }
}

// ---- argument checks: dtype, shape, contiguity, device, alignment
inline const char* dtype_name(int code, int bits) {
  if (code == kDLBfloat && bits == 16) return "bfloat16";
  if (code == kDLFloat && bits == 32) return "float32";
  if (code == kDLInt && bits == 32) return "int32";
  if (code == kDLInt && bits == 64) return "int64";
  return "another dtype";
}

inline uint64_t ptr_of(const TensorView& t) {
  return reinterpret_cast<uint64_t>(static_cast<char*>(t.data_ptr()) + t.byte_offset());
}

// Checks tensor `name`: dtype (code, bits), shape `dims` (ndim of them), row-major contiguous, on CUDA device
// `device` (the first tensor's, when -1: returned), 16-byte aligned.
inline int expect(const TensorView& t, const char* name, int code, int bits, const int64_t* dims, int ndim, int device) {
  DLDataType dt = t.dtype();
  if (dt.code != code || dt.bits != bits || dt.lanes != 1) {
    TVM_FFI_THROW(TypeError) << "gdn: " << name << " must be " << dtype_name(code, bits) << ", got "
                             << dtype_name(dt.code, dt.bits);
  }
  bool shape_ok = t.ndim() == ndim;
  for (int i = 0; shape_ok && i < ndim; ++i) shape_ok = t.size(i) == dims[i];
  if (!shape_ok) {
    std::string want = "[", got = "[";
    for (int i = 0; i < ndim; ++i) want += (i ? ", " : "") + std::to_string(dims[i]);
    for (int i = 0; i < t.ndim(); ++i) got += (i ? ", " : "") + std::to_string(t.size(i));
    TVM_FFI_THROW(ValueError) << "gdn: " << name << " must have shape " << want << "], got " << got << "]";
  }
  if (!t.IsContiguous()) TVM_FFI_THROW(ValueError) << "gdn: " << name << " must be contiguous (row-major)";
  DLDevice dev = t.device();
  if (dev.device_type != kDLCUDA) TVM_FFI_THROW(ValueError) << "gdn: " << name << " must be a CUDA tensor";
  if (device >= 0 && dev.device_id != device) {
    TVM_FFI_THROW(ValueError) << "gdn: " << name << " is on CUDA device " << dev.device_id << ", the others on " << device;
  }
  if (ptr_of(t) % 16 != 0) TVM_FFI_THROW(ValueError) << "gdn: " << name << " must be 16-byte aligned";
  return dev.device_id;
}

// The scale the kernels take: `scale`, or 1/sqrt(head_size) when it is 0 (the definitions' rule).
inline float resolved_scale(double scale) {
  const float s = static_cast<float>(scale);
  if (!std::isfinite(s)) TVM_FFI_THROW(ValueError) << "gdn: scale must be finite, got " << scale;
  return s == 0.0f ? 1.0f / std::sqrt(static_cast<float>(kHeadSize)) : s;
}

// Makes `device` current for the call; restores the previous device when destroyed.
struct DeviceScope {
  int prev = -1, device;
  explicit DeviceScope(int dev) : device(dev) {
    check(cudaGetDevice(&prev), "cudaGetDevice");
    if (prev != device) check(cudaSetDevice(device), "cudaSetDevice");
  }
  ~DeviceScope() {
    if (prev >= 0 && prev != device) cudaSetDevice(prev);
  }
};

inline cudaStream_t stream_of(int device) {
  return static_cast<cudaStream_t>(TVMFFIEnvGetStream(kDLCUDA, device));
}

}  // namespace
}  // namespace gdn_pack
