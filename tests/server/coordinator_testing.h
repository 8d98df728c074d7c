// What the Coordinator class tests share.
#pragma once

#include <utility>
#include <vector>

#include "trainyard/v1/service.pb.h"

namespace trainyard::server {

// The commands but the heartbeat acknowledgements (coordinator_fencing_test.cc tests those).
inline std::vector<trainyard::v1::WorkerCommand> WithoutAcks(
    std::vector<trainyard::v1::WorkerCommand> in) {
  std::vector<trainyard::v1::WorkerCommand> out;
  for (auto& c : in) {
    if (!c.has_ack()) out.push_back(std::move(c));
  }
  return out;
}

}  // namespace trainyard::server
