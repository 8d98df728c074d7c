#include "kernels/cpu/parallel.h"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdlib>
#include <mutex>
#include <system_error>
#include <thread>
#include <vector>

#include "common/check.h"

namespace trainyard::kernels::cpu {
namespace internal {
namespace {

thread_local bool tl_in_parallel = false;

// One job at a time (callers serialize on job_mu_). Workers wait on a generation counter;
// chunks are claimed with an atomic counter, so a slow thread never holds others up.
class Pool {
 public:
  explicit Pool(int threads) { Start(threads); }
  ~Pool() { Stop(); }

  int size() const { return static_cast<int>(workers_.size()) + 1; }

  int Resize(int threads) {
    std::lock_guard<std::mutex> job_lock(job_mu_);
    Stop();
    Start(threads);
    return size();
  }

  void Run(int64_t n, int64_t grain, ChunkFn fn, const void* ctx) {
    std::lock_guard<std::mutex> job_lock(job_mu_);
    int64_t max_chunks = (n + grain - 1) / grain;
    int64_t chunks = std::min<int64_t>(max_chunks, size());
    {
      // Workers still leaving the previous job may read these fields; wait them out.
      std::unique_lock<std::mutex> lock(mu_);
      done_cv_.wait(lock, [&] { return active_ == 0; });
      fn_ = fn;
      ctx_ = ctx;
      n_ = n;
      chunks_ = chunks;
      next_.store(0);
      remaining_.store(chunks);
      ++generation_;
    }
    cv_.notify_all();
    tl_in_parallel = true;
    DoChunks();
    tl_in_parallel = false;
    std::unique_lock<std::mutex> lock(mu_);
    done_cv_.wait(lock, [&] { return remaining_.load() == 0; });
  }

 private:
  // Starts up to threads - 1 workers; fewer when the system refuses a thread (a task or
  // RLIMIT_NPROC limit), which size() then shows.
  void Start(int threads) {
    stop_ = false;
    try {
      for (int i = 1; i < threads; ++i) workers_.emplace_back([this] { WorkerLoop(); });
    } catch (const std::system_error&) {
    }
  }

  void Stop() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
      ++generation_;
    }
    cv_.notify_all();
    for (auto& t : workers_) t.join();
    workers_.clear();
  }

  void DoChunks() {
    for (;;) {
      int64_t c = next_.fetch_add(1);
      if (c >= chunks_) return;
      int64_t begin = n_ * c / chunks_;
      int64_t end = n_ * (c + 1) / chunks_;
      fn_(ctx_, begin, end);
      if (remaining_.fetch_sub(1) == 1) {
        std::lock_guard<std::mutex> lock(mu_);
        done_cv_.notify_all();
      }
    }
  }

  void WorkerLoop() {
    tl_in_parallel = true;
    uint64_t seen = 0;
    for (;;) {
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [&] { return stop_ || generation_ != seen; });
        if (stop_) return;
        seen = generation_;
        ++active_;
      }
      DoChunks();
      std::lock_guard<std::mutex> lock(mu_);
      if (--active_ == 0) done_cv_.notify_all();
    }
  }

  std::mutex job_mu_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::condition_variable done_cv_;
  std::vector<std::thread> workers_;
  bool stop_ = false;
  int active_ = 0;  // workers inside DoChunks
  uint64_t generation_ = 0;
  ChunkFn fn_ = nullptr;
  const void* ctx_ = nullptr;
  int64_t n_ = 0;
  int64_t chunks_ = 0;
  std::atomic<int64_t> next_{0};
  std::atomic<int64_t> remaining_{0};
};

int DefaultThreads() {
  if (const char* env = std::getenv("TY_NUM_THREADS")) {
    int n = std::atoi(env);
    if (n >= 1) return n;
  }
  unsigned hw = std::thread::hardware_concurrency();
  return hw == 0 ? 1 : static_cast<int>(hw);
}

std::atomic<int> g_threads{DefaultThreads()};

Pool& GetPool() {
  static Pool pool(g_threads.load());
  return pool;
}

}  // namespace

bool InParallelRegion() { return tl_in_parallel; }

void ParallelForImpl(int64_t n, int64_t grain, ChunkFn fn, const void* ctx) {
  GetPool().Run(n, std::max<int64_t>(grain, 1), fn, ctx);
}

}  // namespace internal

int GetNumThreads() { return internal::g_threads.load(std::memory_order_relaxed); }

int SetNumThreads(int n) {
  TY_CHECK(n >= 1) << "thread count " << n << " must be at least 1";
  const int started = internal::GetPool().Resize(n);
  internal::g_threads.store(started);
  return started;
}

}  // namespace trainyard::kernels::cpu
