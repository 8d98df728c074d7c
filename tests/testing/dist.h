// Runs the ranks of a real Gloo group as threads of the test process, over loopback.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <functional>
#include <memory>
#include <thread>
#include <vector>

#include "worker/dist/process_group.h"
#include "worker/dist/store.h"

namespace trainyard::testing {

// Calls fn(rank, group) on `n` threads, each rank with its own Gloo group (10 s timeout),
// rendezvousing through a TcpStoreServer of its own; returns when every rank has returned.
inline void RunRanks(int n,
                     const std::function<void(int, std::shared_ptr<dist::ProcessGroup>)>& fn) {
  auto server = dist::TcpStoreServer::Start();
  ASSERT_TRUE(server.ok()) << server.status();
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      auto store = dist::TcpStore::Connect((*server)->address(), std::chrono::seconds(5));
      ASSERT_TRUE(store.ok()) << store.status();
      dist::ProcessGroupOptions options;
      options.timeout = std::chrono::seconds(10);
      auto group = dist::CreateProcessGroup("gloo", *store, r, n, options);
      ASSERT_TRUE(group.ok()) << group.status();
      fn(r, std::shared_ptr<dist::ProcessGroup>(std::move(*group)));
    });
  }
  for (std::thread& t : threads) t.join();
}

}  // namespace trainyard::testing
