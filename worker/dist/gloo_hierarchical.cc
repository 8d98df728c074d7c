// GlooProcessGroup's hierarchical all-reduce (gloo_process_group.h).
//
// Note [Hierarchical all-reduce]
// With L ranks on each of H hosts (H >= 2, L >= 2, the same L everywhere; PlanSharedMemory), the
// all-reduce runs in three steps, as NCCL's does across nodes:
//   1. inside each host, over its segment, local rank l sums slice l of the tensor (1/L of it)
//      over the host's ranks (ShmComm::ReduceSlices);
//   2. across hosts, the H ranks with local rank l all-reduce slice l with Gloo's ring over their
//      own TCP mesh (the "cross" context): L rings side by side, each carrying 1/L of the tensor;
//   3. inside each host, every rank copies every other rank's slice (ShmComm::GatherSlices).
// Each link between hosts carries 2(H-1)/H of a slice per rank, so a host sends 2(H-1)/H of the
// tensor in all, where the flat ring over H*L ranks sends L times that through the host's link
// (every rank of it is on the ring). Step 2's ring gives every member the same bits, and step 1
// sums in local rank order, so all ranks hold the same result. A failure in step 2 is Gloo's,
// named by Translate with the cross ring's neighbours; one in steps 1 and 3 is the segment's.
#include "gloo/allreduce.h"
#include "worker/dist/gloo_internal.h"

namespace trainyard::dist {

void GlooProcessGroup::HierarchicalAllReduce(void* data, size_t elems, size_t elem_size,
                                             internal::ReduceFn reduce, uint32_t tag,
                                             KeepAlive& keep) {
  internal::ThrowIfFailed(shm_->ReduceSlices(data, elems, elem_size, reduce));
  const auto [first, last] = shm_->SliceOf(elems, elem_size, shm_->local_rank());
  if (last > first) {
    char* slice = static_cast<char*>(data) + first * elem_size;
    auto opts = internal::Keep<gloo::AllreduceOptions>(keep, cross_);
    opts->setAlgorithm(gloo::AllreduceOptions::Algorithm::RING);
    opts->setTag(tag);
    opts->setTimeout(options_.timeout);
    opts->setReduceFunction(reduce);
    const size_t n = last - first;
    if (elem_size == 8) {
      opts->setOutput(reinterpret_cast<int64_t*>(slice), n);
    } else if (elem_size == 4) {
      opts->setOutput(reinterpret_cast<int32_t*>(slice), n);
    } else {
      opts->setOutput(reinterpret_cast<int16_t*>(slice), n);
    }
    gloo::allreduce(*opts);
  }
  internal::ThrowIfFailed(shm_->GatherSlices(data, elems, elem_size));
}

}  // namespace trainyard::dist
