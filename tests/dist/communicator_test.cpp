// Gloo communicator contracts with ranks as threads over loopback: every collective against its
// definition at world sizes 1..4 (sizes not divisible by the world included), identical bits on
// every rank, the rendezvous store, and a hung or vanished peer turning into a clear, timely error.
#include <gtest/gtest.h>

#include <netinet/in.h>
#include <sys/socket.h>

#include <cerrno>
#include <chrono>
#include <cmath>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "core/error.h"
#include "dist/gloo_communicator.h"
#include "dist/rendezvous.h"
#include "dist/socket.h"
#include "support/thread_ranks.h"

namespace pylon {
namespace {

using std::chrono::milliseconds;

void run_ranks(int world, milliseconds timeout, const std::function<void(Communicator&)>& body) {
  testing::run_thread_ranks(world, body, timeout);
}

// A value only rank r and index i produce, exact in fp32 sums of a few terms.
float value(int r, size_t i) { return static_cast<float>(r * 1000 + static_cast<int>(i % 997)) * 0.25f; }

class Collectives : public ::testing::TestWithParam<int> {};

TEST_P(Collectives, MatchTheirDefinitions) {
  const int W = GetParam();
  run_ranks(W, milliseconds(20000), [&](Communicator& c) {
    ASSERT_EQ(c.world(), W);
    const int r = c.rank();
    for (size_t n : {size_t{1}, size_t{7}, size_t{1000}}) {
      std::vector<float> shard(n), full(n * W, NAN);
      for (size_t i = 0; i < n; ++i) shard[i] = value(r, i);
      c.all_gather(shard.data(), full.data(), n);
      for (int q = 0; q < W; ++q)
        for (size_t i = 0; i < n; ++i) ASSERT_EQ(full[q * n + i], value(q, i)) << q << " " << i;

      std::vector<float> in(n * W), out(n, NAN);
      for (size_t i = 0; i < in.size(); ++i) in[i] = value(r, i);
      const std::vector<float> in_copy = in;
      c.reduce_scatter_sum(in.data(), out.data(), n);
      EXPECT_EQ(in, in_copy) << "input modified";
      for (size_t i = 0; i < n; ++i) {
        float want = 0;
        for (int q = 0; q < W; ++q) want += value(q, r * n + i);
        ASSERT_EQ(out[i], want) << "reduce-scatter element " << i;
      }
    }
    std::vector<double> d{1.0 * r, 0.5, -2.0 * r};
    c.all_reduce_sum(d.data(), d.size());
    EXPECT_EQ(d[0], W * (W - 1) / 2.0);
    EXPECT_EQ(d[1], 0.5 * W);
    std::vector<float> f{static_cast<float>(r + 1)};
    c.all_reduce_sum(f.data(), 1);
    EXPECT_EQ(f[0], static_cast<float>(W * (W + 1) / 2));
    std::string msg = r == W - 1 ? "from the last rank" : std::string(18, '?');
    c.broadcast(msg.data(), msg.size(), W - 1);
    EXPECT_EQ(msg, "from the last rank");
    c.barrier();
  });
}

INSTANTIATE_TEST_SUITE_P(World, Collectives, ::testing::Values(1, 2, 3, 4));

// Sums of values that round differently in each order: every rank must still get the same bits.
TEST(Collectives, ReductionsGiveEveryRankTheSameBits) {
  const int W = 3;
  std::vector<std::vector<float>> got(W);
  std::mutex m;
  run_ranks(W, milliseconds(20000), [&](Communicator& c) {
    std::vector<float> v(64);
    for (size_t i = 0; i < v.size(); ++i) v[i] = 1.0f / static_cast<float>(3 + i + 7 * c.rank());
    c.all_reduce_sum(v.data(), v.size());
    std::lock_guard<std::mutex> lock(m);
    got[static_cast<size_t>(c.rank())] = v;
  });
  EXPECT_EQ(got[0], got[1]);
  EXPECT_EQ(got[0], got[2]);
}

TEST(Communicator, HungPeerTimesOutWithAClearMessage) {
  const ReservedPort reserved;  // held until rank 0 (below) has bound it and beyond
  const int port = reserved.port();
  std::string error;
  double waited = 0;
  std::thread hung([&] {
    DistEnv env;
    env.rank = 1, env.world = 2, env.local_rank = 1, env.local_world = 2, env.master_port = port;
    auto comm = make_communicator(env, milliseconds(500));
    std::this_thread::sleep_for(milliseconds(6000));  // never joins the collective in time
  });
  {
    DistEnv env;
    env.world = 2, env.local_world = 2, env.master_port = port;
    auto comm = make_communicator(env, milliseconds(500));
    std::vector<float> x(4, 1.f), y(8);
    const auto t0 = std::chrono::steady_clock::now();
    try {
      comm->all_gather(x.data(), y.data(), 4);
    } catch (const Error& e) {
      error = e.what();
    }
    waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    EXPECT_THROW(comm->barrier(), Error);  // a broken communicator refuses further work
  }
  hung.join();
  EXPECT_EQ(error, "rank 0: collective all_gather timed out after 0.5 s (rank 1 never reached it: hung or stopped)");
  EXPECT_LT(waited, 4.0);  // the 0.5 s timeout, not the peer's 6 s (slack for a loaded machine)
}

TEST(Communicator, VanishedPeerFailsFast) {
  const ReservedPort reserved;
  const int port = reserved.port();
  std::string error;
  double waited = 0;
  std::thread leaver([&] {
    DistEnv env;
    env.rank = 1, env.world = 2, env.local_rank = 1, env.local_world = 2, env.master_port = port;
    auto comm = make_communicator(env, milliseconds(30000));
    comm->barrier();
  });  // destroys its communicator: the connection closes
  {
    DistEnv env;
    env.world = 2, env.local_world = 2, env.master_port = port;
    auto comm = make_communicator(env, milliseconds(30000));
    comm->barrier();
    leaver.join();
    std::vector<float> x(4, 1.f), y(4);
    const auto t0 = std::chrono::steady_clock::now();
    try {
      comm->reduce_scatter_sum(y.data(), x.data(), 2);
    } catch (const Error& e) {
      error = e.what();
    }
    waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
  EXPECT_NE(error.find("rank 0: collective reduce_scatter failed"), std::string::npos) << error;
  EXPECT_LT(waited, 15.0);  // well inside the 30 s timeout: the closed connection, not the clock
}

TEST(Rendezvous, MissingRankTimesOutNamingTheKey) {
  const ReservedPort port;
  TcpStore store("127.0.0.1", port.port(), true, milliseconds(300), "rank 0");
  store.set("a", {'x'});
  EXPECT_EQ(store.get("a"), std::vector<char>{'x'});
  try {
    store.wait({"a", "b"});
    FAIL() << "no timeout";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("timed out after 0.3 s waiting for 'b'"), std::string::npos)
        << e.what();
  }
}

TEST(Rendezvous, ClientWithoutServerGivesUp) {
  const ReservedPort port;  // held, so nobody listens there
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_THROW(TcpStore("127.0.0.1", port.port(), false, milliseconds(300), "rank 1"), Error);
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 10.0);  // 0.3 s + slack
}

// What the launcher and the tests rely on to hand a port to the process that binds it later: a
// held port is kept from binds without SO_REUSEADDR and from the OS's own choices, while rank 0's
// listen_tcp (SO_REUSEADDR) binds it; once that listens, a second listener is refused.
TEST(Rendezvous, ReservedPortIsKeptForTheListenerThatBindsItLater) {
  const ReservedPort reserved;
  const int port = reserved.port();
  ASSERT_GT(port, 0);
  const auto bind_plain = [](int p) {  // a socket without SO_REUSEADDR on 127.0.0.1:p; its port
    Fd fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = htons(static_cast<uint16_t>(p));
    if (::bind(fd.get(), reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) return std::make_pair(Fd(), errno);
    return std::make_pair(std::move(fd), 0);
  };
  EXPECT_EQ(bind_plain(port).second, EADDRINUSE);
  std::vector<Fd> others;  // the OS's choices while the port is held: never it
  for (int i = 0; i < 200; ++i) {
    others.push_back(listen_tcp("127.0.0.1", 0, "another server"));
    ASSERT_NE(local_port(others.back().get()), port);
  }
  others.clear();
  TcpStore store("127.0.0.1", port, true, milliseconds(2000), "rank 0");  // binds the held port
  store.set("k", {'v'});
  TcpStore client("127.0.0.1", port, false, milliseconds(2000), "rank 1");
  EXPECT_EQ(client.get("k"), std::vector<char>{'v'});
  EXPECT_THROW(listen_tcp("127.0.0.1", port, "a second server"), Error);
}

TEST(Rendezvous, EnvironmentVariables) {
  struct Env {  // sets variables for one test and restores the environment after
    std::vector<std::string> names;
    void set(const std::string& k, const std::string& v) {
      setenv(k.c_str(), v.c_str(), 1);
      names.push_back(k);
    }
    ~Env() {
      for (const auto& k : names) unsetenv(k.c_str());
    }
  };
  for (const char* k : {"RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR",
                        "MASTER_PORT", "OMPI_COMM_WORLD_RANK", "SLURM_PROCID"})
    ASSERT_EQ(std::getenv(k), nullptr) << k << " is set in the test environment";
  EXPECT_EQ(dist_env_from_environment().world, 1);
  {
    Env e;
    e.set("RANK", "2"), e.set("WORLD_SIZE", "4"), e.set("LOCAL_RANK", "2"), e.set("LOCAL_WORLD_SIZE", "4");
    const DistEnv d = dist_env_from_environment();
    EXPECT_EQ(d.rank, 2);
    EXPECT_EQ(d.world, 4);
    EXPECT_TRUE(d.one_node);
    EXPECT_EQ(d.master_addr, "127.0.0.1");
    EXPECT_EQ(d.master_port, kDefaultMasterPort);
    EXPECT_EQ(dist_env_from_environment("10.0.0.1", 1234).master_port, 1234);
  }
  {
    Env e;  // two nodes: the master must be named
    e.set("RANK", "1"), e.set("WORLD_SIZE", "2"), e.set("LOCAL_RANK", "0"), e.set("LOCAL_WORLD_SIZE", "1");
    EXPECT_THROW(dist_env_from_environment(), Error);
    e.set("MASTER_ADDR", "10.1.2.3"), e.set("MASTER_PORT", "4000");
    const DistEnv d = dist_env_from_environment();
    EXPECT_EQ(d.master_addr, "10.1.2.3");
    EXPECT_EQ(d.master_port, 4000);
  }
  {
    Env e;
    e.set("OMPI_COMM_WORLD_RANK", "1"), e.set("OMPI_COMM_WORLD_SIZE", "3");
    e.set("OMPI_COMM_WORLD_LOCAL_RANK", "1"), e.set("OMPI_COMM_WORLD_LOCAL_SIZE", "3");
    const DistEnv d = dist_env_from_environment();
    EXPECT_EQ(d.rank, 1);
    EXPECT_EQ(d.world, 3);
    EXPECT_NE(d.source.find("OpenMPI"), std::string::npos);
  }
  {
    Env e;
    e.set("SLURM_PROCID", "0"), e.set("SLURM_NTASKS", "2"), e.set("SLURM_NNODES", "1");
    EXPECT_EQ(dist_env_from_environment().world, 2);
  }
  {
    Env e;
    e.set("RANK", "4"), e.set("WORLD_SIZE", "4");
    EXPECT_THROW(dist_env_from_environment(), Error);
    e.set("RANK", "x");
    EXPECT_THROW(dist_env_from_environment(), Error);
  }
}

}  // namespace
}  // namespace pylon
