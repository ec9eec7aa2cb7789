// The CPU communicator: Gloo (Debian's libgloo) over its TCP transport, bootstrapped through the
// rendezvous store. Gloo stays behind this header; callers see only Communicator.
#pragma once

#include <atomic>
#include <chrono>
#include <memory>

#include "dist/communicator.h"
#include "dist/rendezvous.h"

namespace pylon {

class GlooCommunicator final : public Communicator {
 public:
  // Joins the job `env` describes: rank 0 serves the store on master_addr:master_port, every rank
  // publishes its Gloo pair addresses there and connects a full mesh; returns on no rank before
  // every rank's mesh is connected (a barrier). `timeout` bounds the rendezvous and every later
  // collective.
  GlooCommunicator(const DistEnv& env, std::chrono::milliseconds timeout);
  ~GlooCommunicator() override;

  int rank() const override { return rank_; }
  int world() const override { return world_; }
  void all_gather(const float* in, float* out, size_t n) override;
  // A ring over Gloo's point-to-point buffers (Gloo 2022's ReduceScatterHalvingDoubling sets up
  // its buffers per call and has no per-call timeout): world−1 steps, each sending one shard to
  // the right neighbour and adding the one from the left, so each rank receives (world−1)·n
  // floats instead of the 2·(world−1)·n of an allreduce followed by a slice.
  void reduce_scatter_sum(const float* in, float* out, size_t n) override;
  void all_reduce_sum(float* data, size_t n) override;
  void all_reduce_sum(double* data, size_t n) override;
  void broadcast(void* data, size_t bytes, int root) override;
  void barrier() override;
  void abort() override;

 private:
  struct Impl;
  template <typename F>
  void run(const char* op, F&& body);
  // After collective `seq` timed out here: says so in the store, waits briefly for the other ranks
  // to say the same, and names those that did not (they never reached it: hung or stopped). ""
  // when every rank timed out in it or the store does not answer.
  std::string ranks_that_never_came(uint64_t seq);

  int rank_, world_;
  std::chrono::milliseconds timeout_;
  uint64_t seq_ = 0;  // collectives issued: every rank issues them in the same order
  std::atomic<bool> aborted_{false};  // set from any thread (an error path), read by the collectives
  std::unique_ptr<Impl> impl_;
};

// World 1: the single-rank communicator (no sockets); otherwise Gloo.
std::unique_ptr<Communicator> make_communicator(const DistEnv& env, std::chrono::milliseconds timeout);

}  // namespace pylon
