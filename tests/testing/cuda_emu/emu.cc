// The scheduler of the host CUDA emulation (emu.h): blocks one after another, each thread a
// fiber (ucontext) on a stack of its own, switched only at barriers; and the device attributes
// the kernel files ask for (runtime_emu.cc has the rest of the runtime API).
#include "tests/testing/cuda_emu/emu.h"

#include <sys/mman.h>
#include <ucontext.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "tests/testing/cuda_emu/runtime_emu.h"

thread_local uint3 threadIdx;
thread_local uint3 blockIdx;
thread_local dim3 blockDim;
thread_local dim3 gridDim;

namespace ty_emu {
namespace {

// Compute capability 9.0's limits (an H100 or H200).
constexpr unsigned kMaxThreads = 1024, kMaxBlockZ = 64, kMaxGridYZ = 65535;
constexpr size_t kMaxSharedBytes = 227 * 1024;
constexpr size_t kStackBytes = 256 * 1024;  // WMMA fragments hold whole tiles here

enum class State { kReady, kAtBlockBarrier, kAtWarpBarrier, kDone };

struct Fiber {
  ucontext_t context;
  uint3 index;
  int linear = 0;
  State state = State::kReady;
};

struct Warp {
  unsigned live = 0;     // lanes that have not returned
  unsigned waiting = 0;  // lanes at the warp barrier
  unsigned mask = 0;     // the mask they wait with
  alignas(16) unsigned char offers[32][16];
};

// The block running on this OS thread.
struct Block {
  const char* kernel = nullptr;
  const std::function<void()>* body = nullptr;
  std::vector<Fiber> fibers;
  std::vector<Warp> warps;
  int live = 0;
  int at_block_barrier = 0;
  bool forward = true;  // the next pass over the fibers goes from thread 0 up
  Fiber* current = nullptr;
  ucontext_t scheduler;
  std::vector<unsigned char> shared;  // dynamic shared memory
  std::vector<void*> fresh;           // static shared variables the block has declared
};

thread_local Block* t_block = nullptr;
thread_local std::vector<void*> t_stacks;  // kept for the next launch on this thread

[[noreturn]] void Fail(const std::string& what) {
  std::fprintf(stderr, "cuda emulation: %s\n", what.c_str());
  std::fflush(stderr);
  std::abort();
}

Block& Current() {
  if (t_block == nullptr || t_block->current == nullptr)
    Fail("a device function ran outside a kernel");
  return *t_block;
}

void* Stack(size_t i) {
  while (t_stacks.size() <= i) {
    void* p = mmap(nullptr, kStackBytes, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_STACK, -1, 0);
    if (p == MAP_FAILED) Fail("cannot map a fiber's stack");
    t_stacks.push_back(p);
  }
  return t_stacks[i];
}

// Back to the scheduler; returns when the scheduler resumes this fiber.
void Yield(Block& b) {
  if (swapcontext(&b.current->context, &b.scheduler) != 0) Fail("swapcontext failed");
}

void ReleaseBlockBarrier(Block& b) {
  for (Fiber& f : b.fibers) {
    if (f.state == State::kAtBlockBarrier) f.state = State::kReady;
  }
  b.at_block_barrier = 0;
}

// Releases warp w's barrier when every live lane of its mask has arrived.
void MaybeReleaseWarp(Block& b, int w) {
  Warp& warp = b.warps[w];
  if (warp.waiting == 0 || (warp.waiting & warp.live) != (warp.mask & warp.live)) return;
  for (int lane = 0; lane < 32; ++lane) {
    if ((warp.waiting >> lane) & 1u) b.fibers[w * 32 + lane].state = State::kReady;
  }
  warp.waiting = 0;
}

void FiberMain() {
  Block& b = *t_block;
  (*b.body)();
  Fiber& f = *b.current;
  f.state = State::kDone;
  --b.live;
  b.warps[f.linear / 32].live &= ~(1u << (f.linear % 32));
  // Threads that returned no longer count at a barrier (as on a device since Volta).
  if (b.at_block_barrier > 0 && b.at_block_barrier == b.live) ReleaseBlockBarrier(b);
  MaybeReleaseWarp(b, f.linear / 32);
  setcontext(&b.scheduler);
  Fail("setcontext failed");
}

std::string Describe(const Block& b) {
  int at_block = 0, at_warp = 0;
  for (const Fiber& f : b.fibers) {
    at_block += f.state == State::kAtBlockBarrier;
    at_warp += f.state == State::kAtWarpBarrier;
  }
  return std::string(b.kernel) + ", block (" + std::to_string(blockIdx.x) + ", " +
         std::to_string(blockIdx.y) + ", " + std::to_string(blockIdx.z) +
         "): " + std::to_string(b.live) + " threads live, " + std::to_string(at_block) +
         " at __syncthreads, " + std::to_string(at_warp) + " at a warp barrier";
}

void RunBlock(Block& b) {
  const unsigned threads = blockDim.x * blockDim.y * blockDim.z;
  b.fibers.assign(threads, Fiber{});
  b.warps.assign((threads + 31) / 32, Warp{});
  b.live = static_cast<int>(threads);
  b.at_block_barrier = 0;
  b.fresh.clear();
  for (unsigned i = 0; i < threads; ++i) {
    Fiber& f = b.fibers[i];
    f.linear = static_cast<int>(i);
    f.index = {i % blockDim.x, i / blockDim.x % blockDim.y, i / (blockDim.x * blockDim.y)};
    b.warps[i / 32].live |= 1u << (i % 32);
    if (getcontext(&f.context) != 0) Fail("getcontext failed");
    f.context.uc_stack.ss_sp = Stack(i);
    f.context.uc_stack.ss_size = kStackBytes;
    f.context.uc_link = nullptr;
    makecontext(&f.context, FiberMain, 0);
  }
  while (b.live > 0) {
    bool ran = false;
    for (unsigned k = 0; k < threads; ++k) {
      Fiber& f = b.fibers[b.forward ? k : threads - 1 - k];
      if (f.state != State::kReady) continue;
      b.current = &f;
      threadIdx = f.index;
      if (swapcontext(&b.scheduler, &f.context) != 0) Fail("swapcontext failed");
      ran = true;
    }
    b.current = nullptr;
    if (!ran) Fail("a barrier cannot complete in " + Describe(b));
    b.forward = !b.forward;
  }
}

void Arrive(Block& b, State state) {
  b.current->state = state;
  Yield(b);
}

}  // namespace

void Run(const char* kernel, const LaunchConfig& config, const std::function<void()>& body) {
  const dim3 g = config.grid, k = config.block;
  // The launch as written, for messages only (not built for launches that pass quietly).
  auto where = [&] {
    return std::string(kernel) + " <<<(" + std::to_string(g.x) + ", " + std::to_string(g.y) + ", " +
           std::to_string(g.z) + "), (" + std::to_string(k.x) + ", " + std::to_string(k.y) + ", " +
           std::to_string(k.z) + "), " + std::to_string(config.shared_bytes) + ">>>";
  };
  if (t_block != nullptr) Fail(where() + ": launched from inside a kernel");
  const uint64_t threads = uint64_t{k.x} * k.y * k.z;
  if (threads == 0 || threads > kMaxThreads || k.z > kMaxBlockZ) Fail(where() + ": bad block size");
  if (g.x == 0 || g.y == 0 || g.z == 0 || g.x > 0x7fffffffu || g.y > kMaxGridYZ ||
      g.z > kMaxGridYZ) {
    Fail(where() + ": bad grid size");
  }
  if (config.shared_bytes > kMaxSharedBytes) Fail(where() + ": too much dynamic shared memory");
  static const bool trace = std::getenv("TY_CUDA_EMU_TRACE") != nullptr;
  if (trace) std::fprintf(stderr, "cuda emulation: %s\n", where().c_str());
  Block b;
  b.kernel = kernel;
  b.body = &body;
  b.shared.resize(config.shared_bytes + 128);
  t_block = &b;
  blockDim = k;
  gridDim = g;
  // Blocks start their first pass in turn from either end, and so do launches of one block.
  static thread_local unsigned launches = 0;
  unsigned parity = launches++;
  for (unsigned z = 0; z < g.z; ++z) {
    for (unsigned y = 0; y < g.y; ++y) {
      for (unsigned x = 0; x < g.x; ++x) {
        blockIdx = {x, y, z};
        // Memory no thread has written reads as NaN (0xff bytes), not as a kind zero.
        std::memset(b.shared.data(), 0xff, b.shared.size());
        b.forward = parity++ % 2 == 0;
        RunBlock(b);
      }
    }
  }
  t_block = nullptr;
}

void Launch(const char* kernel, const LaunchConfig& config, std::function<void()> body) {
  OnStream(config.stream, [=] { Run(kernel, config, body); });
}

void* DynamicShared() {
  Block& b = Current();
  const uintptr_t p = reinterpret_cast<uintptr_t>(b.shared.data());
  return reinterpret_cast<void*>((p + 127) & ~uintptr_t{127});
}

void FreshShared(void* p, size_t n) {
  Block& b = Current();
  for (void* seen : b.fresh) {
    if (seen == p) return;
  }
  b.fresh.push_back(p);
  std::memset(p, 0xff, n);
}

int Lane() { return Current().current->linear % 32; }

void SyncThreads() {
  Block& b = Current();
  if (++b.at_block_barrier == b.live) {
    ReleaseBlockBarrier(b);
    return;
  }
  Arrive(b, State::kAtBlockBarrier);
}

void SyncWarp(unsigned mask) {
  Block& b = Current();
  const int lane = b.current->linear % 32, w = b.current->linear / 32;
  Warp& warp = b.warps[w];
  if (!((mask >> lane) & 1u)) Fail(std::string(b.kernel) + ": a lane waits with a mask without it");
  if (warp.waiting != 0 && warp.mask != mask) {
    Fail(std::string(b.kernel) + ": lanes of one warp wait with different masks");
  }
  warp.mask = mask;
  warp.waiting |= 1u << lane;
  b.current->state = State::kAtWarpBarrier;
  MaybeReleaseWarp(b, w);
  if (b.current->state == State::kReady) return;
  Yield(b);
}

void Gather(unsigned mask, const void* value, size_t n, void* all) {
  Block& b = Current();
  const int lane = b.current->linear % 32, w = b.current->linear / 32;
  if (n > 16) Fail(std::string(b.kernel) + ": a shuffle of more than 16 bytes");
  std::memcpy(b.warps[w].offers[lane], value, n);
  SyncWarp(mask);
  for (int i = 0; i < 32; ++i) {
    std::memcpy(static_cast<unsigned char*>(all) + i * n, b.warps[w].offers[i], n);
  }
  SyncWarp(mask);  // no lane offers again before every lane has read
}

}  // namespace ty_emu

// ---- The device attributes the kernel files ask for (runtime_emu.cc has the rest) ----

cudaError_t cudaDeviceGetAttribute(int* value, cudaDeviceAttr attr, int device) {
  if (device < 0 || device >= ty_emu::kDevices) return cudaErrorInvalidDevice;
  switch (attr) {
    case cudaDevAttrMaxSharedMemoryPerBlockOptin:
      *value = static_cast<int>(ty_emu::kMaxSharedBytes);
      return cudaSuccess;
    case cudaDevAttrComputeCapabilityMajor:
      *value = 9;
      return cudaSuccess;
    case cudaDevAttrComputeCapabilityMinor:
      *value = 0;
      return cudaSuccess;
    default:
      return cudaErrorInvalidValue;
  }
}
