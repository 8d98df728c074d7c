// GlooProcessGroup's ring reduce-scatter (Note [Gloo algorithms] in gloo_process_group.cc).
#include <cstring>
#include <vector>

#include "gloo/common/error.h"
#include "gloo/transport/unbound_buffer.h"
#include "gloo/types.h"
#include "worker/dist/gloo_internal.h"
#include "worker/dist/gloo_process_group.h"
#include "worker/dist/gloo_reduce.h"

namespace trainyard::dist {

using internal::Keep;
using internal::kReduceScatterSlotPrefix;
using internal::Mod;
using internal::ReduceFn;

void GlooProcessGroup::RingReduceScatter(void* out, const void* in, size_t chunk_elems,
                                         size_t elem_size, ReduceFn reduce, uint32_t tag,
                                         KeepAlive& keep) {
  // Note [Gloo algorithms]. in: (size() chunks of chunk_elems); out: (chunk_elems).
  const int n = size(), r = rank();
  const size_t bytes = chunk_elems * elem_size;
  const char* src = static_cast<const char*>(in);
  if (n == 1) {
    std::memcpy(out, in, bytes);
    return;
  }
  const int right = Mod(r + 1, n), left = Mod(r - 1, n);
  // Two partial sums (one in flight while the next is computed) and the receive buffer.
  char* scratch = Keep<std::vector<char>>(keep, 3 * bytes)->data();
  auto* input = KeepBuffer(keep, const_cast<void*>(in), n * bytes);
  gloo::transport::UnboundBuffer* partial[2] = {KeepBuffer(keep, scratch, bytes),
                                                KeepBuffer(keep, scratch + bytes, bytes)};
  auto* recv = KeepBuffer(keep, scratch + 2 * bytes, bytes);
  const uint64_t slot = gloo::Slot::build(kReduceScatterSlotPrefix, tag);
  const auto timeout = options_.timeout;
  for (int s = 0; s < n - 1; ++s) {
    const int recv_chunk = Mod(r - s - 2, n);
    gloo::transport::UnboundBuffer* sending = s == 0 ? input : partial[s % 2];
    recv->recv(left, slot);
    if (s == 0) {
      input->send(right, slot, Mod(r - 1, n) * bytes, bytes);
    } else {
      sending->send(right, slot);
    }
    if (!recv->waitRecv(timeout)) throw gloo::IoException("recv operation aborted");
    void* dst = s == n - 2 ? out : partial[(s + 1) % 2]->ptr;
    reduce(dst, recv->ptr, src + recv_chunk * bytes, chunk_elems);
    if (!sending->waitSend(timeout)) throw gloo::IoException("send operation aborted");
  }
}

}  // namespace trainyard::dist
