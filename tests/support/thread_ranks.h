// Runs a body on W communicating ranks inside the test process: one thread and one Gloo
// communicator (over loopback) per rank; rank 0 serves the store on a port held from the OS until
// the ranks are done. Failures are reported per rank.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "dist/gloo_communicator.h"
#include "dist/rendezvous.h"
#include "dist/socket.h"

namespace pylon::testing {

inline void run_thread_ranks(int world, const std::function<void(Communicator&)>& body,
                             std::chrono::milliseconds timeout = std::chrono::seconds(20)) {
  const ReservedPort port;  // rank 0 binds it; no one else can meanwhile
  std::vector<std::thread> threads;
  std::vector<std::string> errors(static_cast<size_t>(world));
  for (int r = 0; r < world; ++r) {
    threads.emplace_back([&, r] {
      try {
        DistEnv env;
        env.rank = r, env.world = world, env.local_rank = r, env.local_world = world;
        env.master_port = port.port();
        auto comm = make_communicator(env, timeout);
        body(*comm);
      } catch (const std::exception& e) {
        errors[static_cast<size_t>(r)] = e.what();
      }
    });
  }
  for (auto& t : threads) t.join();
  for (int r = 0; r < world; ++r) EXPECT_EQ(errors[static_cast<size_t>(r)], "") << "rank " << r;
}

}  // namespace pylon::testing
