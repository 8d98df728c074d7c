#include "worker/trainer/live_state.h"

#include <cstring>

#include "worker/tensor/factories.h"

namespace trainyard::trainer {
namespace {

// Layout: count, then per tensor: name length, name, dtype, rank, dims, byte count, bytes;
// integers as little-endian int64 (the host's order: sender and receivers are one build).
void PutInt(std::string* out, int64_t v) { out->append(reinterpret_cast<const char*>(&v), 8); }

class Reader {
 public:
  explicit Reader(const std::string& bytes) : bytes_(bytes) {}
  StatusOr<int64_t> Int() {
    if (bytes_.size() - pos_ < 8) return Truncated();
    int64_t v;
    std::memcpy(&v, bytes_.data() + pos_, 8);
    pos_ += 8;
    return v;
  }
  StatusOr<std::string> Bytes(int64_t n) {
    if (n < 0 || static_cast<size_t>(n) > bytes_.size() - pos_) return Truncated();
    std::string s = bytes_.substr(pos_, static_cast<size_t>(n));
    pos_ += static_cast<size_t>(n);
    return s;
  }

 private:
  Status Truncated() const {
    return DataLossError("live state: malformed at byte " + std::to_string(pos_) + " of " +
                         std::to_string(bytes_.size()));
  }
  const std::string& bytes_;
  size_t pos_ = 0;
};

StatusOr<std::pair<std::string, Tensor>> ReadTensor(Reader& in) {
  ASSIGN_OR_RETURN(const int64_t name_size, in.Int());
  ASSIGN_OR_RETURN(std::string name, in.Bytes(name_size));
  ASSIGN_OR_RETURN(const int64_t dtype, in.Int());
  ASSIGN_OR_RETURN(const int64_t dims, in.Int());
  if (dtype < 0 || dtype > static_cast<int64_t>(DType::kBool) || dims < 0 || dims > 8) {
    return DataLossError("live state: tensor " + name + " has dtype " + std::to_string(dtype) +
                         " and " + std::to_string(dims) + " dimensions");
  }
  Shape shape;
  for (int64_t d = 0; d < dims; ++d) {
    ASSIGN_OR_RETURN(const int64_t size, in.Int());
    shape.push_back(size);
  }
  ASSIGN_OR_RETURN(const int64_t bytes, in.Int());
  Tensor t = Empty(shape, Options(static_cast<DType>(dtype)));
  if (bytes != t.numel() * static_cast<int64_t>(ElementSize(t.dtype()))) {
    return DataLossError("live state: tensor " + name + " has " + std::to_string(bytes) +
                         " bytes for its shape");
  }
  ASSIGN_OR_RETURN(const std::string data, in.Bytes(bytes));
  if (bytes > 0) std::memcpy(t.raw_data(), data.data(), static_cast<size_t>(bytes));
  return std::make_pair(std::move(name), std::move(t));
}

}  // namespace

std::string PackTensors(const NamedTensorList& tensors) {
  std::string out;
  PutInt(&out, static_cast<int64_t>(tensors.size()));
  for (const auto& [name, tensor] : tensors) {
    const Tensor t = ContiguousData(tensor);
    PutInt(&out, static_cast<int64_t>(name.size()));
    out += name;
    PutInt(&out, static_cast<int64_t>(t.dtype()));
    PutInt(&out, t.shape().size());
    for (int64_t d : t.shape()) PutInt(&out, d);
    const int64_t bytes = t.numel() * static_cast<int64_t>(ElementSize(t.dtype()));
    PutInt(&out, bytes);
    out.append(static_cast<const char*>(t.raw_data()), static_cast<size_t>(bytes));
  }
  return out;
}

StatusOr<NamedTensorList> UnpackTensors(const std::string& bytes) {
  Reader in(bytes);
  ASSIGN_OR_RETURN(const int64_t count, in.Int());
  if (count < 0 || static_cast<size_t>(count) > bytes.size()) {
    return DataLossError("live state: " + std::to_string(count) + " tensors in " +
                         std::to_string(bytes.size()) + " bytes");
  }
  NamedTensorList tensors;
  for (int64_t i = 0; i < count; ++i) {
    ASSIGN_OR_RETURN(auto named, ReadTensor(in));
    tensors.push_back(std::move(named));
  }
  return tensors;
}

Status BroadcastTensors(dist::ProcessGroup& group, int root, NamedTensorList* tensors, Device via) {
  // One broadcast of `host` (CPU), through `via`.
  auto broadcast = [&](const Tensor& host) -> Status {
    const Tensor t = via.is_cpu() ? host : CopyToDevice(host, via);
    auto work = group.Broadcast(t, root);
    RETURN_IF_ERROR(dist::WaitFor(group, *work));
    if (!via.is_cpu()) CopyInto(host, t);
    return OkStatus();
  };
  std::string packed = group.rank() == root ? PackTensors(*tensors) : std::string();
  Tensor size = Zeros(Shape{1}, Options(DType::kInt64));
  size.data<int64_t>()[0] = static_cast<int64_t>(packed.size());
  RETURN_IF_ERROR(broadcast(size));
  const int64_t n = size.data<int64_t>()[0];
  Tensor bytes = Empty(Shape{n}, Options(DType::kUInt8));
  if (group.rank() == root) std::memcpy(bytes.raw_data(), packed.data(), packed.size());
  RETURN_IF_ERROR(broadcast(bytes));
  if (group.rank() == root || tensors == nullptr) return OkStatus();
  ASSIGN_OR_RETURN(*tensors, UnpackTensors(std::string(static_cast<const char*>(bytes.raw_data()),
                                                       static_cast<size_t>(n))));
  return OkStatus();
}

StatusOr<StateSource> ChooseStateSource(dist::ProcessGroup& group, int64_t applied_step) {
  // key = step x W + (W - 1 - rank): its maximum is the most steps, then the lowest rank.
  const int64_t world = group.size();
  Tensor key = Zeros(Shape{1}, Options(DType::kInt64));
  key.data<int64_t>()[0] = applied_step * world + (world - 1 - group.rank());
  auto work = group.AllReduce(key, dist::ReduceOp::kMax);
  RETURN_IF_ERROR(dist::WaitFor(group, *work));
  const int64_t best = key.data<int64_t>()[0];
  return StateSource{static_cast<int>(world - 1 - best % world), best / world};
}

}  // namespace trainyard::trainer
