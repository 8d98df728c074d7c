#include "worker/data/data_loader.h"

#include <algorithm>
#include <string>

namespace trainyard::data {
namespace {

// Workers re-check their condition at least this often, as a guard against a lost wakeup.
constexpr std::chrono::milliseconds kWorkerPoll{100};

}  // namespace

DataLoader::DataLoader(std::shared_ptr<const BatchSource> dataset,
                       std::shared_ptr<const Sampler> sampler, DataLoaderOptions options)
    : dataset_(std::move(dataset)), sampler_(std::move(sampler)), options_(options) {
  TY_CHECK(dataset_ != nullptr && sampler_ != nullptr) << "data loader needs a dataset and sampler";
  TY_CHECK_EQ(sampler_->dataset_size(), dataset_->size()) << "sampler and dataset sizes differ";
  TY_CHECK(options_.batch_size >= 1) << "batch size " << options_.batch_size << " must be >= 1";
  TY_CHECK(options_.num_workers >= 0) << "num_workers " << options_.num_workers << " < 0";
  TY_CHECK(options_.prefetch >= 1) << "prefetch " << options_.prefetch << " must be >= 1";
  const Status started = Reset(0, 0);
  TY_CHECK(started.ok()) << started;
}

DataLoader::~DataLoader() { StopWorkers(); }

Status DataLoader::Reset(uint64_t epoch, int64_t start_position) {
  if (start_position < 0 || start_position > sampler_->size()) {
    return InvalidArgumentError("data loader: start position " + std::to_string(start_position) +
                                " is outside the epoch's [0, " + std::to_string(sampler_->size()) +
                                "] samples; was the position saved with another dataset?");
  }
  StopWorkers();
  epoch_ = epoch;
  start_ = start_position;
  order_ = sampler_->Indices(epoch, start_position);
  const auto len = static_cast<int64_t>(order_.size());
  const int64_t bs = options_.batch_size;
  num_batches_ = options_.drop_last ? len / bs : (len + bs - 1) / bs;
  failed_ = OkStatus();
  next_ = 0;
  claimed_ = 0;
  StartWorkers();
  return OkStatus();
}

int64_t DataLoader::position() const {
  return start_ +
         std::min<int64_t>(next_ * options_.batch_size, static_cast<int64_t>(order_.size()));
}

StatusOr<Batch> DataLoader::FetchBatch(int64_t b) const {
  const int64_t begin = b * options_.batch_size;
  const int64_t end = std::min<int64_t>(begin + options_.batch_size, order_.size());
  std::vector<int64_t> indices(order_.begin() + begin, order_.begin() + end);
  StatusOr<Batch> batch = dataset_->Fetch(indices);
  if (batch.ok()) return batch;
  return batch.status().WithContext("data loader: batch " + std::to_string(b) + " of epoch " +
                                    std::to_string(epoch_) + " (sampler positions " +
                                    std::to_string(start_ + begin) + ".." +
                                    std::to_string(start_ + end - 1) + ")");
}

void DataLoader::StartWorkers() {
  const int64_t n = std::min<int64_t>(options_.num_workers, num_batches_);
  for (int64_t i = 0; i < n; ++i) workers_.emplace_back([this] { WorkerLoop(); });
}

void DataLoader::StopWorkers() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  work_cv_.notify_all();
  for (std::thread& t : workers_) t.join();
  workers_.clear();
  std::lock_guard<std::mutex> lock(mu_);
  stop_ = false;
  ready_.clear();
}

void DataLoader::WorkerLoop() {
  std::unique_lock<std::mutex> lock(mu_);
  while (true) {
    // See Note [Loader order]: claim in order, at most `prefetch` ahead of the consumer.
    const bool can_claim = claimed_ < num_batches_ && claimed_ < next_ + options_.prefetch;
    if (stop_ || claimed_ >= num_batches_) return;
    if (!can_claim) {
      work_cv_.wait_for(lock, kWorkerPoll);
      continue;
    }
    const int64_t b = claimed_++;
    lock.unlock();
    StatusOr<Batch> batch = FetchBatch(b);
    lock.lock();
    ready_.emplace(b, std::move(batch));
    ready_cv_.notify_all();
  }
}

std::optional<StatusOr<Batch>> DataLoader::WaitForBatch(std::chrono::nanoseconds timeout) {
  // Longer waits would overflow steady_clock arithmetic inside wait_for.
  timeout = std::min<std::chrono::nanoseconds>(timeout, std::chrono::hours(24 * 365));
  std::unique_lock<std::mutex> lock(mu_);
  auto it = ready_.end();
  if (!ready_cv_.wait_for(lock, timeout,
                          [&] { return (it = ready_.find(next_)) != ready_.end(); })) {
    return std::nullopt;
  }
  StatusOr<Batch> batch = std::move(it->second);
  ready_.erase(it);
  ++next_;
  lock.unlock();
  work_cv_.notify_all();
  return batch;
}

StatusOr<std::optional<Batch>> DataLoader::Next(std::chrono::nanoseconds timeout) {
  if (!failed_.ok()) return failed_;
  if (next_ >= num_batches_) return std::optional<Batch>();
  std::optional<StatusOr<Batch>> batch;
  if (workers_.empty()) {
    batch = FetchBatch(next_);
    if (batch->ok()) ++next_;
  } else {
    batch = WaitForBatch(timeout);
    if (!batch) {
      const double ms = std::chrono::duration<double, std::milli>(timeout).count();
      return DeadlineExceededError("data loader: batch " + std::to_string(next_) + " of epoch " +
                                   std::to_string(epoch_) + " was not ready within " +
                                   std::to_string(ms) + " ms; a dataset fetch may be stalled");
    }
  }
  if (!batch->ok()) {
    failed_ = batch->status();
    StopWorkers();
    return failed_;
  }
  return std::optional<Batch>(std::move(*batch).value());
}

}  // namespace trainyard::data
