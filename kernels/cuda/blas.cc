// CudaBackendImpl::Gemm through cuBLASLt: row-major, strided-batched, with the bias and GELU
// epilogues fused where cuBLASLt can (backend.h GemmArgs, GemmEpilogue).
//
// Note [Row-major GEMM on cuBLASLt]
// cuBLASLt is column-major. A row-major r x c matrix with row stride ld is, byte for byte, the
// column-major c x r matrix (its transpose) with leading dimension ld. So instead of
// C = op(A) op(B) (row-major, m x n) we ask for C^T = op(B)^T op(A)^T (column-major, n x m):
// cuBLASLt's "A" is our B with transa = trans_b, its "B" is our A with transb = trans_a, and
// its m, n are our n, m. A bias of n entries per row-major column is then a bias per row of
// the column-major D (cuBLASLt's CUBLASLT_EPILOGUE_BIAS: "length must match D rows"), and the
// GELU aux output, row-major m x n with row stride n, is column-major n x m with AUX_LD = n.
//
// Note [Gemm plans]
// Creating descriptors and querying heuristics costs microseconds to milliseconds, so a Plan
// (matmul descriptor, layouts, the chosen algorithm) is cached per PlanKey: every GemmArgs
// field except the pointers, alpha and beta (they do not change the algorithm), plus the
// device and each operand's alignment (up to 16 bytes, of every item of a batch; the
// heuristics choose by it). The bias and aux pointers live in the shared descriptor, so a
// Plan's mutex is held from setting them to enqueueing the matmul. Workspaces are per
// (device, stream): two streams on one device must not share scratch memory. Streams are
// never destroyed (backend.h), so neither are the workspaces.
//
// Batched products add the same bias to every item (BIAS_BATCH_STRIDE stays 0); gelu_input is
// one m x n matrix, so it needs batch == 1 (checked). Where cuBLASLt has no fused kernel (say
// a GELU aux output whose n is not a multiple of 8, as AUX_LD requires), the plain product
// runs and the epilogue follows as our elementwise kernels.
#include <cublasLt.h>
#include <cuda_runtime.h>

#include <array>
#include <climits>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <sstream>
#include <string>
#include <unordered_map>
#include <utility>

#include "kernels/cuda/backend_impl.h"
#include "kernels/cuda/cuda_check.h"

#define TY_CUBLAS_CHECK(expr)                                                     \
  do {                                                                            \
    const cublasStatus_t ty_cublas_st_ = (expr);                                  \
    TY_CHECK(ty_cublas_st_ == CUBLAS_STATUS_SUCCESS)                              \
        << #expr << " failed: " << cublasLtGetStatusString(ty_cublas_st_) << " (" \
        << static_cast<int>(ty_cublas_st_) << ")";                                \
  } while (0)

namespace trainyard::kernels::cuda {
namespace {

constexpr size_t kWorkspaceBytes = size_t{32} << 20;  // what NVIDIA suggests for Hopper
constexpr size_t kMaxPlans = 4096;                    // the cache is dropped when it fills

cudaDataType_t CudaType(ScalarType t) {
  switch (t) {
    case ScalarType::kF32:
      return CUDA_R_32F;
    case ScalarType::kBF16:
      return CUDA_R_16BF;
    case ScalarType::kF16:
      return CUDA_R_16F;
    default:
      TY_CHECK(false) << "gemm: dtype " << static_cast<int>(t)
                      << " is not supported on CUDA (use float32, bfloat16 or float16)";
  }
  return CUDA_R_32F;
}

int64_t ElementSize(ScalarType t) { return t == ScalarType::kF32 ? 4 : 2; }

// The largest power of two up to 16 dividing the address (16 for null).
int64_t AlignmentOf(const void* p) {
  const auto v = reinterpret_cast<uintptr_t>(p);
  int64_t a = 16;
  while (a > 1 && v % a != 0) a /= 2;
  return a;
}

// The alignment every item of a strided batch has: that of the base and of the stride in
// bytes (an odd stride leaves item 1 less aligned than item 0).
int64_t AlignmentOf(const void* base, int64_t batch, int64_t stride, ScalarType t) {
  int64_t a = AlignmentOf(base);
  const int64_t bytes = stride * ElementSize(t);
  while (batch > 1 && a > 1 && bytes % a != 0) a /= 2;
  return a;
}

std::string Describe(const GemmArgs& g) {
  std::ostringstream os;
  os << "gemm m=" << g.m << " n=" << g.n << " k=" << g.k << " batch=" << g.batch
     << " trans_a=" << g.trans_a << " trans_b=" << g.trans_b << " lda=" << g.lda << " ldb=" << g.ldb
     << " ldc=" << g.ldc << " stride_a=" << g.stride_a << " stride_b=" << g.stride_b
     << " stride_c=" << g.stride_c << " in=" << static_cast<int>(g.in)
     << " out=" << static_cast<int>(g.out) << " bias=" << (g.epilogue.bias != nullptr)
     << " gelu=" << g.epilogue.gelu << " gelu_input=" << (g.epilogue.gelu_input != nullptr);
  return os.str();
}

// What the epilogue asks for, with its pointers.
struct Fused {
  cublasLtEpilogue_t mode = CUBLASLT_EPILOGUE_DEFAULT;
  const void* bias = nullptr;
  void* aux = nullptr;
};

// The fused form of g's epilogue (DEFAULT when there is none).
Fused FusedEpilogue(const GemmArgs& g) {
  const GemmEpilogue& e = g.epilogue;
  Fused f;
  f.bias = e.bias;
  if (e.gelu) f.aux = e.gelu_input;
  if (!e.gelu) {
    f.mode = e.bias != nullptr ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT;
  } else if (f.aux != nullptr) {
    f.mode = e.bias != nullptr ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS : CUBLASLT_EPILOGUE_GELU_AUX;
  } else {
    f.mode = e.bias != nullptr ? CUBLASLT_EPILOGUE_GELU_BIAS : CUBLASLT_EPILOGUE_GELU;
  }
  return f;
}

// Note [Gemm plans]: every field that shapes the descriptor or the algorithm.
using PlanKey = std::array<int64_t, 22>;

PlanKey MakeKey(int device, const GemmArgs& g, const Fused& f) {
  const bool batched = g.batch > 1;
  return {device,
          static_cast<int64_t>(g.in),
          static_cast<int64_t>(g.out),
          g.trans_a,
          g.trans_b,
          g.m,
          g.n,
          g.k,
          g.lda,
          g.ldb,
          g.ldc,
          batched ? g.stride_a : 0,
          batched ? g.stride_b : 0,
          batched ? g.stride_c : 0,
          g.batch,
          g.in == ScalarType::kF32 && g.allow_tf32,
          static_cast<int64_t>(f.mode),
          AlignmentOf(g.a, g.batch, g.stride_a, g.in),
          AlignmentOf(g.b, g.batch, g.stride_b, g.in),
          AlignmentOf(g.c, g.batch, g.stride_c, g.out),
          f.bias != nullptr ? AlignmentOf(f.bias) : 0,
          f.aux != nullptr ? AlignmentOf(f.aux) : 0};
}

struct PlanKeyHash {
  size_t operator()(const PlanKey& k) const {
    uint64_t h = 1469598103934665603ull;  // FNV-1a over the fields
    for (int64_t v : k) h = (h ^ static_cast<uint64_t>(v)) * 1099511628211ull;
    return static_cast<size_t>(h);
  }
};

// Descriptors and the algorithm for one PlanKey. Immutable after Build except the epilogue
// pointers, which are set and used under mu.
struct Plan {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;  // cuBLASLt's A, B, C = D
  cublasLtMatmulAlgo_t algo{};
  std::mutex mu;

  Plan() = default;
  Plan(const Plan&) = delete;
  Plan& operator=(const Plan&) = delete;
  ~Plan() {
    if (a != nullptr) cublasLtMatrixLayoutDestroy(a);
    if (b != nullptr) cublasLtMatrixLayoutDestroy(b);
    if (c != nullptr) cublasLtMatrixLayoutDestroy(c);
    if (desc != nullptr) cublasLtMatmulDescDestroy(desc);
  }
};

template <typename T>
void SetDesc(cublasLtMatmulDesc_t d, cublasLtMatmulDescAttributes_t attr, const T& v) {
  TY_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(d, attr, &v, sizeof(v)));
}

// A column-major rows x cols layout with leading dimension ld; batched when batch > 1. With
// one column ld is never read, so a caller's 0 is fixed up to what cuBLASLt validates.
cublasLtMatrixLayout_t MakeLayout(ScalarType t, int64_t rows, int64_t cols, int64_t ld,
                                  int64_t batch, int64_t stride) {
  if (cols == 1 && ld < rows) ld = rows;
  cublasLtMatrixLayout_t l = nullptr;
  TY_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&l, CudaType(t), static_cast<uint64_t>(rows),
                                             static_cast<uint64_t>(cols), ld));
  if (batch > 1) {
    const int32_t count = static_cast<int32_t>(batch);
    TY_CUBLAS_CHECK(cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count,
                                                     sizeof(count)));
    TY_CUBLAS_CHECK(cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET,
                                                     &stride, sizeof(stride)));
  }
  return l;
}

// Descriptors per Note [Row-major GEMM on cuBLASLt]; the epilogue pointers are set too, since
// the heuristics read their alignment.
std::unique_ptr<Plan> MakeDescriptors(const GemmArgs& g, const Fused& f) {
  auto p = std::make_unique<Plan>();
  const cublasComputeType_t compute =
      g.in == ScalarType::kF32 && g.allow_tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
  TY_CUBLAS_CHECK(cublasLtMatmulDescCreate(&p->desc, compute, CUDA_R_32F));
  SetDesc(p->desc, CUBLASLT_MATMUL_DESC_TRANSA, g.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N);
  SetDesc(p->desc, CUBLASLT_MATMUL_DESC_TRANSB, g.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N);
  SetDesc(p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE, f.mode);
  if (f.bias != nullptr) SetDesc(p->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, f.bias);
  if (f.aux != nullptr) {
    SetDesc(p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, f.aux);
    SetDesc(p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, g.n);
  }
  // Our B (k x n, or n x k when trans_b) is cuBLASLt's A; our A is its B.
  p->a = g.trans_b ? MakeLayout(g.in, g.k, g.n, g.ldb, g.batch, g.stride_b)
                   : MakeLayout(g.in, g.n, g.k, g.ldb, g.batch, g.stride_b);
  p->b = g.trans_a ? MakeLayout(g.in, g.m, g.k, g.lda, g.batch, g.stride_a)
                   : MakeLayout(g.in, g.k, g.m, g.lda, g.batch, g.stride_a);
  p->c = MakeLayout(g.out, g.n, g.m, g.ldc, g.batch, g.stride_c);
  return p;
}

// The descriptors and the heuristics' first algorithm, or null when cuBLASLt has none.
std::unique_ptr<Plan> BuildPlan(cublasLtHandle_t handle, const GemmArgs& g, const Fused& f) {
  std::unique_ptr<Plan> p = MakeDescriptors(g, f);
  cublasLtMatmulPreference_t pref = nullptr;
  TY_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
  const uint64_t ws = kWorkspaceBytes;
  TY_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(
      pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws)));
  // cuBLASLt's A is our B; every item of a batch must have the alignment promised.
  const auto align_a = static_cast<uint32_t>(AlignmentOf(g.b, g.batch, g.stride_b, g.in));
  const auto align_b = static_cast<uint32_t>(AlignmentOf(g.a, g.batch, g.stride_a, g.in));
  const auto align_c = static_cast<uint32_t>(AlignmentOf(g.c, g.batch, g.stride_c, g.out));
  const std::pair<cublasLtMatmulPreferenceAttributes_t, uint32_t> aligns[] = {
      {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, align_a},
      {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, align_b},
      {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, align_c},
      {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, align_c}};
  for (const auto& [attr, value] : aligns) {
    TY_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, attr, &value, sizeof(value)));
  }
  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  const cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(handle, p->desc, p->a, p->b, p->c, p->c,
                                                           pref, 1, &result, &found);
  cublasLtMatmulPreferenceDestroy(pref);
  if (st != CUBLAS_STATUS_SUCCESS || found == 0 || result.state != CUBLAS_STATUS_SUCCESS) {
    return nullptr;
  }
  p->algo = result.algo;
  return p;
}

// Process-wide cuBLASLt state: a handle per device, a workspace per (device, stream) and the
// plan cache (Note [Gemm plans]). Never destroyed: it may be used until the process exits.
class LtState {
 public:
  cublasLtHandle_t Handle(int device) {
    std::lock_guard<std::mutex> lock(mu_);
    cublasLtHandle_t& h = handles_[device];
    if (h == nullptr) TY_CUBLAS_CHECK(cublasLtCreate(&h));
    return h;
  }

  // 32 MiB on the current device (the stream's), allocated on first use; outside mu_, since
  // a full device makes the allocation wait for the device (AllocOrDie).
  void* Workspace(int device, cudaStream_t stream) {
    const std::pair<int, cudaStream_t> key{device, stream};
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (auto it = workspaces_.find(key); it != workspaces_.end()) return it->second;
    }
    void* w = AllocOrDie("gemm: the cuBLASLt workspace", kWorkspaceBytes);
    std::lock_guard<std::mutex> lock(mu_);
    auto [it, inserted] = workspaces_.emplace(key, w);
    if (!inserted) TY_CUDA_CHECK(cudaFree(w));  // another thread's came first
    return it->second;
  }

  // The cached plan for (device, g, f), built on first use; null when cuBLASLt has no
  // algorithm (remembered too, so it is asked once).
  std::shared_ptr<Plan> GetPlan(int device, const GemmArgs& g, const Fused& f) {
    const PlanKey key = MakeKey(device, g, f);
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = plans_.find(key);
      if (it != plans_.end()) return it->second;
    }
    std::shared_ptr<Plan> plan = BuildPlan(Handle(device), g, f);
    std::lock_guard<std::mutex> lock(mu_);
    if (plans_.size() >= kMaxPlans) plans_.clear();  // users keep their shared_ptr
    return plans_.emplace(key, std::move(plan)).first->second;
  }

 private:
  std::mutex mu_;
  std::map<int, cublasLtHandle_t> handles_;
  std::map<std::pair<int, cudaStream_t>, void*> workspaces_;
  std::unordered_map<PlanKey, std::shared_ptr<Plan>, PlanKeyHash> plans_;
};

LtState& Lt() {
  static LtState* s = new LtState();
  return *s;
}

// A stored rows x cols row-major matrix needs a row stride of at least cols (unless one row).
bool RowStrideOk(int64_t rows, int64_t cols, int64_t ld) { return rows <= 1 || ld >= cols; }

void CheckArgs(const GemmArgs& g) {
  TY_CHECK(g.m >= 0 && g.n >= 0 && g.k >= 0 && g.batch >= 1 && g.batch <= INT32_MAX)
      << "gemm: bad sizes: " << Describe(g);
  TY_CHECK(g.out == g.in || g.out == ScalarType::kF32)
      << "gemm: output dtype must be the input's or float32: " << Describe(g);
  CudaType(g.in);  // aborts on an unsupported dtype
  TY_CHECK(RowStrideOk(g.trans_a ? g.k : g.m, g.trans_a ? g.m : g.k, g.lda) &&
           RowStrideOk(g.trans_b ? g.n : g.k, g.trans_b ? g.k : g.n, g.ldb) &&
           RowStrideOk(g.m, g.n, g.ldc))
      << "gemm: a row stride is shorter than its row: " << Describe(g);
  TY_CHECK(g.epilogue.gelu_input == nullptr || g.batch == 1)
      << "gemm: gelu_input (m x n) needs batch == 1: " << Describe(g);
  TY_CHECK(g.epilogue.gelu_input == nullptr || g.epilogue.gelu)
      << "gemm: gelu_input is set without gelu: " << Describe(g);
}

// Sizes (batch, m, n) with the given strides for operands 0 and 1 (unit column stride unless
// `broadcast_row` makes operand 1 a single row).
StridedIter MatrixIter(const GemmArgs& g, int64_t ld0, int64_t ld1, int64_t batch_stride1,
                       bool broadcast_row) {
  StridedIter it;
  it.ndim = 3;
  it.nops = 2;
  it.sizes[0] = g.batch;
  it.sizes[1] = g.m;
  it.sizes[2] = g.n;
  const int64_t s0[3] = {g.stride_c, ld0, 1};
  const int64_t s1[3] = {broadcast_row ? 0 : batch_stride1, broadcast_row ? 0 : ld1, 1};
  for (int d = 0; d < 3; ++d) {
    it.strides[0][d] = s0[d];
    it.strides[1][d] = s1[d];
  }
  return it;
}

// k == 0: C = beta * C (cuBLASLt rejects empty layouts). beta == 0 overwrites, NaN included,
// so it fills the first row and copies it everywhere instead of scaling.
void ScaleOnly(Backend& be, const GemmArgs& g, Stream stream) {
  if (g.beta != 0) {
    const StridedIter it = MatrixIter(g, g.ldc, g.ldc, g.stride_c, false);
    be.Unary(UnaryOp::kAffine, g.out, it, g.c, g.c, g.beta, 0.0, stream);
    return;
  }
  be.Fill(g.out, g.n, g.c, 0.0, stream);
  const StridedIter it = MatrixIter(g, g.ldc, 0, 0, true);
  be.Copy(it, g.out, g.c, g.out, g.c, stream);  // row 0 onto itself copies zeros onto zeros
}

// The epilogue as elementwise kernels after a plain product: C_b += bias for every item b,
// then gelu_input = C (batch 1) and C = gelu_tanh(C).
void UnfusedEpilogue(Backend& be, const GemmArgs& g, Stream stream) {
  const GemmEpilogue& e = g.epilogue;
  if (e.bias != nullptr) {
    StridedIter it = MatrixIter(g, g.ldc, g.ldc, g.stride_c, false);
    it.nops = 3;
    it.strides[2][2] = 1;  // bias: one row of n, broadcast over the items and m
    be.Binary(BinaryOp::kAdd, g.out, it, g.c, g.c, e.bias, 1.0, stream);
  }
  if (!e.gelu) return;
  if (e.gelu_input != nullptr) {
    StridedIter it = MatrixIter(g, g.n, g.ldc, 0, false);  // dst ld n, src ld ldc
    it.strides[0][0] = 0;                                  // batch == 1 (checked)
    be.Copy(it, g.out, e.gelu_input, g.out, g.c, stream);
  }
  const StridedIter it = MatrixIter(g, g.ldc, g.ldc, g.stride_c, false);
  be.Unary(UnaryOp::kGeluTanh, g.out, it, g.c, g.c, 0.0, 0.0, stream);
}

// Enqueues D = C = epilogue(alpha op(A) op(B) + beta C) with the plan's algorithm.
cublasStatus_t RunPlan(Plan& p, const GemmArgs& g, const Fused& f, cublasLtHandle_t handle,
                       void* workspace, cudaStream_t stream) {
  std::lock_guard<std::mutex> lock(p.mu);
  if (f.bias != nullptr) SetDesc(p.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, f.bias);
  if (f.aux != nullptr) SetDesc(p.desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, f.aux);
  // Our B is cuBLASLt's A (Note [Row-major GEMM on cuBLASLt]).
  return cublasLtMatmul(handle, p.desc, &g.alpha, g.b, p.a, g.a, p.b, &g.beta, g.c, p.c, g.c, p.c,
                        &p.algo, workspace, kWorkspaceBytes, stream);
}

}  // namespace

void CudaBackendImpl::Gemm(const GemmArgs& args, Stream stream) {
  CheckArgs(args);
  if (args.m == 0 || args.n == 0) return;
  const bool has_epilogue = args.epilogue.bias != nullptr || args.epilogue.gelu;
  if (args.k == 0) {
    ScaleOnly(*this, args, stream);
    if (has_epilogue) UnfusedEpilogue(*this, args, stream);
    return;
  }
  int device = 0;
  TY_CUDA_CHECK(cudaGetDevice(&device));
  LtState& lt = Lt();

  // The fused epilogue where cuBLASLt has one (AUX_LD must be a multiple of 8) and runs it for
  // these pointers (it may refuse, say, a bias less aligned than it needs); else the plain
  // product, then the epilogue as our kernels.
  const cudaStream_t s = AsStream(stream);
  Fused fused = FusedEpilogue(args);
  cublasStatus_t st = CUBLAS_STATUS_NOT_SUPPORTED;
  if (fused.mode != CUBLASLT_EPILOGUE_DEFAULT && (fused.aux == nullptr || args.n % 8 == 0)) {
    if (std::shared_ptr<Plan> plan = lt.GetPlan(device, args, fused)) {
      st = RunPlan(*plan, args, fused, lt.Handle(device), lt.Workspace(device, s), s);
    }
  }
  if (st == CUBLAS_STATUS_NOT_SUPPORTED) {
    fused = Fused{};
    std::shared_ptr<Plan> plan = lt.GetPlan(device, args, fused);
    TY_CHECK(plan != nullptr) << "gemm: cuBLASLt has no algorithm for " << Describe(args);
    st = RunPlan(*plan, args, fused, lt.Handle(device), lt.Workspace(device, s), s);
  }
  TY_CHECK(st == CUBLAS_STATUS_SUCCESS)
      << "cublasLtMatmul failed: " << cublasLtGetStatusString(st) << " for " << Describe(args);
  if (has_epilogue && fused.mode == CUBLASLT_EPILOGUE_DEFAULT) {
    UnfusedEpilogue(*this, args, stream);
  }
}

}  // namespace trainyard::kernels::cuda
