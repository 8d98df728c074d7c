// NCCL on the host, for tests of NcclProcessGroup where no GPU exists: the calls
// nccl_process_group.cc makes, with NCCL's documented semantics, between communicators of one
// process (a test's ranks are its threads, each on an emulated device of its own).
//
// A communicator belongs to the clique of its unique id. Non-blocking initialisation returns
// ncclInProgress, and the communicator is ready (ncclCommGetAsyncError says ncclSuccess) once
// every rank of the clique has joined. A collective is queued on the caller's stream
// (runtime_emu.h), as NCCL's kernel is, and runs there when the stream reaches it: the k-th
// collective of each rank meets the k-th of the others, and the last to arrive computes every
// rank's output (reading every input before writing any output, so in-place calls are right)
// while the others wait. Reductions accumulate in double (64-bit integers for integer types) and
// round once; ncclAvg divides the sum by the ranks (integers truncate). As NCCL does in
// non-blocking mode while it connects lazily, a communicator's first collective returns
// ncclInProgress and the communicator says so once more before it is ready again.
//
// Failures, as a program sees them from NCCL:
// - two ranks of a communicator on one device (the thread's current one when it joins) fail its
//   initialisation with ncclInvalidUsage, "Duplicate GPU detected";
// - ncclCommAbort stops this rank's collectives at once (they write nothing);
// - a rank that aborted or destroyed its communicator never contributes again, so a peer's
//   collective that waits for it fails with ncclRemoteError (as when a peer process exits);
// - ranks whose k-th collectives differ (kind, count, type, op or root) fail it with
//   ncclInvalidUsage. NCCL itself leaves most such mismatches undefined (a hang, or garbage).
// The failure is the communicator's asynchronous error from then on (ncclGetLastError says what
// happened), and the failed collective holds its stream, as NCCL's kernel does, until
// ncclCommAbort.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>
#include <nccl.h>
#include <unistd.h>

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "tests/testing/cuda_emu/runtime_emu.h"

namespace {

enum class Kind { kAllReduce, kBroadcast, kAllGather, kReduceScatter };

const char* KindName(Kind k) {
  switch (k) {
    case Kind::kAllReduce:
      return "ncclAllReduce";
    case Kind::kBroadcast:
      return "ncclBroadcast";
    case Kind::kAllGather:
      return "ncclAllGather";
    case Kind::kReduceScatter:
      return "ncclReduceScatter";
  }
  return "?";
}

// One rank's call. count is per rank as NCCL's: all_gather's send count and reduce_scatter's
// receive count.
struct Part {
  Kind kind;
  const void* send;
  void* recv;
  size_t count;
  ncclDataType_t type;
  ncclRedOp_t op;
  int root;
};

std::string Describe(const Part& p) {
  std::string s = std::string(KindName(p.kind)) + " of " + std::to_string(p.count) +
                  " elements of type " + std::to_string(p.type);
  if (p.kind == Kind::kAllReduce || p.kind == Kind::kReduceScatter) {
    s += ", op " + std::to_string(p.op);
  }
  if (p.kind == Kind::kBroadcast) s += ", root " + std::to_string(p.root);
  return s;
}

bool Same(const Part& a, const Part& b) {
  return a.kind == b.kind && a.count == b.count && a.type == b.type && a.op == b.op &&
         a.root == b.root;
}

// The k-th collective of a clique's ranks.
struct Round {
  std::vector<std::optional<Part>> parts;  // by rank, once arrived
  int left = 0;                            // ranks that have arrived and returned
  bool done = false;
  ncclResult_t error = ncclSuccess;
  std::string why;
};

struct Clique {
  int nranks = 0;
  int joined_count = 0;
  std::vector<int> devices;  // each rank's device once it has joined; -1 before
  std::string duplicate;     // set when two ranks share a device, which NCCL refuses
  std::vector<bool> gone;    // aborted or destroyed: never contributes again
  std::map<uint64_t, Round> rounds;
};

struct CommState {
  std::shared_ptr<Clique> clique;
  int rank = 0;
  bool blocking = true;
  bool connected = false;   // every rank has joined
  bool connecting = false;  // the first collective is being "connected" (ncclInProgress once)
  bool finalizing = false;
  bool aborted = false;  // aborted or destroyed
  uint64_t issued = 0;   // collectives queued
  int pending = 0;       // of those, not yet returned on their stream
  ncclResult_t error = ncclSuccess;
  std::string message;
};

}  // namespace

// What ncclComm_t points to; collectives queued on streams hold the state itself.
struct ncclComm {
  std::shared_ptr<CommState> state;
};

namespace {

// All of the host NCCL's state, under one lock (never destroyed: stream threads may outlive
// main).
std::mutex& Mu() {
  static auto* mu = new std::mutex;
  return *mu;
}
std::condition_variable& Cv() {
  static auto* cv = new std::condition_variable;
  return *cv;
}
std::map<std::string, std::weak_ptr<Clique>>& Cliques() {
  static auto* cliques = new std::map<std::string, std::weak_ptr<Clique>>;
  return *cliques;
}

thread_local std::string t_last_error;

ncclResult_t Fail(ncclResult_t r, const std::string& why) {
  t_last_error = why;
  return r;
}

size_t TypeSize(ncclDataType_t t) {
  switch (t) {
    case ncclInt8:
    case ncclUint8:
      return 1;
    case ncclFloat16:
    case ncclBfloat16:
      return 2;
    case ncclInt32:
    case ncclUint32:
    case ncclFloat32:
      return 4;
    case ncclInt64:
    case ncclUint64:
    case ncclFloat64:
      return 8;
    default:
      return 0;  // fp8: not emulated
  }
}

// ---- Reductions ----

template <typename T>
double ToDouble(T v) {
  if constexpr (std::is_same_v<T, __half>) {
    return __half2float(v);
  } else if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    return __bfloat162float(v);
  } else {
    return static_cast<double>(v);
  }
}

template <typename T>
T FromDouble(double v) {
  if constexpr (std::is_same_v<T, __half>) {
    return __float2half_rn(static_cast<float>(v));
  } else if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    return __float2bfloat16_rn(static_cast<float>(v));
  } else {
    return static_cast<T>(v);
  }
}

// out[i] = op over ranks of src[r][i], for i < count.
template <typename T>
void ReduceAs(const std::vector<const void*>& src, size_t count, ncclRedOp_t op, void* out) {
  constexpr bool kInt = std::is_integral_v<T>;
  using Acc =
      std::conditional_t<kInt, std::conditional_t<std::is_signed_v<T>, int64_t, uint64_t>, double>;
  const int n = static_cast<int>(src.size());
  for (size_t i = 0; i < count; ++i) {
    auto at = [&](int r) {
      T v;
      std::memcpy(&v, static_cast<const char*>(src[r]) + i * sizeof(T), sizeof(T));
      if constexpr (kInt) {
        return static_cast<Acc>(v);
      } else {
        return ToDouble(v);
      }
    };
    Acc acc = at(0);
    for (int r = 1; r < n; ++r) {
      const Acc v = at(r);
      switch (op) {
        case ncclProd:
          acc *= v;
          break;
        case ncclMax:
          acc = v > acc ? v : acc;
          break;
        case ncclMin:
          acc = v < acc ? v : acc;
          break;
        default:  // ncclSum, ncclAvg
          acc += v;
      }
    }
    if (op == ncclAvg) acc /= n;
    T v;
    if constexpr (kInt) {
      v = static_cast<T>(acc);
    } else {
      v = FromDouble<T>(acc);
    }
    std::memcpy(static_cast<char*>(out) + i * sizeof(T), &v, sizeof(T));
  }
}

void Reduce(ncclDataType_t t, const std::vector<const void*>& src, size_t count, ncclRedOp_t op,
            void* out) {
  switch (t) {
    case ncclInt8:
      return ReduceAs<int8_t>(src, count, op, out);
    case ncclUint8:
      return ReduceAs<uint8_t>(src, count, op, out);
    case ncclInt32:
      return ReduceAs<int32_t>(src, count, op, out);
    case ncclUint32:
      return ReduceAs<uint32_t>(src, count, op, out);
    case ncclInt64:
      return ReduceAs<int64_t>(src, count, op, out);
    case ncclUint64:
      return ReduceAs<uint64_t>(src, count, op, out);
    case ncclFloat16:
      return ReduceAs<__half>(src, count, op, out);
    case ncclBfloat16:
      return ReduceAs<__nv_bfloat16>(src, count, op, out);
    case ncclFloat32:
      return ReduceAs<float>(src, count, op, out);
    case ncclFloat64:
      return ReduceAs<double>(src, count, op, out);
    default:
      return;  // refused when queued
  }
}

// Every rank's output of a round whose ranks have all arrived: computed from every input
// first, then written. all_reduce, broadcast and all_gather give every rank the same output.
void Compute(Round& round) {
  const int n = static_cast<int>(round.parts.size());
  const Part& p = *round.parts[0];
  const size_t bytes = p.count * TypeSize(p.type);
  std::vector<const void*> sends(n);
  for (int r = 0; r < n; ++r) sends[r] = round.parts[r]->send;
  std::vector<std::vector<char>> out(p.kind == Kind::kReduceScatter ? n : 1);
  switch (p.kind) {
    case Kind::kAllReduce:
      out[0].resize(bytes);
      Reduce(p.type, sends, p.count, p.op, out[0].data());
      break;
    case Kind::kBroadcast: {
      const char* root = static_cast<const char*>(sends[p.root]);
      out[0].assign(root, root + bytes);
      break;
    }
    case Kind::kAllGather:
      out[0].resize(bytes * n);
      for (int r = 0; r < n; ++r) std::memcpy(out[0].data() + r * bytes, sends[r], bytes);
      break;
    case Kind::kReduceScatter:
      for (int r = 0; r < n; ++r) {
        std::vector<const void*> chunks(n);
        for (int k = 0; k < n; ++k) chunks[k] = static_cast<const char*>(sends[k]) + r * bytes;
        out[r].resize(bytes);
        Reduce(p.type, chunks, p.count, p.op, out[r].data());
      }
      break;
  }
  for (int r = 0; r < n; ++r) {
    const std::vector<char>& o = out[out.size() == 1 ? 0 : r];
    if (!o.empty()) std::memcpy(round.parts[r]->recv, o.data(), o.size());
  }
}

// This rank's part of its collective `seq`, run on its stream.
void Participate(const std::shared_ptr<CommState>& st, uint64_t seq, const Part& part) {
  std::unique_lock<std::mutex> lock(Mu());
  Clique& c = *st->clique;
  const int n = c.nranks;
  if (!st->aborted) {
    Round& round = c.rounds[seq];
    if (round.parts.empty()) round.parts.resize(n);
    round.parts[st->rank] = part;
    int arrived = 0;
    for (int r = 0; r < n; ++r) {
      if (!round.parts[r]) continue;
      ++arrived;
      if (!round.done && !Same(*round.parts[r], part)) {
        round.done = true;
        round.error = ncclInvalidUsage;
        round.why = "collective #" + std::to_string(seq) + " differs between ranks: rank " +
                    std::to_string(r) + " called " + Describe(*round.parts[r]) + ", rank " +
                    std::to_string(st->rank) + " " + Describe(part);
      }
    }
    if (!round.done && arrived == n) {
      Compute(round);
      round.done = true;
    }
    Cv().notify_all();
    int missing = -1;  // a rank that left without joining this round
    Cv().wait(lock, [&] {
      for (int r = 0; r < n && missing < 0; ++r) {
        if (!round.parts[r] && c.gone[r]) missing = r;
      }
      return round.done || st->aborted || missing >= 0;
    });
    if (!st->aborted && st->error == ncclSuccess) {
      if (round.done && round.error != ncclSuccess) {
        st->error = round.error;
        st->message = round.why;
      } else if (!round.done) {
        st->error = ncclRemoteError;
        st->message = "rank " + std::to_string(missing) +
                      " aborted or destroyed its communicator before joining collective #" +
                      std::to_string(seq);
      }
    }
    const bool failed = !round.done || round.error != ncclSuccess;
    if (++round.left == n) c.rounds.erase(seq);
    // A failed collective's kernel spins, as NCCL's does, until the communicator is aborted.
    if (failed) Cv().wait(lock, [&] { return st->aborted; });
  }
  --st->pending;
  Cv().notify_all();
}

ncclResult_t Queue(const Part& part, ncclComm_t comm, cudaStream_t stream) {
  const std::string what = KindName(part.kind);
  if (comm == nullptr) return Fail(ncclInvalidArgument, what + ": the communicator is null");
  if (TypeSize(part.type) == 0) {
    return Fail(ncclInvalidArgument,
                what + ": data type " + std::to_string(part.type) + " is not emulated");
  }
  if (part.op < ncclSum || part.op > ncclAvg) {
    return Fail(ncclInvalidArgument, what + ": op " + std::to_string(part.op) + " is not emulated");
  }
  if (part.count > 0 && (part.send == nullptr || part.recv == nullptr)) {
    return Fail(ncclInvalidArgument, what + ": a null buffer");
  }
  std::shared_ptr<CommState> st;
  uint64_t seq = 0;
  {
    std::lock_guard<std::mutex> lock(Mu());
    CommState* s = comm->state.get();
    if (s->error != ncclSuccess) return Fail(s->error, s->message);
    if (!s->connected) {
      return Fail(ncclInvalidUsage, what + ": the communicator is still being initialised");
    }
    if (part.root < 0 || part.root >= s->clique->nranks) {
      return Fail(ncclInvalidArgument, what + ": root " + std::to_string(part.root) +
                                           " is not a rank of " +
                                           std::to_string(s->clique->nranks));
    }
    seq = ++s->issued;
    ++s->pending;
    if (seq == 1 && !s->blocking) s->connecting = true;
    st = comm->state;
  }
  ty_emu::OnStream(stream, [st, seq, part] { Participate(st, seq, part); });
  return seq == 1 && !st->blocking ? ncclInProgress : ncclSuccess;
}

// Marks the rank gone and stops its collectives.
void Leave(ncclComm_t comm) {
  {
    std::lock_guard<std::mutex> lock(Mu());
    CommState* s = comm->state.get();
    s->aborted = true;
    s->clique->gone[s->rank] = true;
  }
  Cv().notify_all();
  delete comm;
}

}  // namespace

const char* ncclGetErrorString(ncclResult_t r) {
  switch (r) {
    case ncclSuccess:
      return "no error";
    case ncclUnhandledCudaError:
      return "unhandled cuda error (run with NCCL_DEBUG=INFO for details)";
    case ncclSystemError:
      return "unhandled system error (run with NCCL_DEBUG=INFO for details)";
    case ncclInternalError:
      return "internal error - please report this issue to the NCCL developers";
    case ncclInvalidArgument:
      return "invalid argument (run with NCCL_DEBUG=WARN for details)";
    case ncclInvalidUsage:
      return "invalid usage (run with NCCL_DEBUG=WARN for details)";
    case ncclRemoteError:
      return "remote process exited or there was a network error";
    case ncclInProgress:
      return "NCCL operation in progress";
    default:
      return "unknown result code";
  }
}

const char* ncclGetLastError(ncclComm_t comm) {
  if (comm != nullptr) {
    std::lock_guard<std::mutex> lock(Mu());
    if (!comm->state->message.empty()) t_last_error = comm->state->message;
  }
  return t_last_error.c_str();
}

ncclResult_t ncclGetUniqueId(ncclUniqueId* id) {
  static std::atomic<uint64_t> next{1};
  std::memset(id, 0, sizeof(*id));
  const std::string text = "emulated " + std::to_string(::getpid()) + " " + std::to_string(next++);
  std::memcpy(id->internal, text.data(), std::min(text.size(), sizeof(id->internal)));
  return ncclSuccess;
}

ncclResult_t ncclCommInitRankConfig(ncclComm_t* comm, int nranks, ncclUniqueId id, int rank,
                                    ncclConfig_t* config) {
  *comm = nullptr;
  if (nranks < 1 || rank < 0 || rank >= nranks) {
    return Fail(ncclInvalidArgument, "ncclCommInitRankConfig: rank " + std::to_string(rank) +
                                         " of " + std::to_string(nranks));
  }
  const bool blocking = config == nullptr || config->blocking != 0;
  auto st = std::make_shared<CommState>();
  {
    std::lock_guard<std::mutex> lock(Mu());
    std::weak_ptr<Clique>& entry = Cliques()[std::string(id.internal, sizeof(id.internal))];
    std::shared_ptr<Clique> c = entry.lock();
    if (c == nullptr) {
      c = std::make_shared<Clique>();
      c->nranks = nranks;
      c->devices.assign(nranks, -1);
      c->gone.assign(nranks, false);
      entry = c;
    }
    if (c->nranks != nranks) {
      return Fail(ncclInvalidUsage, "ncclCommInitRankConfig: rank " + std::to_string(rank) +
                                        " says " + std::to_string(nranks) + " ranks, its peers " +
                                        std::to_string(c->nranks));
    }
    if (c->devices[rank] >= 0) {
      return Fail(ncclInvalidUsage,
                  "ncclCommInitRankConfig: rank " + std::to_string(rank) + " joined twice");
    }
    int device = 0;
    cudaGetDevice(&device);
    for (int r = 0; r < nranks && c->duplicate.empty(); ++r) {
      if (c->devices[r] == device) {
        c->duplicate = "Duplicate GPU detected : rank " + std::to_string(rank) + " and rank " +
                       std::to_string(r) + " both on CUDA device " + std::to_string(device);
      }
    }
    c->devices[rank] = device;
    ++c->joined_count;
    st->clique = c;
    st->rank = rank;
    st->blocking = blocking;
  }
  Cv().notify_all();
  *comm = new ncclComm{st};
  if (!blocking) return ncclInProgress;
  std::unique_lock<std::mutex> lock(Mu());
  Cv().wait(lock, [&] { return st->clique->joined_count == nranks; });
  if (!st->clique->duplicate.empty()) return Fail(ncclInvalidUsage, st->clique->duplicate);
  st->connected = true;
  return ncclSuccess;
}

ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t* state) {
  if (comm == nullptr) return Fail(ncclInvalidArgument, "ncclCommGetAsyncError: null");
  std::lock_guard<std::mutex> lock(Mu());
  CommState* s = comm->state.get();
  if (s->error != ncclSuccess) {
    *state = s->error;
  } else if (!s->connected && s->clique->joined_count < s->clique->nranks) {
    *state = ncclInProgress;
  } else if (!s->connected && !s->clique->duplicate.empty()) {
    *state = s->error = ncclInvalidUsage;
    s->message = s->clique->duplicate;
  } else if (!s->connected) {
    s->connected = true;
    *state = ncclSuccess;
  } else if (s->connecting) {
    s->connecting = false;
    *state = ncclInProgress;
  } else if (s->finalizing && s->pending > 0) {
    *state = ncclInProgress;
  } else {
    *state = ncclSuccess;
  }
  return ncclSuccess;
}

ncclResult_t ncclCommFinalize(ncclComm_t comm) {
  if (comm == nullptr) return Fail(ncclInvalidArgument, "ncclCommFinalize: null");
  std::unique_lock<std::mutex> lock(Mu());
  CommState* s = comm->state.get();
  s->finalizing = true;
  if (!s->blocking) return s->pending > 0 ? ncclInProgress : ncclSuccess;
  Cv().wait(lock, [s] { return s->pending == 0; });
  return ncclSuccess;
}

ncclResult_t ncclCommDestroy(ncclComm_t comm) {
  if (comm == nullptr) return Fail(ncclInvalidArgument, "ncclCommDestroy: null");
  Leave(comm);
  return ncclSuccess;
}

ncclResult_t ncclCommAbort(ncclComm_t comm) {
  if (comm == nullptr) return ncclSuccess;
  Leave(comm);
  return ncclSuccess;
}

ncclResult_t ncclAllReduce(const void* send, void* recv, size_t count, ncclDataType_t type,
                           ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream) {
  return Queue({Kind::kAllReduce, send, recv, count, type, op, 0}, comm, stream);
}

ncclResult_t ncclBroadcast(const void* send, void* recv, size_t count, ncclDataType_t type,
                           int root, ncclComm_t comm, cudaStream_t stream) {
  return Queue({Kind::kBroadcast, send, recv, count, type, ncclSum, root}, comm, stream);
}

ncclResult_t ncclAllGather(const void* send, void* recv, size_t count, ncclDataType_t type,
                           ncclComm_t comm, cudaStream_t stream) {
  return Queue({Kind::kAllGather, send, recv, count, type, ncclSum, 0}, comm, stream);
}

ncclResult_t ncclReduceScatter(const void* send, void* recv, size_t count, ncclDataType_t type,
                               ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream) {
  return Queue({Kind::kReduceScatter, send, recv, count, type, op, 0}, comm, stream);
}
