// GrpcStore: dist::Store over the coordinator's rendezvous (the Worker service's Store* calls),
// scoped to one job attempt and carrying its secret. What ranks under a worker daemon
// rendezvous through, Gloo and NCCL alike: nothing but the coordinator is needed on the network.
#pragma once

#include <grpcpp/grpcpp.h>

#include <memory>
#include <string>

#include "trainyard/v1/service.grpc.pb.h"
#include "worker/dist/store.h"

namespace trainyard::daemon {

struct StoreScope {
  std::string job_id;
  int attempt = 0;
  std::string secret;
};

// `token` is sent as a bearer token when not empty. Thread-safe.
std::shared_ptr<dist::Store> NewGrpcStore(std::shared_ptr<grpc::Channel> channel, StoreScope scope,
                                          std::string token);

}  // namespace trainyard::daemon
