#include "worker/tensor/dtype.h"

namespace trainyard {

size_t ElementSize(DType t) {
  switch (t) {
    case DType::kFloat32:
      return 4;
    case DType::kFloat64:
      return 8;
    case DType::kBFloat16:
      return 2;
    case DType::kFloat16:
      return 2;
    case DType::kInt64:
      return 8;
    case DType::kInt32:
      return 4;
    case DType::kUInt8:
      return 1;
    case DType::kBool:
      return 1;
  }
  return 0;
}

const char* DTypeName(DType t) {
  switch (t) {
    case DType::kFloat32:
      return "float32";
    case DType::kFloat64:
      return "float64";
    case DType::kBFloat16:
      return "bfloat16";
    case DType::kFloat16:
      return "float16";
    case DType::kInt64:
      return "int64";
    case DType::kInt32:
      return "int32";
    case DType::kUInt8:
      return "uint8";
    case DType::kBool:
      return "bool";
  }
  return "unknown";
}

bool IsFloating(DType t) {
  return t == DType::kFloat32 || t == DType::kFloat64 || t == DType::kBFloat16 ||
         t == DType::kFloat16;
}

StatusOr<DType> ParseDType(const std::string& name) {
  for (DType t : {DType::kFloat32, DType::kFloat64, DType::kBFloat16, DType::kFloat16,
                  DType::kInt64, DType::kInt32, DType::kUInt8, DType::kBool}) {
    if (name == DTypeName(t)) return t;
  }
  if (name == "f32" || name == "fp32") return DType::kFloat32;
  if (name == "f64" || name == "fp64") return DType::kFloat64;
  if (name == "bf16") return DType::kBFloat16;
  if (name == "f16" || name == "fp16") return DType::kFloat16;
  return InvalidArgumentError("unknown dtype \"" + name +
                              "\"; allowed: float32, float64, bfloat16, float16, int64, int32, "
                              "uint8, bool");
}

}  // namespace trainyard
