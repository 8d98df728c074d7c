#include "worker/dist/zero.h"

#include <algorithm>
#include <cmath>
#include <map>

#include "worker/autograd/grad_mode.h"
#include "worker/ops/elementwise.h"
#include "worker/tensor/device_kernels.h"
#include "worker/tensor/factories.h"

namespace trainyard::dist {
namespace {

std::string BucketName(size_t b) { return "bucket" + std::to_string(b); }

// Chunk `rank` of a 1-D padded buffer of `world` equal chunks.
Tensor Chunk(const Tensor& flat, int rank, int world) {
  const int64_t n = flat.numel() / world;
  return MakeView(flat, Shape{n}, Shape{1}, flat.offset() + rank * n);
}

// Parameter i of bucket `b`, viewed in a flat buffer laid out like the bucket.
Tensor ParamView(const Bucket& b, size_t i, const Tensor& flat, const Shape& shape) {
  return MakeView(flat, shape, ContiguousStrides(shape), flat.offset() + b.offsets[i]);
}

}  // namespace

int64_t OptimizerStateBytes(const optim::Optimizer& optimizer) {
  int64_t bytes = 0;
  for (size_t i = 0; i < optimizer.params().size(); ++i) {
    for (const auto& [name, t] : optimizer.state(i).buffers) bytes += BytesOf(t);
  }
  return bytes;
}

StatusOr<std::unique_ptr<ZeroOptimizer>> ZeroOptimizer::Create(Reducer* reducer,
                                                               const OptimizerFactory& make,
                                                               std::vector<Tensor> weights) {
  if (reducer == nullptr || reducer->buckets().empty() ||
      !reducer->buckets().front().shard.defined()) {
    return InvalidArgumentError("zero: the reducer must reduce-scatter (shard_gradients)");
  }
  const bool sharded_weights = !weights.empty();
  if (sharded_weights && weights.size() != reducer->buckets().size()) {
    return InvalidArgumentError("zero: " + std::to_string(weights.size()) + " weight shards for " +
                                std::to_string(reducer->buckets().size()) + " buckets");
  }
  const int rank = reducer->group().rank(), world = reducer->group().size();
  const bool release = reducer->options().release_buckets;
  std::vector<Tensor> masters;
  std::vector<optim::NamedTensor> named;
  for (size_t b = 0; b < reducer->buckets().size(); ++b) {
    const Bucket& bucket = reducer->buckets()[b];
    // ZeRO-1: this rank's chunk of the bucket's buffer, free between the reduce-scatter and the
    // next backward, so no copy of the weights is kept. ZeRO-2 has no such buffer: a chunk of
    // its own.
    Tensor master = sharded_weights ? weights[b]
                    : release       ? Zeros(bucket.shard.shape(), bucket.shard.options())
                                    : Chunk(bucket.buffer, rank, world);
    if (master.shape() != bucket.shard.shape()) {
      return InvalidArgumentError("zero: the weight shard of bucket " + std::to_string(b) +
                                  " is not shaped like its gradient shard");
    }
    master.set_requires_grad(true);
    master.set_grad(bucket.shard);  // the reduce-scatter writes the averaged chunk here
    masters.push_back(master);
    named.emplace_back(BucketName(b), master);
  }
  std::unique_ptr<ZeroOptimizer> zero(
      new ZeroOptimizer(reducer, std::move(masters), sharded_weights));
  ASSIGN_OR_RETURN(zero->inner_, make(std::move(named)));
  return zero;
}

// Copies the elements of the bucket's parameters that fall in [begin, end) of its layout into
// `flat`, whose first element is element `origin` of that layout, or back when `to_params`.
static void CopyRange(const Bucket& bucket, const std::vector<NamedTensor>& params,
                      const Tensor& flat, int64_t origin, int64_t begin, int64_t end,
                      bool to_params) {
  for (size_t i = 0; i < bucket.params.size(); ++i) {
    const Tensor& p = params[bucket.params[i]].second;
    const int64_t lo = std::max(begin, bucket.offsets[i]);
    const int64_t hi = std::min(end, bucket.offsets[i] + p.numel());
    if (lo >= hi) continue;
    Tensor in_param = MakeView(p, Shape{hi - lo}, Shape{1}, p.offset() + lo - bucket.offsets[i]);
    Tensor in_flat = MakeView(flat, Shape{hi - lo}, Shape{1}, flat.offset() + lo - origin);
    if (to_params) {
      CopyInto(in_param, in_flat);
    } else {
      CopyInto(in_flat, in_param);
    }
  }
}

// Every rank's updated chunks into the parameters. ZeRO-1 gathers into the buckets' buffers
// (zeroed afterwards for the next backward), all at once; ZeRO-2 into buffers of its own, two
// buckets at a time, so the whole gradient's size is never held.
Status ZeroOptimizer::GatherWeights() {
  ProcessGroup& group = reducer_->group();
  const std::vector<Bucket>& buckets = reducer_->buckets();
  const bool release = reducer_->options().release_buckets;
  const size_t n = masters_.size(), window = release ? 2 : n;
  std::vector<Tensor> in(n), full(n);
  std::vector<std::shared_ptr<Work>> works(n);
  size_t launched = 0;
  for (size_t b = 0; b < n; ++b) {
    for (; launched < n && launched < b + window; ++launched) {
      const Tensor& m = masters_[launched];
      // ZeRO-1's chunk is part of the output: it travels from a copy.
      in[launched] = release ? m : ConvertTo(m, m.dtype(), /*force_copy=*/true);
      full[launched] =
          release ? Empty(Shape{buckets[launched].padded}, m.options()) : buckets[launched].buffer;
      works[launched] = group.AllGather(full[launched], in[launched]);
    }
    RETURN_IF_ERROR(WaitFor(group, *works[b]));
    CopyRange(buckets[b], reducer_->params(), full[b], 0, 0, buckets[b].numel, true);
    if (!release) FillInPlace(full[b], 0.0);
    in[b] = full[b] = Tensor();
  }
  return OkStatus();
}

Status ZeroOptimizer::Step() {
  const int rank = reducer_->group().rank();
  for (size_t b = 0; b < masters_.size(); ++b) {
    const Bucket& bucket = reducer_->buckets()[b];
    const int64_t n = masters_[b].numel();
    if (!sharded_weights_) {
      CopyRange(bucket, reducer_->params(), masters_[b], rank * n, rank * n, (rank + 1) * n, false);
    }
    // The reducer's views may have been dropped (set_to_none); the chunks are ours.
    masters_[b].set_grad(bucket.shard);
  }
  inner_->Step();
  if (!sharded_weights_) RETURN_IF_ERROR(GatherWeights());
  reducer_->ClearShards();
  return OkStatus();
}

void ZeroOptimizer::SkipStep() {
  if (reducer_->options().release_buckets) {
    reducer_->ClearShards();
    return;
  }
  for (const Bucket& bucket : reducer_->buckets()) FillInPlace(bucket.buffer, 0.0);
}

StatusOr<double> ZeroOptimizer::ClipGradNorm(double max_norm) {
  // Each shard's sum of squares into one float64 tensor on the shards' device, summed on the
  // host, then across ranks.
  const std::vector<Bucket>& buckets = reducer_->buckets();
  const Device device = buckets.front().shard.device();
  Tensor parts =
      Empty({static_cast<int64_t>(buckets.size())}, Options(DType::kFloat64).set_device(device));
  for (size_t i = 0; i < buckets.size(); ++i) {
    device::NormPowInto(buckets[i].shard, 2, parts, static_cast<int64_t>(i));
  }
  double local = 0;
  for (double part : ToVector<double>(parts)) local += part;
  Tensor sq = FromVector<double>({local}, Shape{1});
  RETURN_IF_ERROR(AllReduceHost(reducer_->group(), sq, ReduceOp::kSum, device));
  const double total = std::sqrt(sq.data<double>()[0]);
  const double coef = max_norm / (total + 1e-6);
  if (coef < 1) {
    autograd::NoGradGuard no_grad;
    for (const Bucket& bucket : reducer_->buckets()) ops::MulScalarInPlace(bucket.shard, coef);
  }
  return total;
}

StatusOr<std::vector<optim::NamedTensor>> ZeroOptimizer::StateDict() {
  ProcessGroup& group = reducer_->group();
  std::map<std::string, Tensor> out;
  std::map<std::string, Tensor> inner;
  for (auto& [key, t] : inner_->StateDict()) inner[key] = t;
  for (size_t b = 0; b < masters_.size(); ++b) {
    const Bucket& bucket = reducer_->buckets()[b];
    const std::string prefix = BucketName(b) + ".";
    for (const auto& [key, t] : inner) {
      if (key.rfind(prefix, 0) != 0) continue;
      const std::string what = key.substr(prefix.size());
      if (what == "step") {
        for (size_t k : bucket.params) {
          out[reducer_->params()[k].first + ".step"] = ConvertTo(t, t.dtype(), true);
        }
        continue;
      }
      Tensor full = Empty(Shape{bucket.padded}, t.options());
      std::shared_ptr<Work> work = group.AllGather(full, t);
      RETURN_IF_ERROR(WaitFor(group, *work));
      for (size_t i = 0; i < bucket.params.size(); ++i) {
        const optim::NamedTensor& p = reducer_->params()[bucket.params[i]];
        out[p.first + "." + what] =
            ConvertTo(ParamView(bucket, i, full, p.second.shape()), t.dtype(), true);
      }
    }
  }
  for (const auto& [key, t] : inner) {
    if (key.find('.') == std::string::npos) out[key] = t;  // hyperparameters
  }
  return std::vector<optim::NamedTensor>(out.begin(), out.end());
}

Status ZeroOptimizer::LoadStateDict(const std::vector<optim::NamedTensor>& state) {
  const int rank = reducer_->group().rank(), world = reducer_->group().size();
  std::map<std::string, Tensor> full(state.begin(), state.end());
  std::vector<optim::NamedTensor> shard;
  for (const auto& [key, t] : full) {
    if (key.find('.') == std::string::npos) shard.emplace_back(key, t);
  }
  for (size_t b = 0; b < masters_.size(); ++b) {
    const Bucket& bucket = reducer_->buckets()[b];
    const std::string& first = reducer_->params()[bucket.params.front()].first;
    // The buffer names present for the bucket's first parameter ("exp_avg", ...).
    for (const auto& [key, t] : full) {
      if (key.rfind(first + ".", 0) != 0) continue;
      const std::string what = key.substr(first.size() + 1);
      if (what.find('.') != std::string::npos) continue;  // another parameter "first.x.y"
      if (what == "step") {
        shard.emplace_back(BucketName(b) + ".step", t);
        continue;
      }
      Tensor flat = Zeros(Shape{bucket.padded}, Options(t.dtype()));
      for (size_t i = 0; i < bucket.params.size(); ++i) {
        const optim::NamedTensor& p = reducer_->params()[bucket.params[i]];
        auto it = full.find(p.first + "." + what);
        if (it == full.end() || it->second.shape() != p.second.shape()) {
          return InvalidArgumentError("optimizer state: " + p.first + "." + what +
                                      " is missing or not shaped like the parameter");
        }
        CopyInto(ParamView(bucket, i, flat, p.second.shape()), it->second);
      }
      shard.emplace_back(BucketName(b) + "." + what,
                         ConvertTo(Chunk(flat, rank, world), t.dtype(), true));
    }
  }
  return inner_->LoadStateDict(shard);
}

int64_t ZeroOptimizer::state_bytes() const {
  int64_t bytes = OptimizerStateBytes(*inner_);
  // ZeRO-1's masters are the buffers'; ZeRO-3's the weights.
  if (!reducer_->options().release_buckets || sharded_weights_) return bytes;
  for (const Tensor& m : masters_) bytes += BytesOf(m);
  return bytes;
}

}  // namespace trainyard::dist
