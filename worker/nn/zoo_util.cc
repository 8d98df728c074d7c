#include "worker/nn/zoo_util.h"

#include <sstream>

namespace trainyard::nn::internal {

Status CheckAtLeast(const std::string& field, int64_t value, int64_t min) {
  if (value >= min) return OkStatus();
  return InvalidArgumentError(field + " is " + std::to_string(value) + "; it must be at least " +
                              std::to_string(min));
}

Status CheckProbability(const std::string& field, double value) {
  if (value >= 0 && value < 1) return OkStatus();
  std::ostringstream os;
  os << field << " is " << value << "; it must lie in [0, 1)";
  return InvalidArgumentError(os.str());
}

Status CheckParameterCount(const std::string& model, double count, const std::string& fields) {
  if (count <= kMaxParameters) return OkStatus();
  std::ostringstream os;
  os << model << ": the config gives " << count << " parameters; at most " << kMaxParameters
     << " are supported (reduce " << fields << ")";
  return InvalidArgumentError(os.str());
}

Status CheckDType(const std::string& model, const Tensor& x, DType dtype) {
  if (x.dtype() == dtype) return OkStatus();
  return InvalidArgumentError(model + ": input dtype is " + DTypeName(x.dtype()) + "; it must be " +
                              DTypeName(dtype));
}

Status CheckImage(const std::string& model, const Tensor& x, int64_t channels, int64_t size) {
  const bool ok =
      x.dim() == 4 && x.size(1) == channels &&
      (size == 0 ? x.size(2) >= 1 && x.size(3) >= 1 : x.size(2) == size && x.size(3) == size);
  if (ok) return CheckDType(model, x, DType::kFloat32);
  std::string want =
      "(N, " + std::to_string(channels) + ", " +
      (size == 0 ? std::string("H, W") : std::to_string(size) + ", " + std::to_string(size)) + ")";
  return InvalidArgumentError(model + ": input shape is " + x.shape().ToString() + "; it must be " +
                              want);
}

}  // namespace trainyard::nn::internal
