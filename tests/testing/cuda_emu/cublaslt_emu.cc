// cuBLASLt on the host for the CUDA emulation (emu.h): the part of its API that
// kernels/cuda/blas.cc calls, with cuBLASLt's documented semantics, so that blas.cc itself (its
// row-major to column-major mapping, layouts, batch strides, epilogues and fallbacks) runs in
// the emulated build. D = epilogue(alpha op(A) op(B) + beta C) over column-major layouts
// (element (r, c) at r + c ld, items stride elements apart), products summed in f32 in order
// of k; C is not read when beta is 0. Epilogues: a bias of D's type per row of D, then the
// pre-GELU value to the aux matrix (AUX_LD apart) and tanh GELU. TF32 rounding is not modelled:
// FAST_TF32 computes in full f32.
//
// It refuses what cuBLASLt refuses, with its status codes: a leading dimension below a layout's
// rows, shapes or batch counts that do not chain, a GELU aux output whose AUX_LD is below D's
// rows or not a multiple of 8, and an operand (any item of a batch) less aligned than the
// preference promised when the algorithm was chosen.
#include <cublasLt.h>

#include <cmath>
#include <cstdint>
#include <cstring>

#include "tests/testing/cuda_emu/runtime_emu.h"

namespace {

struct Layout {
  cudaDataType_t type;
  int64_t rows, cols, ld;
  int32_t batch = 1;
  int64_t stride = 0;
};

struct Desc {
  cublasOperation_t trans_a = CUBLAS_OP_N, trans_b = CUBLAS_OP_N;
  cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_DEFAULT;
  const void* bias = nullptr;
  void* aux = nullptr;
  int64_t aux_ld = 0;
};

struct Preference {
  uint32_t align[4] = {256, 256, 256, 256};  // A, B, C, D; the most cuBLASLt assumes
};

Layout* L(cublasLtMatrixLayout_t l) { return reinterpret_cast<Layout*>(l); }
Desc* D(cublasLtMatmulDesc_t d) { return reinterpret_cast<Desc*>(d); }
Preference* P(cublasLtMatmulPreference_t p) { return reinterpret_cast<Preference*>(p); }

template <typename T>
bool Read(const void* buf, size_t size, T* out) {
  if (size != sizeof(T)) return false;
  std::memcpy(out, buf, sizeof(T));
  return true;
}

size_t Bytes(cudaDataType_t t) { return t == CUDA_R_32F ? 4 : 2; }

ty_emu::Storage StorageOf(cudaDataType_t t) {
  return t == CUDA_R_32F    ? ty_emu::Storage::kF32
         : t == CUDA_R_16BF ? ty_emu::Storage::kBF16
                            : ty_emu::Storage::kF16;
}
float Load(cudaDataType_t t, const void* p, int64_t i) {
  return ty_emu::LoadElement(StorageOf(t), p, i);
}
void Store(cudaDataType_t t, void* p, int64_t i, float v) {
  ty_emu::StoreElement(StorageOf(t), p, i, v);
}

bool Aligned(const void* p, int64_t batch, int64_t stride, cudaDataType_t t, uint32_t align) {
  if (reinterpret_cast<uintptr_t>(p) % align != 0) return false;
  return batch <= 1 || (stride * static_cast<int64_t>(Bytes(t))) % align == 0;
}

bool HasBias(cublasLtEpilogue_t e) {
  return e == CUBLASLT_EPILOGUE_BIAS || e == CUBLASLT_EPILOGUE_GELU_BIAS ||
         e == CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
}
bool HasGelu(cublasLtEpilogue_t e) {
  return e == CUBLASLT_EPILOGUE_GELU || e == CUBLASLT_EPILOGUE_GELU_BIAS ||
         e == CUBLASLT_EPILOGUE_GELU_AUX || e == CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
}
bool HasAux(cublasLtEpilogue_t e) {
  return e == CUBLASLT_EPILOGUE_GELU_AUX || e == CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
}

// The shapes of D = op(A) op(B): m x n with inner size k; false when they do not chain.
bool Shapes(const Desc& d, const Layout& a, const Layout& b, const Layout& c, int64_t* m,
            int64_t* n, int64_t* k) {
  *m = d.trans_a == CUBLAS_OP_N ? a.rows : a.cols;
  *k = d.trans_a == CUBLAS_OP_N ? a.cols : a.rows;
  const int64_t kb = d.trans_b == CUBLAS_OP_N ? b.rows : b.cols;
  *n = d.trans_b == CUBLAS_OP_N ? b.cols : b.rows;
  return kb == *k && c.rows == *m && c.cols == *n && a.batch == b.batch && a.batch == c.batch;
}

// What cuBLASLt checks of a descriptor and its layouts before choosing or running anything.
cublasStatus_t Validate(const Desc& d, const Layout& a, const Layout& b, const Layout& c) {
  for (const Layout* l : {&a, &b, &c}) {
    if (l->ld < l->rows) return CUBLAS_STATUS_INVALID_VALUE;
  }
  int64_t m, n, k;
  if (!Shapes(d, a, b, c, &m, &n, &k)) return CUBLAS_STATUS_INVALID_VALUE;
  if (a.type != b.type) return CUBLAS_STATUS_NOT_SUPPORTED;
  if (c.type != a.type && c.type != CUDA_R_32F) return CUBLAS_STATUS_NOT_SUPPORTED;
  if (HasAux(d.epilogue) && (d.aux_ld < m || d.aux_ld % 8 != 0)) return CUBLAS_STATUS_INVALID_VALUE;
  return CUBLAS_STATUS_SUCCESS;
}

float GeluTanh(float x) {
  const float inner = 0.7978845608028654f * (x + 0.044715f * x * x * x);
  return 0.5f * x * (1.0f + std::tanh(inner));
}

}  // namespace

cublasStatus_t cublasLtCreate(cublasLtHandle_t* handle) {
  static int context;
  *handle = reinterpret_cast<cublasLtHandle_t>(&context);
  return CUBLAS_STATUS_SUCCESS;
}

const char* cublasLtGetStatusString(cublasStatus_t status) {
  switch (status) {
    case CUBLAS_STATUS_SUCCESS:
      return "success";
    case CUBLAS_STATUS_INVALID_VALUE:
      return "invalid value";
    case CUBLAS_STATUS_NOT_SUPPORTED:
      return "not supported";
    default:
      return "error";
  }
}

cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t* desc, cublasComputeType_t compute,
                                        cudaDataType_t scale) {
  if (scale != CUDA_R_32F ||
      (compute != CUBLAS_COMPUTE_32F && compute != CUBLAS_COMPUTE_32F_FAST_TF32)) {
    return CUBLAS_STATUS_NOT_SUPPORTED;
  }
  *desc = reinterpret_cast<cublasLtMatmulDesc_t>(new Desc());
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t desc) {
  delete D(desc);
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t desc,
                                              cublasLtMatmulDescAttributes_t attr, const void* buf,
                                              size_t size) {
  Desc& d = *D(desc);
  int32_t op = 0;
  uint32_t epilogue = 0;
  bool ok = false;
  switch (attr) {
    case CUBLASLT_MATMUL_DESC_TRANSA:
      ok = Read(buf, size, &op), d.trans_a = static_cast<cublasOperation_t>(op);
      break;
    case CUBLASLT_MATMUL_DESC_TRANSB:
      ok = Read(buf, size, &op), d.trans_b = static_cast<cublasOperation_t>(op);
      break;
    case CUBLASLT_MATMUL_DESC_EPILOGUE:
      ok = Read(buf, size, &epilogue), d.epilogue = static_cast<cublasLtEpilogue_t>(epilogue);
      break;
    case CUBLASLT_MATMUL_DESC_BIAS_POINTER:
      ok = Read(buf, size, &d.bias);
      break;
    case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER:
      ok = Read(buf, size, &d.aux);
      break;
    case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD:
      ok = Read(buf, size, &d.aux_ld);
      break;
    default:
      return CUBLAS_STATUS_NOT_SUPPORTED;  // blas.cc sets no other attribute
  }
  return ok ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_INVALID_VALUE;
}

cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t* layout, cudaDataType type,
                                          uint64_t rows, uint64_t cols, int64_t ld) {
  if (type != CUDA_R_32F && type != CUDA_R_16BF && type != CUDA_R_16F) {
    return CUBLAS_STATUS_NOT_SUPPORTED;
  }
  *layout = reinterpret_cast<cublasLtMatrixLayout_t>(
      new Layout{type, static_cast<int64_t>(rows), static_cast<int64_t>(cols), ld});
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t layout) {
  delete L(layout);
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatrixLayoutSetAttribute(cublasLtMatrixLayout_t layout,
                                                cublasLtMatrixLayoutAttribute_t attr,
                                                const void* buf, size_t size) {
  Layout& l = *L(layout);
  bool ok = false;
  switch (attr) {
    case CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT:
      ok = Read(buf, size, &l.batch) && l.batch >= 1;
      break;
    case CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET:
      ok = Read(buf, size, &l.stride);
      break;
    default:
      return CUBLAS_STATUS_NOT_SUPPORTED;
  }
  return ok ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_INVALID_VALUE;
}

cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t* pref) {
  *pref = reinterpret_cast<cublasLtMatmulPreference_t>(new Preference());
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t pref) {
  delete P(pref);
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t pref,
                                                    cublasLtMatmulPreferenceAttributes_t attr,
                                                    const void* buf, size_t size) {
  Preference& p = *P(pref);
  uint64_t workspace = 0;
  bool ok = false;
  switch (attr) {
    case CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES:
      ok = Read(buf, size, &workspace);
      break;
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES:
      ok = Read(buf, size, &p.align[0]);
      break;
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES:
      ok = Read(buf, size, &p.align[1]);
      break;
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES:
      ok = Read(buf, size, &p.align[2]);
      break;
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES:
      ok = Read(buf, size, &p.align[3]);
      break;
    default:
      return CUBLAS_STATUS_NOT_SUPPORTED;
  }
  return ok ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_INVALID_VALUE;
}

// One algorithm, which remembers the alignments it was chosen for (cublasLtMatmul checks them).
cublasStatus_t cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t, cublasLtMatmulDesc_t desc,
                                              cublasLtMatrixLayout_t a, cublasLtMatrixLayout_t b,
                                              cublasLtMatrixLayout_t c, cublasLtMatrixLayout_t d,
                                              cublasLtMatmulPreference_t pref, int requested,
                                              cublasLtMatmulHeuristicResult_t results[],
                                              int* found) {
  *found = 0;
  if (requested < 1 || c != d) return CUBLAS_STATUS_INVALID_VALUE;  // blas.cc passes C as D
  const cublasStatus_t st = Validate(*D(desc), *L(a), *L(b), *L(c));
  if (st != CUBLAS_STATUS_SUCCESS) return st;
  results[0] = cublasLtMatmulHeuristicResult_t{};
  for (int i = 0; i < 4; ++i) results[0].algo.data[i] = P(pref)->align[i];
  results[0].state = CUBLAS_STATUS_SUCCESS;
  *found = 1;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmul(cublasLtHandle_t, cublasLtMatmulDesc_t desc, const void* alpha_p,
                              const void* A, cublasLtMatrixLayout_t a_desc, const void* B,
                              cublasLtMatrixLayout_t b_desc, const void* beta_p, const void* C,
                              cublasLtMatrixLayout_t c_desc, void* Dm,
                              cublasLtMatrixLayout_t d_desc, const cublasLtMatmulAlgo_t* algo,
                              void*, size_t, cudaStream_t stream) {
  // Copies: the product runs on the stream after the call returns, as cuBLASLt's does, and the
  // caller may destroy its descriptors before then.
  const Desc d = *D(desc);
  const Layout a = *L(a_desc), b = *L(b_desc), c = *L(c_desc), out = *L(d_desc);
  cublasStatus_t st = Validate(d, a, b, c);
  if (st != CUBLAS_STATUS_SUCCESS) return st;
  if (out.rows != c.rows || out.cols != c.cols || out.ld != c.ld || out.type != c.type) {
    return CUBLAS_STATUS_NOT_SUPPORTED;  // blas.cc writes D over C
  }
  if (algo == nullptr || !Aligned(A, a.batch, a.stride, a.type, algo->data[0]) ||
      !Aligned(B, b.batch, b.stride, b.type, algo->data[1]) ||
      !Aligned(C, c.batch, c.stride, c.type, algo->data[2]) ||
      !Aligned(Dm, out.batch, out.stride, out.type, algo->data[3])) {
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  if ((HasBias(d.epilogue) && d.bias == nullptr) || (HasAux(d.epilogue) && d.aux == nullptr)) {
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  int64_t m, n, k;
  Shapes(d, a, b, c, &m, &n, &k);
  float alpha, beta;
  std::memcpy(&alpha, alpha_p, sizeof(float));
  std::memcpy(&beta, beta_p, sizeof(float));
  ty_emu::OnStream(stream, [=] {
    for (int64_t item = 0; item < a.batch; ++item) {
      const int64_t ao = item * a.stride, bo = item * b.stride, co = item * c.stride;
      for (int64_t j = 0; j < n; ++j) {
        for (int64_t i = 0; i < m; ++i) {
          float acc = 0;
          for (int64_t p = 0; p < k; ++p) {
            const int64_t ai = d.trans_a == CUBLAS_OP_N ? i + p * a.ld : p + i * a.ld;
            const int64_t bi = d.trans_b == CUBLAS_OP_N ? p + j * b.ld : j + p * b.ld;
            acc += Load(a.type, A, ao + ai) * Load(b.type, B, bo + bi);
          }
          float v = alpha * acc;
          if (beta != 0) v += beta * Load(c.type, C, co + i + j * c.ld);
          if (HasBias(d.epilogue)) v += Load(c.type, d.bias, i);
          if (HasAux(d.epilogue)) Store(c.type, d.aux, i + j * d.aux_ld, v);
          if (HasGelu(d.epilogue)) v = GeluTanh(v);
          Store(out.type, Dm, co + i + j * out.ld, v);
        }
      }
    }
  });
  return CUBLAS_STATUS_SUCCESS;
}
