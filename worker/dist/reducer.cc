#include "worker/dist/reducer.h"

#include <deque>
#include <mutex>
#include <sstream>

#include "common/check.h"
#include "worker/autograd/grad_mode.h"
#include "worker/autograd/hooks.h"
#include "worker/ops/elementwise.h"
#include "worker/tensor/factories.h"

namespace trainyard::dist {
namespace {

using SteadyClock = std::chrono::steady_clock;

double Seconds(SteadyClock::duration d) { return std::chrono::duration<double>(d).count(); }

// A contiguous view of `numel` elements of 1-D `buffer` from `offset`, shaped `shape`.
Tensor ViewOf(const Tensor& buffer, int64_t offset, const Shape& shape) {
  return MakeView(buffer, shape, ContiguousStrides(shape), buffer.offset() + offset);
}

// `first`: the first parameter, whose device every one shares (the buckets live there).
Status CheckParam(const NamedTensor& p, const NamedTensor& first) {
  const Tensor& t = p.second;
  if (!t.defined()) return InvalidArgumentError("reducer: parameter " + p.first + " is undefined");
  if (!t.is_leaf() || !t.requires_grad()) {
    return InvalidArgumentError("reducer: parameter " + p.first +
                                " must be a leaf that requires grad");
  }
  if (!t.is_contiguous() || !IsFloating(t.dtype())) {
    return InvalidArgumentError("reducer: parameter " + p.first +
                                " must be a contiguous floating-point tensor");
  }
  if (first.second.defined() && t.device() != first.second.device()) {
    return InvalidArgumentError("reducer: parameter " + p.first + " is on " +
                                t.device().ToString() + " but " + first.first + " on " +
                                first.second.device().ToString() +
                                "; every parameter must be on one device");
  }
  return OkStatus();
}

// Every parameter in exactly one non-empty bucket, of one dtype.
Status CheckPlan(const std::vector<std::vector<size_t>>& plan,
                 const std::vector<NamedTensor>& params) {
  std::vector<int> seen(params.size(), 0);
  for (const std::vector<size_t>& bucket : plan) {
    if (bucket.empty()) return InvalidArgumentError("reducer: an empty bucket in the plan");
    for (size_t k : bucket) {
      if (k >= params.size() || seen[k]++ ||
          params[k].second.dtype() != params[bucket.front()].second.dtype()) {
        return InvalidArgumentError("reducer: the plan's parameter " + std::to_string(k) +
                                    " is out of range, in two buckets or of another dtype");
      }
    }
  }
  for (size_t k = 0; k < params.size(); ++k) {
    if (!seen[k]) {
      return InvalidArgumentError("reducer: parameter " + params[k].first +
                                  " is in no bucket of the plan");
    }
  }
  return OkStatus();
}

}  // namespace

int64_t BytesOf(const Tensor& t) {
  return t.defined() ? t.numel() * static_cast<int64_t>(ElementSize(t.dtype())) : 0;
}

std::vector<std::vector<size_t>> PlanBuckets(const std::vector<NamedTensor>& params,
                                             int64_t first_bucket_bytes, int64_t bucket_bytes) {
  std::vector<std::vector<size_t>> plan;
  int64_t filled = 0;  // bytes in plan.back()
  for (size_t k = params.size(); k-- > 0;) {
    const Tensor& t = params[k].second;
    const int64_t bytes = t.numel() * static_cast<int64_t>(ElementSize(t.dtype()));
    const int64_t cap = plan.size() == 1 ? first_bucket_bytes : bucket_bytes;
    if (plan.empty() || params[plan.back().front()].second.dtype() != t.dtype() ||
        filled + bytes > cap) {
      plan.emplace_back();
      filled = 0;
    }
    plan.back().push_back(k);
    filled += bytes;
  }
  return plan;
}

class Reducer::State {
 public:
  State(std::vector<NamedTensor> params, std::shared_ptr<ProcessGroup> group,
        ReducerOptions options)
      : params_(std::move(params)), group_(std::move(group)), options_(options) {}

  Status Init();
  void Prepare();
  Status Finish();
  void OnGradReady(size_t param);
  int64_t PeakBytes() const {
    std::lock_guard<std::mutex> lock(mu_);
    return peak_bytes_;
  }
  void ClearShards() {
    std::lock_guard<std::mutex> lock(mu_);
    accumulate_ = false;
  }
  std::shared_ptr<Work> WorkOf(size_t bucket) const {
    std::lock_guard<std::mutex> lock(mu_);
    return works_.at(bucket);
  }

  std::vector<NamedTensor> params_;
  std::shared_ptr<ProcessGroup> group_;
  ReducerOptions options_;
  std::vector<Bucket> buckets_;
  ReducerStats stats_;
  bool sync_ = true;

 private:
  struct ParamSlot {
    size_t bucket = 0;
    int64_t offset = 0;
    Tensor view;  // .grad when synchronising
  };
  void MakeBuffer(size_t bucket);  // and its parameters' views
  void InstallView(size_t param);
  void MarkReady(size_t param);
  void LaunchReadyBuckets();
  void Launch(size_t bucket);
  // release_buckets (Note [Released buckets]).
  void RetireDone();            // the completed buckets at the front of live_
  void Fold(size_t bucket);     // its reduce-scatter's output into its shard
  void Release(size_t bucket);  // drops its buffer and its parameters' gradients
  // Which parameters some rank used (an all-reduce of this rank's `used_here`).
  Status ReduceUsedBitmap(const std::vector<char>& used_here, std::vector<char>* used_anywhere);

  mutable std::mutex mu_;
  std::vector<ParamSlot> slots_;
  std::vector<char> ready_;       // per parameter, this backward
  std::vector<char> used_;        // per parameter: got a gradient in a no_sync backward this step
  std::vector<int> pending_;      // per bucket: parameters not yet ready
  std::vector<Tensor> comm_;      // per bucket: what travels (the buffer or a compressed copy)
  std::vector<Tensor> comm_out_;  // shard_gradients: the reduce-scatter output (shard or a copy)
  std::vector<std::shared_ptr<Work>> works_;
  size_t next_bucket_ = 0;   // buckets launch strictly in order
  std::deque<size_t> live_;  // release_buckets: launched, not yet folded and released
  bool accumulate_ = false;  // release_buckets: add to the shards (a later micro-batch)
  int64_t held_bytes_ = 0;   // buffers and shards now
  int64_t peak_bytes_ = 0;   // ... at most
  bool in_backward_ = false;
  bool finishing_ = false;
  Status hook_error_;
};

Status Reducer::State::Init() {
  for (const NamedTensor& p : params_) RETURN_IF_ERROR(CheckParam(p, params_.front()));
  const int world = group_->size();
  slots_.resize(params_.size());
  const std::vector<std::vector<size_t>> plan =
      options_.plan.empty()
          ? PlanBuckets(params_, options_.first_bucket_bytes, options_.bucket_bytes)
          : options_.plan;
  for (const std::vector<size_t>& members : plan) {
    Bucket b;
    b.params = members;
    for (size_t k : members) {
      b.offsets.push_back(b.numel);
      slots_[k] = ParamSlot{buckets_.size(), b.numel, Tensor()};
      b.numel += params_[k].second.numel();
    }
    b.padded = (b.numel + world - 1) / world * world;
    const Tensor& first = params_[members.front()].second;
    if (options_.shard_gradients) {
      b.shard = Zeros(Shape{b.padded / world}, first.options());
      held_bytes_ += BytesOf(b.shard);
      peak_bytes_ = held_bytes_;
    }
    buckets_.push_back(std::move(b));
    if (!options_.release_buckets) MakeBuffer(buckets_.size() - 1);
  }
  ready_.assign(params_.size(), 0);
  used_.assign(params_.size(), 0);
  pending_.assign(buckets_.size(), 0);
  comm_.resize(buckets_.size());
  comm_out_.resize(buckets_.size());
  works_.resize(buckets_.size());
  return OkStatus();
}

void Reducer::State::MakeBuffer(size_t b) {
  Bucket& bucket = buckets_[b];
  bucket.buffer = Zeros(Shape{bucket.padded}, params_[bucket.params.front()].second.options());
  held_bytes_ += BytesOf(bucket.buffer);
  peak_bytes_ = std::max(peak_bytes_, held_bytes_);
  for (size_t i = 0; i < bucket.params.size(); ++i) {
    const size_t k = bucket.params[i];
    slots_[k].view = ViewOf(bucket.buffer, bucket.offsets[i], params_[k].second.shape());
  }
}

// Points .grad at the bucket view, keeping whatever gradient the parameter already has.
void Reducer::State::InstallView(size_t k) {
  const Tensor& p = params_[k].second;
  const Tensor& view = slots_[k].view;
  Tensor g = p.grad();
  if (g.defined() && g.storage() == view.storage() && g.offset() == view.offset()) return;
  if (g.defined()) {
    CopyInto(view, g);
  } else {
    FillInPlace(view, 0.0);
  }
  p.set_grad(view);
}

void Reducer::State::Prepare() {
  std::lock_guard<std::mutex> lock(mu_);
  if (options_.release_buckets) {
    // What a failed backward left (launched or filling) is dropped; buffers are made as
    // gradients arrive.
    for (size_t b = 0; b < buckets_.size(); ++b) {
      if (buckets_[b].buffer.defined()) Release(b);
    }
    live_.clear();
  } else {
    for (size_t k = 0; k < params_.size(); ++k) InstallView(k);
  }
  if (!sync_) return;
  std::fill(ready_.begin(), ready_.end(), 0);
  for (size_t b = 0; b < buckets_.size(); ++b) {
    pending_[b] = static_cast<int>(buckets_[b].params.size());
    works_[b].reset();
  }
  next_bucket_ = 0;
  hook_error_ = OkStatus();
  // release_buckets reduces every micro-batch: the stats add up over the step's.
  if (!accumulate_) stats_ = ReducerStats();
  in_backward_ = true;
}

void Reducer::State::OnGradReady(size_t k) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!sync_) {
    used_[k] = 1;  // accumulating locally (no_sync): reduced with the step's last micro-batch
    return;
  }
  if (!in_backward_) return;
  const size_t b = slots_[k].bucket;
  // A second accumulation in one backward (a re-entrant backward, e.g. a checkpointed segment,
  // reaching a parameter also used outside it) is harmless until its bucket has left.
  if (ready_[k] && works_[b]) {
    if (hook_error_.ok()) {
      hook_error_ = FailedPreconditionError(
          "reducer: parameter " + params_[k].first +
          " received a second gradient in one backward after its bucket was already reduced");
    }
    return;
  }
  if (options_.release_buckets && !buckets_[b].buffer.defined()) {
    MakeBuffer(b);  // the bucket's other parameters then accumulate straight into it
    for (size_t other : buckets_[b].params) InstallView(other);
  }
  // A gradient that AccumulateGrad put somewhere else (set_to_none, a replaced .grad) moves in.
  InstallView(k);
  if (ready_[k]) return;
  MarkReady(k);
  LaunchReadyBuckets();
}

void Reducer::State::MarkReady(size_t k) {
  ready_[k] = 1;
  --pending_[slots_[k].bucket];
}

void Reducer::State::LaunchReadyBuckets() {
  while (next_bucket_ < buckets_.size() && pending_[next_bucket_] == 0) {
    Launch(next_bucket_);
    if (!finishing_) ++stats_.buckets_launched_in_backward;
    ++next_bucket_;
  }
}

void Reducer::State::Launch(size_t b) {
  Bucket& bucket = buckets_[b];
  // release_buckets: a bucket none of whose parameters got a gradient is reduced as zeros.
  if (!bucket.buffer.defined()) MakeBuffer(b);
  const double scale = 1.0 / group_->size();
  Tensor comm = bucket.buffer;
  ReduceOp op = ReduceOp::kAverage;
  if (options_.compression && *options_.compression != bucket.buffer.dtype()) {
    // Divide first, then round: the sum of rounded shares cannot overflow float16.
    autograd::NoGradGuard no_grad;
    comm = ConvertTo(ops::MulScalar(bucket.buffer, scale), *options_.compression, true);
    op = ReduceOp::kSum;
  }
  comm_[b] = comm;
  if (stats_.first_launch == SteadyClock::time_point{}) stats_.first_launch = SteadyClock::now();
  if (options_.shard_gradients) {
    // A later micro-batch's share (release_buckets) is added to the shard in Fold.
    comm_out_[b] = comm.dtype() == bucket.shard.dtype() && !accumulate_
                       ? bucket.shard
                       : Empty(bucket.shard.shape(), comm.options());
    works_[b] = group_->ReduceScatter(comm_out_[b], comm, op);
  } else {
    works_[b] = group_->AllReduce(comm, op);
  }
  if (options_.on_launch) options_.on_launch(b);
  if (!options_.release_buckets) return;
  live_.push_back(b);
  RetireDone();
  if (live_.size() <= kLiveBuckets) return;
  // Bounded memory: wait for the oldest (a failure is reported by Finish, which waits again).
  const size_t oldest = live_.front();
  if (WaitFor(*group_, *works_[oldest]).ok()) RetireDone();
}

void Reducer::State::RetireDone() {
  while (!live_.empty() && works_[live_.front()]->IsCompleted()) {
    const size_t b = live_.front();
    // A failed bucket is not folded: Finish reports it and the step is lost.
    if (works_[b]->Wait(std::chrono::milliseconds(0)).ok()) Fold(b);
    Release(b);
    live_.pop_front();
  }
}

void Reducer::State::Fold(size_t b) {
  Bucket& bucket = buckets_[b];
  if (comm_out_[b].storage() == bucket.shard.storage()) return;  // written in place
  autograd::NoGradGuard no_grad;
  if (accumulate_) {
    ops::AddInPlace(bucket.shard, ConvertTo(comm_out_[b], bucket.shard.dtype()));
  } else {
    CopyInto(bucket.shard, comm_out_[b]);
  }
}

void Reducer::State::Release(size_t b) {
  Bucket& bucket = buckets_[b];
  held_bytes_ -= BytesOf(bucket.buffer);
  for (size_t k : bucket.params) {
    params_[k].second.set_grad(Tensor());
    slots_[k].view = Tensor();
  }
  bucket.buffer = comm_[b] = comm_out_[b] = Tensor();
}

Status Reducer::State::ReduceUsedBitmap(const std::vector<char>& used_here,
                                        std::vector<char>* used_anywhere) {
  Tensor used = Zeros(Shape{static_cast<int64_t>(params_.size())}, Options(DType::kFloat32));
  float* u = used.data<float>();
  for (size_t k = 0; k < params_.size(); ++k) u[k] = used_here[k] ? 1.f : 0.f;
  RETURN_IF_ERROR(AllReduceHost(*group_, used, ReduceOp::kMax, params_.front().second.device()));
  used_anywhere->resize(params_.size());
  for (size_t k = 0; k < params_.size(); ++k) (*used_anywhere)[k] = u[k] > 0;
  return OkStatus();
}

// The error for parameters that got no gradient since the last synchronised step.
static Status NoGradientError(const std::vector<NamedTensor>& params,
                              const std::vector<size_t>& missing) {
  std::ostringstream names;
  for (size_t i = 0; i < missing.size() && i < 8; ++i) {
    names << (i ? ", " : "") << params[missing[i]].first;
  }
  if (missing.size() > 8) names << " and " << missing.size() - 8 << " more";
  return FailedPreconditionError(
      "reducer: " + std::to_string(missing.size()) +
      " parameter(s) received no gradient in this step: " + names.str() +
      "; set parallelism.find_unused_parameters to true if the model leaves them unused");
}

Status Reducer::State::Finish() {
  std::unique_lock<std::mutex> lock(mu_);
  if (!sync_) return OkStatus();
  if (!in_backward_) return FailedPreconditionError("reducer: Finish without Prepare");
  in_backward_ = false;
  stats_.backward_end = SteadyClock::now();
  // Parameters with no gradient in this backward: some got one in an earlier micro-batch
  // (no_sync), the others none since the last step (unused).
  std::vector<size_t> late, unused;
  for (size_t k = 0; k < params_.size(); ++k) {
    if (!ready_[k]) (used_[k] ? late : unused).push_back(k);
  }
  // Launch every bucket even on error, so that no peer waits for this rank's collectives:
  // every rank issues buckets 0..B-1 in order, then (find_unused_parameters) the bitmap.
  std::vector<char> used_here(params_.size());
  for (size_t k = 0; k < params_.size(); ++k) used_here[k] = ready_[k] || used_[k];
  finishing_ = true;
  for (size_t k : late) MarkReady(k);
  for (size_t k : unused) MarkReady(k);
  LaunchReadyBuckets();
  finishing_ = false;
  TY_CHECK(next_bucket_ == buckets_.size());
  std::fill(used_.begin(), used_.end(), 0);
  Status status = hook_error_;
  if (status.ok() && !unused.empty() && !options_.find_unused_parameters) {
    status = NoGradientError(params_, unused);
  }
  std::vector<char> used_anywhere;
  if (options_.find_unused_parameters) {
    Status s = ReduceUsedBitmap(used_here, &used_anywhere);
    if (status.ok()) status = s;
  }

  const SteadyClock::time_point wait_start = SteadyClock::now();
  for (size_t b = 0; b < buckets_.size(); ++b) {
    Status s = WaitFor(*group_, *works_[b]);
    if (status.ok()) status = s;
  }
  stats_.wait_seconds += Seconds(SteadyClock::now() - wait_start);
  RETURN_IF_ERROR(status);

  for (size_t b = 0; b < buckets_.size(); ++b) {
    Work& w = *works_[b];
    if (b == 0 && stats_.first_start == SteadyClock::time_point{}) {
      stats_.first_start = w.start_time();
    }
    stats_.last_end = std::max(stats_.last_end, w.end_time());
    stats_.comm_seconds += Seconds(w.end_time() - w.start_time());
    stats_.bytes += w.bytes();
    Bucket& bucket = buckets_[b];
    if (options_.release_buckets) continue;  // below
    if (options_.shard_gradients) {
      if (comm_out_[b].dtype() != bucket.shard.dtype()) CopyInto(bucket.shard, comm_out_[b]);
    } else if (comm_[b].dtype() != bucket.buffer.dtype()) {
      CopyInto(bucket.buffer, comm_[b]);
    }
    comm_[b] = comm_out_[b] = Tensor();
  }
  if (options_.release_buckets) {
    RetireDone();  // every bucket is done by now
    accumulate_ = true;
  }
  // NCCL's convention: an all-reduce moves 2(n-1)/n of the data per rank, a reduce-scatter
  // (n-1)/n.
  const int n = group_->size();
  const double moved = (options_.shard_gradients ? 1.0 : 2.0) * (n - 1) / n;
  if (stats_.comm_seconds > 0) {
    stats_.bus_bandwidth = static_cast<double>(stats_.bytes) * moved / stats_.comm_seconds;
  }
  for (size_t k : unused) {
    if (!used_anywhere.empty() && !used_anywhere[k]) params_[k].second.set_grad(Tensor());
  }
  return OkStatus();
}

StatusOr<std::unique_ptr<Reducer>> Reducer::Create(std::vector<NamedTensor> params,
                                                   std::shared_ptr<ProcessGroup> group,
                                                   ReducerOptions options) {
  if (!group) return InvalidArgumentError("reducer: no process group");
  if (params.empty()) return InvalidArgumentError("reducer: no parameters");
  if (options.bucket_bytes <= 0 || options.first_bucket_bytes <= 0) {
    return InvalidArgumentError("reducer: bucket sizes must be positive");
  }
  if (!options.plan.empty()) RETURN_IF_ERROR(CheckPlan(options.plan, params));
  if (options.release_buckets && !options.shard_gradients) {
    return InvalidArgumentError("reducer: release_buckets needs shard_gradients");
  }
  if (options.compression && *options.compression != DType::kBFloat16 &&
      *options.compression != DType::kFloat16) {
    return InvalidArgumentError(std::string("reducer: compression dtype ") +
                                DTypeName(*options.compression) +
                                " is not one of bfloat16, float16");
  }
  auto state = std::make_shared<State>(std::move(params), std::move(group), options);
  RETURN_IF_ERROR(state->Init());
  std::weak_ptr<State> weak = state;
  for (size_t k = 0; k < state->params_.size(); ++k) {
    autograd::RegisterPostAccumulateGradHook(state->params_[k].second, [weak, k](const Tensor&) {
      if (std::shared_ptr<State> s = weak.lock()) s->OnGradReady(k);
    });
  }
  return std::unique_ptr<Reducer>(new Reducer(std::move(state)));
}

Reducer::~Reducer() = default;
void Reducer::set_sync(bool sync) { state_->sync_ = sync || state_->options_.release_buckets; }
void Reducer::ClearShards() { state_->ClearShards(); }
bool Reducer::sync() const { return state_->sync_; }
void Reducer::Prepare() { state_->Prepare(); }
Status Reducer::Finish() { return state_->Finish(); }
const std::vector<Bucket>& Reducer::buckets() const { return state_->buckets_; }
const std::vector<NamedTensor>& Reducer::params() const { return state_->params_; }
const ReducerOptions& Reducer::options() const { return state_->options_; }
int64_t Reducer::peak_gradient_bytes() const { return state_->PeakBytes(); }
const ReducerStats& Reducer::stats() const { return state_->stats_; }
std::shared_ptr<Work> Reducer::work(size_t bucket) const { return state_->WorkOf(bucket); }
ProcessGroup& Reducer::group() const { return *state_->group_; }

Status BroadcastFromRank0(ProcessGroup& group, const std::vector<NamedTensor>& tensors) {
  std::vector<std::shared_ptr<Work>> works;
  for (const NamedTensor& t : tensors) {
    if (!t.second.is_contiguous()) {
      return InvalidArgumentError("broadcast: " + t.first + " is not contiguous");
    }
    works.push_back(group.Broadcast(t.second.detach(), 0));
  }
  for (const std::shared_ptr<Work>& w : works) RETURN_IF_ERROR(WaitFor(group, *w));
  for (const NamedTensor& t : tensors) t.second.BumpVersion();
  return OkStatus();
}

}  // namespace trainyard::dist
