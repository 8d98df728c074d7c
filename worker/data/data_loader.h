// DataLoader: batches of a BatchSource in a Sampler's order, gathered by background threads.
//
// Note [Loader order]: batch b of an epoch holds sampler positions [b * B, (b + 1) * B). With
// num_workers > 0, workers claim batch numbers in increasing order and may run at most
// `prefetch` batches ahead of the consumer; finished batches wait in a slot map until Next asks
// for their number. So batches come out in the sampler's order whatever the thread count or
// the time each fetch takes, and at most `prefetch` batches are held (finished or in flight).
//
// Thread safety: one consumer thread calls Next/Reset/accessors; the workers are internal.
// Lifetime: the destructor and Reset stop the workers and wait for fetches in flight to return.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "common/status.h"
#include "worker/data/dataset.h"
#include "worker/data/sampler.h"

namespace trainyard::data {

struct DataLoaderOptions {
  int64_t batch_size = 1;
  bool drop_last = false;  // drop a final batch smaller than batch_size
  int num_workers = 0;     // background threads; 0 gathers on the caller's thread in Next
  int prefetch = 2;        // batches workers may run ahead of the consumer (>= 1)
};

class DataLoader {
 public:
  // The sampler's dataset_size() must be the dataset's size. Starts epoch 0 at position 0.
  DataLoader(std::shared_ptr<const BatchSource> dataset, std::shared_ptr<const Sampler> sampler,
             DataLoaderOptions options);
  ~DataLoader();
  DataLoader(const DataLoader&) = delete;
  DataLoader& operator=(const DataLoader&) = delete;

  // The next batch of the epoch, nullopt at its end (and on every call after, until Reset).
  // DeadlineExceeded when workers produce nothing within `timeout` (the batch stays pending; a
  // later call may return it). A dataset error comes back naming the batch and epoch, and again
  // on every call until Reset. With num_workers == 0 the gather runs here and `timeout` is not
  // applied.
  StatusOr<std::optional<Batch>> Next(std::chrono::nanoseconds timeout);

  // Starts `epoch` at sampler position `start_position` (samples, in [0, sampler size]), e.g.
  // the position() saved in a checkpoint. Stops and restarts the workers. InvalidArgument (and
  // no change) when the position is outside the epoch, as from a checkpoint of another dataset.
  Status Reset(uint64_t epoch, int64_t start_position = 0);

  uint64_t epoch() const { return epoch_; }
  // Samples of this epoch delivered so far, counting the skipped start: what Reset takes to
  // resume right after the last batch returned.
  int64_t position() const;
  // Batches in the epoch from the start position (after drop_last).
  int64_t num_batches() const { return num_batches_; }

 private:
  StatusOr<Batch> FetchBatch(int64_t b) const;
  void WorkerLoop();
  void StartWorkers();
  void StopWorkers();
  // Batch next_ once a worker finished it (then next_ advances); nullopt after `timeout`.
  std::optional<StatusOr<Batch>> WaitForBatch(std::chrono::nanoseconds timeout);

  const std::shared_ptr<const BatchSource> dataset_;
  const std::shared_ptr<const Sampler> sampler_;
  const DataLoaderOptions options_;

  // Epoch state: written only by Reset while no worker runs, read by workers.
  uint64_t epoch_ = 0;
  int64_t start_ = 0;
  std::vector<int64_t> order_;  // sampler positions [start_, size)
  int64_t num_batches_ = 0;
  Status failed_;  // sticky dataset error; consumer-only

  std::mutex mu_;
  std::condition_variable work_cv_;           // workers: room to run ahead, or stop
  std::condition_variable ready_cv_;          // consumer: batch next_ finished
  int64_t next_ = 0;                          // guarded by mu_: the batch Next returns next
  int64_t claimed_ = 0;                       // guarded by mu_: the batch the next worker takes
  bool stop_ = false;                         // guarded by mu_
  std::map<int64_t, StatusOr<Batch>> ready_;  // guarded by mu_: finished, not yet returned
  std::vector<std::thread> workers_;
};

}  // namespace trainyard::data
