// HostStagedGroup: a process group for tensors on HostBackend's fake CUDA device
// (tests/testing/host_backend.h), over a real Gloo group, for tests of what a CUDA job does with
// its group (NCCL's part) on machines without a GPU.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <utility>
#include <vector>

#include "worker/dist/process_group.h"
#include "worker/tensor/tensor.h"

namespace trainyard::testing {

// A group for CUDA tensors over a Gloo group: each collective stages its tensors through the
// host and completes before it returns (NCCL's part in a real job).
class HostStagedGroup final : public dist::ProcessGroup {
 public:
  explicit HostStagedGroup(std::shared_ptr<dist::ProcessGroup> inner)
      : ProcessGroup(inner->rank(), inner->size()), inner_(std::move(inner)) {}
  const char* backend() const override { return "staged"; }
  void Abort(const Status& why) override { inner_->Abort(why); }
  std::chrono::milliseconds timeout() const override { return inner_->timeout(); }
  std::shared_ptr<dist::Work> AllReduce(Tensor t, dist::ReduceOp op) override {
    return Staged({t}, [&](const std::vector<Tensor>& h) { return inner_->AllReduce(h[0], op); });
  }
  std::shared_ptr<dist::Work> Broadcast(Tensor t, int root) override {
    return Staged({t}, [&](const std::vector<Tensor>& h) { return inner_->Broadcast(h[0], root); });
  }
  std::shared_ptr<dist::Work> AllGather(Tensor out, Tensor in) override {
    return Staged({out, in},
                  [&](const std::vector<Tensor>& h) { return inner_->AllGather(h[0], h[1]); });
  }
  std::shared_ptr<dist::Work> ReduceScatter(Tensor out, Tensor in, dist::ReduceOp op) override {
    return Staged({out, in}, [&](const std::vector<Tensor>& h) {
      return inner_->ReduceScatter(h[0], h[1], op);
    });
  }
  std::shared_ptr<dist::Work> Barrier() override { return inner_->Barrier(); }

 private:
  template <typename F>
  std::shared_ptr<dist::Work> Staged(const std::vector<Tensor>& tensors, const F& run) {
    std::vector<Tensor> host;
    for (const Tensor& t : tensors) {
      EXPECT_TRUE(t.device().is_cuda()) << "a collective on " << t.device().ToString();
      host.push_back(CopyToDevice(t, Device::Cpu()));
    }
    std::shared_ptr<dist::Work> work = run(host);
    const Status s = work->Wait(timeout());
    EXPECT_TRUE(s.ok()) << s;
    for (size_t i = 0; i < tensors.size(); ++i) CopyInto(tensors[i], host[i]);
    return work;
  }
  std::shared_ptr<dist::ProcessGroup> inner_;
};

}  // namespace trainyard::testing
