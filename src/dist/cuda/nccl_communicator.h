// NCCL for GPU ranks. NcclComm: one non-blocking communicator (ncclConfig_t.blocking = 0) whose
// collectives are enqueued on CUDA streams; the host never blocks inside NCCL, so a watchdog
// (wait_watched) can poll ncclCommGetAsyncError and ncclCommAbort when a peer died or hangs.
// The unique id travels through the rendezvous store (rank 0 makes it). NcclHostCommunicator: the
// blocking Communicator interface over NCCL for the few host-side collectives (checkpoints,
// metrics), each staged through device memory and bounded by the same watchdog.
#pragma once

#include <cuda_runtime.h>
#include <nccl.h>

#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "dist/communicator.h"
#include "dist/rendezvous.h"
#include "ops/cuda/runtime.h"

namespace pylon::cuda {

class NcclComm {
 public:
  // Collective over the job: every rank passes the same `key`. Joining is bounded by `timeout`.
  // max_ctas > 0 caps the thread blocks (channels) each collective takes from compute
  // (ncclConfig_t::maxCTAs); 0 leaves NCCL's choice. NCCL_MAX_CTAS / NCCL_MIN_CTAS override it.
  NcclComm(TcpStore& store, const std::string& key, int rank, int world,
           std::chrono::milliseconds timeout, int max_ctas = 0);
  ~NcclComm();  // finalises a healthy communicator, aborts a broken one
  NcclComm(const NcclComm&) = delete;
  NcclComm& operator=(const NcclComm&) = delete;

  int rank() const { return rank_; }
  int world() const { return world_; }
  const std::string& name() const { return name_; }

  // recv (world·count) = every rank's send (count), rank order. In place when send = recv + rank·count.
  void all_gather(const void* send, void* recv, size_t count, ncclDataType_t type, cudaStream_t s);
  // recv (count) = Σ over ranks of send[rank·count, (rank+1)·count). In place when recv = send + rank·count.
  void reduce_scatter(const void* send, void* recv, size_t count, ncclDataType_t type, cudaStream_t s);
  void all_reduce(const void* send, void* recv, size_t count, ncclDataType_t type, ncclRedOp_t op,
                  cudaStream_t s);
  void broadcast(void* data, size_t bytes, int root, cudaStream_t s);  // in place
  // The calls between group_start and group_end (on this thread) are launched as one
  // (ncclGroupStart / ncclGroupEnd).
  void group_start();
  void group_end();

  // Throws pylon::Error when NCCL reported an asynchronous error (a peer failed, a network error).
  // Safe from another thread (the watchdog's): it skips the check while a call of this object's
  // owner is inside NCCL, which polls the same state itself.
  void check_async() const;
  void abort();
  bool aborted() const { return aborted_; }

 private:
  // Completes a non-blocking call: polls while NCCL says ncclInProgress, throws on an error.
  void finish(ncclResult_t r, const char* call) const;

  ncclComm_t comm_ = nullptr;
  int rank_, world_;
  std::string name_;
  std::chrono::milliseconds timeout_;
  bool aborted_ = false;
  // ncclCommGetAsyncError is not thread-safe: on a non-blocking communicator it also completes
  // (and frees) the job of the last call when that call returned ncclInProgress, so two threads
  // polling at once can free it twice. Held by every call into NCCL except abort().
  mutable std::mutex mutex_;
};

// Waits until `event` has completed, watching `comms`: an asynchronous NCCL error, or `timeout`
// passing, aborts every one of them and throws pylon::Error("<who>: <what> ..."), naming the
// ranks that `late_ranks` (may be empty) says have not arrived. Polls every 50 µs.
void wait_watched(cudaEvent_t event, const std::vector<NcclComm*>& comms,
                  std::chrono::milliseconds timeout, const std::string& who, const std::string& what,
                  const std::function<std::string()>& late_ranks = {});

// Guards the steps of a GPU job from a thread of its own: the trainer marks the end of each
// step's work on its stream; when a step has not completed `timeout` after it was enqueued and its
// predecessor completed, or a communicator reports an error, the watchdog aborts the
// communicators, prints one line to stderr ("<who>: step t did not complete within ...",
// followed by what late_ranks(t) says) and ends the process with exit status 1. The main thread
// may then be blocked in a kernel launch (the launch queue full behind a collective that never
// ends) or in a synchronising CUDA call during unwinding, so no exception could reach main();
// PyTorch's NCCL watchdog ends the process for the same reason. late_ranks runs on the watchdog's
// thread and must not share non-thread-safe state with the main thread.
class StepWatchdog {
 public:
  StepWatchdog(std::vector<NcclComm*> comms, std::chrono::milliseconds timeout, std::string who,
               std::function<std::string(int64_t)> late_ranks);
  ~StepWatchdog();
  StepWatchdog(const StepWatchdog&) = delete;
  StepWatchdog& operator=(const StepWatchdog&) = delete;

  // Everything of step t has been enqueued on `stream`.
  void step_enqueued(int64_t t, cudaStream_t stream);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

class NcclHostCommunicator final : public Communicator {
 public:
  NcclHostCommunicator(std::unique_ptr<NcclComm> comm, std::chrono::milliseconds timeout);
  int rank() const override { return comm_->rank(); }
  int world() const override { return comm_->world(); }
  void all_gather(const float* in, float* out, size_t n) override;
  void reduce_scatter_sum(const float* in, float* out, size_t n) override;
  void all_reduce_sum(float* data, size_t n) override;
  void all_reduce_sum(double* data, size_t n) override;
  void broadcast(void* data, size_t bytes, int root) override;
  void barrier() override;
  void abort() override { comm_->abort(); }

 private:
  // Device staging of `bytes`, grown as needed.
  char* stage(size_t bytes);
  void wait(const char* op);

  std::unique_ptr<NcclComm> comm_;
  std::chrono::milliseconds timeout_;
  Stream stream_;
  Event done_;
  DeviceBuffer staging_;
};

}  // namespace pylon::cuda
