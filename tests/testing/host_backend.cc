// HostBackend: runtime, elementwise, reductions, softmax, cross-entropy, layer norm, indexing,
// random fills and optimizer kernels. Pooling, batch norm, attention, GEMM and convolution are
// in host_backend_nn.cc.
#include "tests/testing/host_backend.h"

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>

#include "kernels/cpu/elementwise.h"
#include "kernels/cpu/indexing.h"
#include "kernels/cpu/norm.h"
#include "kernels/cpu/optim.h"
#include "kernels/cpu/random.h"
#include "kernels/cpu/reduce.h"
#include "kernels/cpu/softmax.h"
#include "tests/testing/host_backend_internal.h"

namespace trainyard::testing {

using namespace host_internal;  // NOLINT: H, F32, Gather, Scatter, DispatchAll
namespace cuda = kernels::cuda;

namespace {
bool IsDevice(const void* p) {
  return (reinterpret_cast<uintptr_t>(p) & HostBackend::kDeviceTag) != 0;
}
}  // namespace

void* HostBackend::Host(const void* p) {
  const auto u = reinterpret_cast<uintptr_t>(p);
  return reinterpret_cast<void*>(IsDevice(p) ? u - kDeviceTag : u);
}

HostBackend::HostBackend(HostBackendOptions options)
    : options_(options),
      allocated_(options.device_count, 0),
      stream_handles_(options.device_count > 0 ? options.device_count : 1) {}

HostBackend::~HostBackend() {
  // Blocks still allocated belong to allocators that outlive us only in broken tests.
  for (auto& [p, info] : blocks_) std::free(p);
  for (std::vector<char>* s : extra_streams_) delete s;
}

int64_t HostBackend::launches(const std::string& kernel) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = launches_.find(kernel);
  return it == launches_.end() ? 0 : it->second;
}

int64_t HostBackend::kernel_launches() const {
  std::lock_guard<std::mutex> lock(mu_);
  int64_t n = 0;
  for (const auto& [name, count] : launches_) {
    if (name.rfind("Memcpy", 0) != 0 && name != "Sync") n += count;
  }
  return n;
}

size_t HostBackend::allocated_bytes(int device) const {
  std::lock_guard<std::mutex> lock(mu_);
  CheckDevice(device);
  return allocated_[device];
}

void HostBackend::Count(const char* kernel) {
  std::lock_guard<std::mutex> lock(mu_);
  ++launches_[kernel];
}

void HostBackend::CheckDevice(int device) const {
  TY_CHECK(device >= 0 && device < options_.device_count)
      << "host backend: cuda:" << device << " is not one of " << options_.device_count
      << " devices";
}

namespace {
// The calling thread's current device (SetDevice), 0 until set, as CUDA's.
thread_local int t_current_device = 0;
}  // namespace

void HostBackend::CheckStream(Stream stream) const {
  TY_CHECK(stream != nullptr);
  // The library picks its cuBLASLt and cuDNN handles, workspaces and scratch by the current
  // device, so a kernel on a device's compute stream must come with that device current.
  const auto* p = static_cast<const char*>(stream);
  if (p >= stream_handles_.data() && p < stream_handles_.data() + stream_handles_.size()) {
    const int device = static_cast<int>(p - stream_handles_.data());
    TY_CHECK(device == t_current_device)
        << "a kernel on cuda:" << device << "'s compute stream from a thread whose current "
        << "device is cuda:" << t_current_device;
  }
}

// ---- Runtime ----

Status HostBackend::Properties(int device, cuda::DeviceProperties* out) {
  CheckDevice(device);
  out->name = "host backend (fake cuda)";
  out->major = 9;
  out->total_memory = static_cast<int64_t>(std::min<size_t>(options_.memory_limit, INT64_MAX));
  out->multiprocessors = 1;
  return OkStatus();
}

Status HostBackend::SetDevice(int device) {
  CheckDevice(device);
  t_current_device = device;
  return OkStatus();
}

Status HostBackend::Malloc(int device, size_t nbytes, void** out) {
  std::lock_guard<std::mutex> lock(mu_);
  CheckDevice(device);
  if (nbytes > options_.memory_limit - allocated_[device]) {
    return ResourceExhaustedError("host backend: cuda:" + std::to_string(device) + " cannot fit " +
                                  std::to_string(nbytes) + " more bytes (" +
                                  std::to_string(allocated_[device]) + " of " +
                                  std::to_string(options_.memory_limit) + " in use)");
  }
  void* p = std::aligned_alloc(256, (nbytes + 255) / 256 * 256);
  TY_CHECK(p != nullptr) << "host backend: out of host memory for " << nbytes << " bytes";
  TY_CHECK((reinterpret_cast<uintptr_t>(p) & kDeviceTag) == 0) << "host address uses the tag";
  blocks_[p] = {device, nbytes};
  allocated_[device] += nbytes;
  *out = static_cast<char*>(p) + kDeviceTag;
  return OkStatus();
}

void HostBackend::Free(int device, void* ptr) {
  if (ptr == nullptr) return;
  std::lock_guard<std::mutex> lock(mu_);
  TY_CHECK((reinterpret_cast<uintptr_t>(ptr) & kDeviceTag) != 0)
      << "host backend: Free of a host pointer";
  void* p = Host(ptr);
  auto it = blocks_.find(p);
  TY_CHECK(it != blocks_.end() && it->second.first == device)
      << "host backend: Free of a pointer cuda:" << device << " never returned";
  allocated_[device] -= it->second.second;
  blocks_.erase(it);
  std::free(p);
}

Status HostBackend::HostMalloc(size_t nbytes, void** out) {
  *out = std::malloc(nbytes == 0 ? 1 : nbytes);
  return OkStatus();
}

void HostBackend::HostFree(void* ptr) { std::free(ptr); }

HostBackend::Stream HostBackend::ComputeStream(int device) {
  CheckDevice(device);
  return &stream_handles_[device];
}

HostBackend::Stream HostBackend::CreateStream(int device) {
  CheckDevice(device);
  std::lock_guard<std::mutex> lock(mu_);
  extra_streams_.push_back(new std::vector<char>(1));
  return extra_streams_.back()->data();
}

void HostBackend::Memcpy(void* dst, const void* src, size_t nbytes, Stream stream) {
  CheckStream(stream);
  Count("Memcpy");
  // A copy from device memory into host memory: where the host waits for the device.
  if (IsDevice(src) && !IsDevice(dst)) Count("Memcpy.to_host");
  if (nbytes > 0) std::memcpy(H(dst), H(src), nbytes);
}

namespace {
struct HostEvent {
  bool timing = false;
  std::chrono::steady_clock::time_point recorded{};
};
}  // namespace

HostBackend::Event HostBackend::CreateEvent(int device) {
  CheckDevice(device);
  return new HostEvent();
}

HostBackend::Event HostBackend::CreateTimingEvent(int device) {
  CheckDevice(device);
  return new HostEvent{true};
}

void HostBackend::RecordEvent(Event event, Stream stream) {
  CheckStream(stream);
  static_cast<HostEvent*>(event)->recorded = std::chrono::steady_clock::now();
}

double HostBackend::EventSeconds(Event start, Event end) {
  const auto* a = static_cast<const HostEvent*>(start);
  const auto* b = static_cast<const HostEvent*>(end);
  TY_CHECK(a->timing && b->timing) << "EventSeconds: not timing events";
  TY_CHECK(a->recorded != std::chrono::steady_clock::time_point{} &&
           b->recorded != std::chrono::steady_clock::time_point{})
      << "EventSeconds: an event was never recorded";
  return std::chrono::duration<double>(b->recorded - a->recorded).count();
}

void HostBackend::DestroyEvent(Event event) { delete static_cast<HostEvent*>(event); }

// ---- Elementwise ----

void HostBackend::Copy(const StridedIter& it, ScalarType dst_type, void* dst, ScalarType src_type,
                       const void* src, Stream stream) {
  CheckStream(stream);
  Count("Copy");
  DispatchAll(dst_type, [&](auto dtag) {
    using D = typename decltype(dtag)::type;
    DispatchAll(src_type, [&](auto stag) {
      using S = typename decltype(stag)::type;
      kc::CopyCast(it, H(static_cast<D*>(dst)), H(static_cast<const S*>(src)));
    });
  });
}

void HostBackend::Fill(ScalarType type, int64_t n, void* out, double value, Stream stream) {
  CheckStream(stream);
  Count("Fill");
  DispatchAll(type, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T v = kc::Cast<T>(value);
    T* p = H(static_cast<T*>(out));
    for (int64_t i = 0; i < n; ++i) p[i] = v;
  });
}

void HostBackend::Unary(UnaryOp op, ScalarType type, const StridedIter& it, void* out,
                        const void* x, double alpha, double beta, Stream stream) {
  CheckStream(stream);
  CheckFloat(type, "Unary");
  Count("Unary");
  const auto a = static_cast<float>(alpha), b = static_cast<float>(beta);
  if (type == ScalarType::kF32) {
    return kc::Unary<float>(op, it, H(static_cast<float*>(out)), H(static_cast<const float*>(x)), a,
                            b);
  }
  std::vector<float> xs = Gather<float>(type, it, 1, H(x)), ys(xs.size());
  kc::Unary<float>(op, FlatIter(it.numel(), 2), ys.data(), xs.data(), a, b);
  Scatter(type, it, 0, ys, H(out));
}

void HostBackend::UnaryBackward(UnaryOp op, ScalarType type, int64_t n, const void* x,
                                const void* y, const void* g, void* gx, double alpha, double beta,
                                Stream stream) {
  CheckStream(stream);
  CheckFloat(type, "UnaryBackward");
  Count("UnaryBackward");
  F32 xs(type, H(x), n), ys(type, H(y), n), gs(type, H(g), n), gxs(type, H(gx), n, false);
  kc::UnaryBackward<float>(op, n, xs.data(), ys.data(), gs.data(), gxs.data(),
                           static_cast<float>(alpha), static_cast<float>(beta));
  gxs.Store();
}

void HostBackend::Binary(BinaryOp op, ScalarType type, const StridedIter& it, void* out,
                         const void* x, const void* y, double alpha, Stream stream) {
  CheckStream(stream);
  CheckFloat(type, "Binary");
  Count("Binary");
  const auto a = static_cast<float>(alpha);
  if (type == ScalarType::kF32) {
    return kc::Binary<float>(op, it, H(static_cast<float*>(out)), H(static_cast<const float*>(x)),
                             H(static_cast<const float*>(y)), a);
  }
  std::vector<float> xs = Gather<float>(type, it, 1, H(x));
  std::vector<float> ys = Gather<float>(type, it, 2, H(y)), zs(xs.size());
  kc::Binary<float>(op, FlatIter(it.numel(), 3), zs.data(), xs.data(), ys.data(), a);
  Scatter(type, it, 0, zs, H(out));
}

void HostBackend::BinaryMixed(BinaryOp op, ScalarType x_type, ScalarType y_type,
                              const StridedIter& it, float* out, const void* x, const void* y,
                              double alpha, Stream stream) {
  CheckStream(stream);
  CheckFloat(x_type, "BinaryMixed");
  CheckFloat(y_type, "BinaryMixed");
  TY_CHECK(x_type != y_type) << "BinaryMixed: both inputs have one type";
  Count("Binary");
  std::vector<float> xs = Gather<float>(x_type, it, 1, H(x));
  std::vector<float> ys = Gather<float>(y_type, it, 2, H(y)), zs(xs.size());
  kc::Binary<float>(op, FlatIter(it.numel(), 3), zs.data(), xs.data(), ys.data(),
                    static_cast<float>(alpha));
  Scatter(ScalarType::kF32, it, 0, zs, H(out));
}

void HostBackend::Compare(CompareOp op, ScalarType type, const StridedIter& it, uint8_t* out,
                          const void* x, const void* y, Stream stream) {
  CheckStream(stream);
  Count("Compare");
  switch (type) {
    case ScalarType::kF32:
    case ScalarType::kF64:
    case ScalarType::kI64:
    case ScalarType::kI32:
      return DispatchAll(type, [&](auto tag) {
        using T = typename decltype(tag)::type;
        if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double> ||
                      std::is_same_v<T, int64_t> || std::is_same_v<T, int32_t>) {
          kc::Compare<T>(op, it, H(out), H(static_cast<const T*>(x)), H(static_cast<const T*>(y)));
        }
      });
    case ScalarType::kU8:
    case ScalarType::kBool:
      return kc::Compare<uint8_t>(op, it, H(out), H(static_cast<const uint8_t*>(x)),
                                  H(static_cast<const uint8_t*>(y)));
    default:
      break;
  }
  std::vector<float> xs = Gather<float>(type, it, 1, H(x)), ys = Gather<float>(type, it, 2, H(y));
  std::vector<uint8_t> zs(xs.size());
  kc::Compare<float>(op, FlatIter(it.numel(), 3), zs.data(), xs.data(), ys.data());
  Scatter(ScalarType::kU8, it, 0, zs, H(out));
}

void HostBackend::Where(ScalarType type, const StridedIter& it, void* out, const uint8_t* cond,
                        const void* x, const void* y, Stream stream) {
  CheckStream(stream);
  CheckFloat(type, "Where");
  Count("Where");
  if (type == ScalarType::kF32) {
    return kc::Where<float>(it, H(static_cast<float*>(out)), H(cond),
                            H(static_cast<const float*>(x)), H(static_cast<const float*>(y)));
  }
  std::vector<uint8_t> cs = Gather<uint8_t>(ScalarType::kU8, it, 1, H(cond));
  std::vector<float> xs = Gather<float>(type, it, 2, H(x)), ys = Gather<float>(type, it, 3, H(y));
  std::vector<float> zs(xs.size());
  kc::Where<float>(FlatIter(it.numel(), 4), zs.data(), cs.data(), xs.data(), ys.data());
  Scatter(type, it, 0, zs, H(out));
}

// ---- Reductions ----

void HostBackend::ReduceSum(ScalarType type, const void* x, void* out, int64_t outer, int64_t k,
                            int64_t inner, double scale, Stream stream) {
  CheckStream(stream);
  CheckFloat(type, "ReduceSum");
  Count("ReduceSum");
  F32 xs(type, H(x), outer * k * inner), os(type, H(out), outer * inner, false);
  kc::ReduceSum<float>(xs.data(), os.data(), outer, k, inner, static_cast<float>(scale));
  os.Store();
}

void HostBackend::ReduceMaxMin(bool is_max, ScalarType type, const void* x, void* out, int64_t* idx,
                               int64_t outer, int64_t k, int64_t inner, Stream stream) {
  CheckStream(stream);
  CheckFloat(type, "ReduceMaxMin");
  Count("ReduceMaxMin");
  F32 xs(type, H(x), outer * k * inner), os(type, H(out), outer * inner, false);
  kc::ReduceMaxMin<float>(is_max, xs.data(), os.data(), H(idx), outer, k, inner);
  os.Store();
}

void HostBackend::NormPow(ScalarType type, const void* x, int64_t n, double p, double* out,
                          Stream stream) {
  CheckStream(stream);
  CheckFloat(type, "NormPow");
  Count("NormPow");
  F32 xs(type, H(x), n);
  *H(out) = p == 0 ? kc::MaxAbs<float>(xs.data(), n) : kc::SumAbsPow<float>(xs.data(), n, p);
}

// ---- Softmax, cross-entropy, layer norm ----

void HostBackend::SoftmaxForward(ScalarType type, const void* x, void* y, int64_t rows, int64_t n,
                                 bool log, Stream stream) {
  CheckStream(stream);
  CheckFloat(type, "SoftmaxForward");
  Count("SoftmaxForward");
  F32 xs(type, H(x), rows * n), ys(type, H(y), rows * n, false);
  kc::SoftmaxForward<float>(xs.data(), ys.data(), rows, n, log);
  ys.Store();
}

void HostBackend::SoftmaxBackward(ScalarType type, const void* y, const void* gy, void* gx,
                                  int64_t rows, int64_t n, bool log, Stream stream) {
  CheckStream(stream);
  CheckFloat(type, "SoftmaxBackward");
  Count("SoftmaxBackward");
  F32 ys(type, H(y), rows * n), gys(type, H(gy), rows * n), gxs(type, H(gx), rows * n, false);
  kc::SoftmaxBackward<float>(ys.data(), gys.data(), gxs.data(), rows, n, log);
  gxs.Store();
}

namespace {

// Rows [0, rows) of c elements, ld apart, of `type` at p as f32 (rows, c), contiguous.
std::vector<float> GatherRows(ScalarType type, const void* p, int64_t ld, int64_t rows, int64_t c) {
  std::vector<float> out(rows * c);
  DispatchAll(type, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* base = static_cast<const T*>(p);
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t j = 0; j < c; ++j) out[r * c + j] = kc::Cast<float>(base[r * ld + j]);
  });
  return out;
}

}  // namespace

void HostBackend::CrossEntropyForward(ScalarType type, const void* logits, int64_t ld,
                                      const int64_t* target, float* loss, float* lse, int64_t rows,
                                      int64_t c, int64_t ignore_index, double smoothing,
                                      Stream stream) {
  CheckStream(stream);
  CheckFloat(type, "CrossEntropyForward");
  TY_CHECK(ld >= c) << "CrossEntropyForward: row stride " << ld << " below " << c << " classes";
  Count("CrossEntropyForward");
  const std::vector<float> xs = GatherRows(type, H(logits), ld, rows, c);
  kc::CrossEntropyForward<float>(xs.data(), H(target), H(loss), H(lse), rows, c, ignore_index,
                                 static_cast<float>(smoothing));
}

void HostBackend::CrossEntropyBackward(ScalarType type, const void* logits, int64_t ld,
                                       const int64_t* target, const float* lse, const float* gloss,
                                       void* grad, int64_t rows, int64_t c, int64_t ignore_index,
                                       double smoothing, Stream stream) {
  CheckStream(stream);
  CheckFloat(type, "CrossEntropyBackward");
  TY_CHECK(ld >= c) << "CrossEntropyBackward: row stride " << ld << " below " << c << " classes";
  Count("CrossEntropyBackward");
  const std::vector<float> xs = GatherRows(type, H(logits), ld, rows, c);
  std::vector<float> gs(rows * c);
  kc::CrossEntropyBackward<float>(xs.data(), H(target), H(lse), H(gloss), gs.data(), rows, c,
                                  ignore_index, static_cast<float>(smoothing));
  DispatchAll(type, [&](auto tag) {
    using T = typename decltype(tag)::type;
    T* base = static_cast<T*>(H(grad));
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t j = 0; j < c; ++j) base[r * ld + j] = kc::Cast<T>(gs[r * c + j]);
  });
}

void HostBackend::LayerNormForward(ScalarType type, ScalarType param_type, const void* x,
                                   const void* weight, const void* bias, void* y, float* mean,
                                   float* rstd, int64_t rows, int64_t n, double eps,
                                   Stream stream) {
  CheckStream(stream);
  CheckFloat(type, "LayerNormForward");
  CheckFloat(param_type, "LayerNormForward");
  Count("LayerNormForward");
  F32 xs(type, H(x), rows * n), ys(type, H(y), rows * n, false);
  F32 ws(param_type, H(weight), n), bs(param_type, H(bias), n);
  kc::LayerNormForward<float>(xs.data(), ws.data(), bs.data(), ys.data(), H(mean), H(rstd), rows, n,
                              static_cast<float>(eps));
  ys.Store();
}

void HostBackend::LayerNormBackward(ScalarType type, ScalarType param_type, const void* x,
                                    const void* gy, const float* mean, const float* rstd,
                                    const void* weight, void* gx, void* gweight, void* gbias,
                                    int64_t rows, int64_t n, Stream stream) {
  CheckStream(stream);
  CheckFloat(type, "LayerNormBackward");
  CheckFloat(param_type, "LayerNormBackward");
  Count("LayerNormBackward");
  F32 xs(type, H(x), rows * n), gys(type, H(gy), rows * n), gxs(type, H(gx), rows * n, false);
  F32 ws(param_type, H(weight), n), gws(param_type, H(gweight), n, false),
      gbs(param_type, H(gbias), n, false);
  kc::LayerNormBackward<float>(xs.data(), gys.data(), H(mean), H(rstd), ws.data(), gxs.data(),
                               gws.data(), gbs.data(), rows, n);
  gxs.Store();
  gws.Store();
  gbs.Store();
}

// ---- Indexing, random, optimizers ----

namespace {
// The largest index + 1: the rows an index array reaches.
int64_t RowsReached(const int64_t* index, int64_t n) {
  int64_t rows = 0;
  for (int64_t i = 0; i < n; ++i) rows = std::max(rows, index[i] + 1);
  return rows;
}
}  // namespace

void HostBackend::IndexRows(ScalarType type, const void* x, int64_t row, const int64_t* index,
                            int64_t n, void* out, Stream stream) {
  CheckStream(stream);
  CheckFloat(type, "IndexRows");
  Count("IndexRows");
  const int64_t* idx = H(index);
  const int64_t rows = RowsReached(idx, n);
  F32 xs(type, H(x), rows * row), os(type, H(out), n * row, false);
  kc::IndexRows<float>(xs.data(), row, idx, n, os.data());
  os.Store();
}

void HostBackend::IndexAddRows(ScalarType type, void* out, int64_t row, const int64_t* index,
                               int64_t n, const void* src, Stream stream) {
  CheckStream(stream);
  CheckFloat(type, "IndexAddRows");
  TY_CHECK(type == ScalarType::kF32) << "IndexAddRows: not on 16-bit floats (backend.h)";
  Count("IndexAddRows");
  const int64_t* idx = H(index);
  const int64_t rows = RowsReached(idx, n);
  F32 os(type, H(out), rows * row), ss(type, H(src), n * row);
  kc::IndexAddRows<float>(os.data(), row, idx, n, ss.data());
  os.Store();
}

void HostBackend::CheckIndices(const int64_t* index, int64_t n,
                               const kernels::cuda::IndexCheck& check, int64_t* out,
                               kernels::cuda::IndexFault* fault, Stream stream) {
  CheckStream(stream);
  Count("CheckIndices");
  TY_CHECK(!IsDevice(fault)) << "CheckIndices: the fault record must be host memory";
  const int64_t* idx = H(index);
  const int64_t first = kc::CheckIndices(idx, n, check, H(out));
  if (first >= 0 && fault->check.op == nullptr) *fault = {check, idx[first]};
}

void HostBackend::FillUniform(ScalarType type, int64_t n, void* out, uint64_t seed, uint64_t offset,
                              double lo, double hi, Stream stream) {
  CheckStream(stream);
  CheckFloat(type, "FillUniform");
  Count("FillUniform");
  F32 os(type, H(out), n, false);
  kc::FillUniform<float>(n, os.data(), seed, offset, static_cast<float>(lo),
                         static_cast<float>(hi));
  os.Store();
}

void HostBackend::FillNormal(ScalarType type, int64_t n, void* out, uint64_t seed, uint64_t offset,
                             double mean, double std, Stream stream) {
  CheckStream(stream);
  CheckFloat(type, "FillNormal");
  Count("FillNormal");
  F32 os(type, H(out), n, false);
  kc::FillNormal<float>(n, os.data(), seed, offset, static_cast<float>(mean),
                        static_cast<float>(std));
  os.Store();
}

void HostBackend::FillBernoulli(int64_t n, uint8_t* out, uint64_t seed, uint64_t offset,
                                double p_keep, Stream stream) {
  CheckStream(stream);
  Count("FillBernoulli");
  kc::FillBernoulli(n, H(out), seed, offset, p_keep);
}

void HostBackend::AdamMulti(const cuda::AdamTensor* tensors, int count, int64_t step, double lr,
                            double beta1, double beta2, double eps, double weight_decay,
                            bool decoupled, const float* found_inf, Stream stream) {
  CheckStream(stream);
  Count("AdamMulti");
  if (found_inf != nullptr && *H(found_inf) != 0) return;
  const kc::AdamHyper h{lr, beta1, beta2, eps, weight_decay, decoupled};
  for (int i = 0; i < count; ++i) {
    const cuda::AdamTensor& t = tensors[i];
    kc::AdamUpdate<float>(t.n, H(t.param), H(t.grad), H(t.exp_avg), H(t.exp_avg_sq), step, h);
  }
}

void HostBackend::UnscaleCheck(float* const* tensors, const int64_t* sizes, int count, float scale,
                               float* found_inf, Stream stream) {
  CheckStream(stream);
  Count("UnscaleCheck");
  float* const* ptrs = H(tensors);
  const int64_t* ns = H(sizes);
  for (int i = 0; i < count; ++i) {
    float* x = H(ptrs[i]);
    for (int64_t j = 0; j < ns[i]; ++j) {
      if (!std::isfinite(x[j])) *H(found_inf) = 1;
      x[j] *= scale;
    }
  }
}

}  // namespace trainyard::testing
