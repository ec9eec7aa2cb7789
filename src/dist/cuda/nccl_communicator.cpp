// Non-blocking NCCL communicators, the watchdog wait, and the host-side Communicator over NCCL.
#include "dist/cuda/nccl_communicator.h"

#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <mutex>
#include <thread>

#include "core/error.h"

namespace pylon::cuda {
namespace {

using Clock = std::chrono::steady_clock;

std::string seconds(std::chrono::milliseconds t) {
  return std::to_string(static_cast<double>(t.count()) / 1000.0).substr(0, 5) + " s";
}

}  // namespace

NcclComm::NcclComm(TcpStore& store, const std::string& key, int rank, int world,
                   std::chrono::milliseconds timeout, int max_ctas)
    : rank_(rank), world_(world), name_(key), timeout_(timeout) {
  ncclUniqueId id;
  if (rank == 0) {
    const ncclResult_t r = ncclGetUniqueId(&id);
    PYLON_CHECK(r == ncclSuccess, "rank 0: ncclGetUniqueId failed: ", ncclGetErrorString(r));
    store.set("nccl/" + key, std::vector<char>(id.internal, id.internal + sizeof(id.internal)));
  }
  const std::vector<char> bytes = store.get("nccl/" + key);
  PYLON_CHECK(bytes.size() == sizeof(id.internal), "rank ", rank, ": malformed NCCL id for ", key);
  std::memcpy(id.internal, bytes.data(), sizeof(id.internal));
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;  // calls return at once; finish() and the watchdog do the waiting
  if (max_ctas > 0) config.maxCTAs = max_ctas;
  finish(ncclCommInitRankConfig(&comm_, world, id, rank, &config), "ncclCommInitRankConfig");
}

NcclComm::~NcclComm() {
  if (!comm_) return;
  if (!aborted_) {
    // Finalise (flushes outstanding work) with a bound; a communicator that does not finish is aborted.
    ncclResult_t r = ncclCommFinalize(comm_);
    const auto deadline = Clock::now() + timeout_;
    while (r == ncclInProgress && Clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::microseconds(100));
      ncclCommGetAsyncError(comm_, &r);
    }
    if (r == ncclSuccess) {
      ncclCommDestroy(comm_);
      return;
    }
  }
  ncclCommAbort(comm_);
}

void NcclComm::finish(ncclResult_t r, const char* call) const {
  PYLON_CHECK(!aborted_, "rank ", rank_, ": NCCL ", name_, " used after abort");
  const auto deadline = Clock::now() + timeout_;
  while (r == ncclInProgress) {
    PYLON_CHECK(Clock::now() < deadline, "rank ", rank_, ": ", call, " on NCCL communicator ", name_,
                " did not complete within ", seconds(timeout_), " (a peer rank is missing?)");
    std::this_thread::sleep_for(std::chrono::microseconds(20));
    if (comm_) ncclCommGetAsyncError(comm_, &r);
  }
  PYLON_CHECK(r == ncclSuccess, "rank ", rank_, ": ", call, " on NCCL communicator ", name_,
              " failed: ", ncclGetErrorString(r), comm_ ? std::string(" (") + ncclGetLastError(comm_) + ")" : "");
}

void NcclComm::all_gather(const void* send, void* recv, size_t count, ncclDataType_t type, cudaStream_t s) {
  const std::lock_guard<std::mutex> lock(mutex_);
  finish(ncclAllGather(send, recv, count, type, comm_, s), "ncclAllGather");
}

void NcclComm::reduce_scatter(const void* send, void* recv, size_t count, ncclDataType_t type,
                              cudaStream_t s) {
  const std::lock_guard<std::mutex> lock(mutex_);
  finish(ncclReduceScatter(send, recv, count, type, ncclSum, comm_, s), "ncclReduceScatter");
}

void NcclComm::all_reduce(const void* send, void* recv, size_t count, ncclDataType_t type,
                          ncclRedOp_t op, cudaStream_t s) {
  const std::lock_guard<std::mutex> lock(mutex_);
  finish(ncclAllReduce(send, recv, count, type, op, comm_, s), "ncclAllReduce");
}

void NcclComm::broadcast(void* data, size_t bytes, int root, cudaStream_t s) {
  const std::lock_guard<std::mutex> lock(mutex_);
  finish(ncclBroadcast(data, data, bytes, ncclInt8, root, comm_, s), "ncclBroadcast");
}

void NcclComm::group_start() { finish(ncclGroupStart(), "ncclGroupStart"); }

void NcclComm::group_end() {
  const std::lock_guard<std::mutex> lock(mutex_);
  finish(ncclGroupEnd(), "ncclGroupEnd");
}

void NcclComm::check_async() const {
  if (aborted_) return;
  const std::unique_lock<std::mutex> lock(mutex_, std::try_to_lock);
  if (!lock.owns_lock()) return;  // another thread is inside NCCL on this communicator
  ncclResult_t r = ncclSuccess;
  ncclCommGetAsyncError(comm_, &r);
  PYLON_CHECK(r == ncclSuccess || r == ncclInProgress, "rank ", rank_, ": NCCL communicator ", name_,
              " failed: ", ncclGetErrorString(r), " (", ncclGetLastError(comm_), ")");
}

void NcclComm::abort() {
  if (aborted_ || !comm_) return;
  aborted_ = true;
  ncclCommAbort(comm_);  // also stops this rank's NCCL kernels that wait for a dead peer
  comm_ = nullptr;
}

void wait_watched(cudaEvent_t event, const std::vector<NcclComm*>& comms,
                  std::chrono::milliseconds timeout, const std::string& who, const std::string& what,
                  const std::function<std::string()>& late_ranks) {
  const auto deadline = Clock::now() + timeout;
  for (;;) {
    const cudaError_t e = cudaEventQuery(event);
    if (e == cudaSuccess) return;
    if (e != cudaErrorNotReady) PYLON_CUDA_CHECK(e);
    try {
      for (const NcclComm* c : comms) c->check_async();
    } catch (const Error&) {
      for (NcclComm* c : comms) c->abort();
      throw;
    }
    if (Clock::now() >= deadline) {
      const std::string late = late_ranks ? late_ranks() : "";
      for (NcclComm* c : comms) c->abort();
      throw Error(who + ": " + what + " did not complete within " + seconds(timeout) +
                  " (--dist-timeout): " + (late.empty() ? "a peer rank died or hangs" : late) +
                  "; NCCL communicators aborted");
    }
    std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
}

struct StepWatchdog::Impl {
  struct Pending {
    int64_t t;
    Event done;
    Clock::time_point enqueued;
  };
  std::vector<NcclComm*> comms;
  std::chrono::milliseconds timeout;
  std::string who;
  std::function<std::string(int64_t)> late_ranks;
  std::mutex mutex;
  std::condition_variable wake;
  std::deque<Pending> pending;
  std::vector<Event> spare;
  Clock::time_point last_done = Clock::now();
  bool stop = false;
  std::thread thread;

  int device = 0;

  // Aborts the communicators (bounded: an abort that itself hangs is left behind) and exits.
  [[noreturn]] void fire(const std::string& why) {
    std::fprintf(stderr, "%s: %s; aborting the NCCL communicators and exiting\n", who.c_str(), why.c_str());
    std::fflush(stderr);
    std::thread([this] {
      for (NcclComm* c : comms) c->abort();
      std::_Exit(1);
    }).detach();
    std::this_thread::sleep_for(std::chrono::seconds(3));
    std::_Exit(1);
  }

  void run() {
    cudaSetDevice(device);  // events are queried on the trainer's device
    std::unique_lock<std::mutex> lock(mutex);
    while (!stop) {
      wake.wait_for(lock, std::chrono::milliseconds(1));
      while (!pending.empty()) {
        const cudaError_t e = cudaEventQuery(pending.front().done.get());
        if (e == cudaErrorNotReady) break;
        if (e != cudaSuccess) fire(std::string("CUDA error while waiting for a step: ") + cudaGetErrorString(e));
        spare.push_back(std::move(pending.front().done));
        pending.pop_front();
        last_done = Clock::now();
      }
      for (NcclComm* c : comms) try {
          c->check_async();
        } catch (const Error& err) {
          fire(err.what());
        }
      if (pending.empty()) continue;
      const Pending& p = pending.front();
      if (Clock::now() - std::max(p.enqueued, last_done) > timeout) {
        const int64_t t = p.t;
        lock.unlock();  // late_ranks may take a while; the main thread may keep enqueueing
        const std::string late = late_ranks ? late_ranks(t) : "";
        fire("step " + std::to_string(t) + " did not complete within " + seconds(timeout) +
             " (--dist-timeout): " + (late.empty() ? "a peer rank died or hangs" : late));
      }
    }
  }
};

StepWatchdog::StepWatchdog(std::vector<NcclComm*> comms, std::chrono::milliseconds timeout, std::string who,
                           std::function<std::string(int64_t)> late_ranks)
    : impl_(std::make_unique<Impl>()) {
  impl_->comms = std::move(comms), impl_->timeout = timeout, impl_->who = std::move(who);
  impl_->late_ranks = std::move(late_ranks);
  PYLON_CUDA_CHECK(cudaGetDevice(&impl_->device));
  impl_->thread = std::thread([this] { impl_->run(); });
}

StepWatchdog::~StepWatchdog() {
  {
    std::lock_guard<std::mutex> lock(impl_->mutex);
    impl_->stop = true;
  }
  impl_->wake.notify_all();
  impl_->thread.join();
}

void StepWatchdog::step_enqueued(int64_t t, cudaStream_t stream) {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  Event e;
  if (!impl_->spare.empty()) {
    e = std::move(impl_->spare.back());
    impl_->spare.pop_back();
  }
  e.record(stream);
  if (impl_->pending.empty()) impl_->last_done = Clock::now();  // the clock starts now
  impl_->pending.push_back({t, std::move(e), Clock::now()});
}

NcclHostCommunicator::NcclHostCommunicator(std::unique_ptr<NcclComm> comm, std::chrono::milliseconds timeout)
    : comm_(std::move(comm)), timeout_(timeout) {}

char* NcclHostCommunicator::stage(size_t bytes) {
  if (staging_.bytes() < bytes) staging_ = DeviceBuffer(bytes);
  return staging_.as<char>();
}

void NcclHostCommunicator::wait(const char* op) {
  done_.record(stream_.get());
  wait_watched(done_.get(), {comm_.get()}, timeout_, "rank " + std::to_string(rank()),
               std::string("collective ") + op);
}

void NcclHostCommunicator::all_gather(const float* in, float* out, size_t n) {
  const size_t W = static_cast<size_t>(world()), r = static_cast<size_t>(rank());
  float* d = reinterpret_cast<float*>(stage(W * n * sizeof(float)));
  PYLON_CUDA_CHECK(cudaMemcpyAsync(d + r * n, in, n * sizeof(float), cudaMemcpyHostToDevice, stream_.get()));
  comm_->all_gather(d + r * n, d, n, ncclFloat32, stream_.get());
  PYLON_CUDA_CHECK(cudaMemcpyAsync(out, d, W * n * sizeof(float), cudaMemcpyDeviceToHost, stream_.get()));
  wait("all_gather");
}

void NcclHostCommunicator::reduce_scatter_sum(const float* in, float* out, size_t n) {
  const size_t W = static_cast<size_t>(world()), r = static_cast<size_t>(rank());
  float* d = reinterpret_cast<float*>(stage(W * n * sizeof(float)));
  PYLON_CUDA_CHECK(cudaMemcpyAsync(d, in, W * n * sizeof(float), cudaMemcpyHostToDevice, stream_.get()));
  comm_->reduce_scatter(d, d + r * n, n, ncclFloat32, stream_.get());
  PYLON_CUDA_CHECK(cudaMemcpyAsync(out, d + r * n, n * sizeof(float), cudaMemcpyDeviceToHost, stream_.get()));
  wait("reduce_scatter");
}

void NcclHostCommunicator::all_reduce_sum(float* data, size_t n) {
  char* d = stage(n * sizeof(float));
  PYLON_CUDA_CHECK(cudaMemcpyAsync(d, data, n * sizeof(float), cudaMemcpyHostToDevice, stream_.get()));
  comm_->all_reduce(d, d, n, ncclFloat32, ncclSum, stream_.get());
  PYLON_CUDA_CHECK(cudaMemcpyAsync(data, d, n * sizeof(float), cudaMemcpyDeviceToHost, stream_.get()));
  wait("all_reduce");
}

void NcclHostCommunicator::all_reduce_sum(double* data, size_t n) {
  char* d = stage(n * sizeof(double));
  PYLON_CUDA_CHECK(cudaMemcpyAsync(d, data, n * sizeof(double), cudaMemcpyHostToDevice, stream_.get()));
  comm_->all_reduce(d, d, n, ncclFloat64, ncclSum, stream_.get());
  PYLON_CUDA_CHECK(cudaMemcpyAsync(data, d, n * sizeof(double), cudaMemcpyDeviceToHost, stream_.get()));
  wait("all_reduce");
}

void NcclHostCommunicator::broadcast(void* data, size_t bytes, int root) {
  char* d = stage(bytes);
  PYLON_CUDA_CHECK(cudaMemcpyAsync(d, data, bytes, cudaMemcpyHostToDevice, stream_.get()));
  comm_->broadcast(d, bytes, root, stream_.get());
  PYLON_CUDA_CHECK(cudaMemcpyAsync(data, d, bytes, cudaMemcpyDeviceToHost, stream_.get()));
  wait("broadcast");
}

void NcclHostCommunicator::barrier() {
  float one = 1.f;
  all_reduce_sum(&one, 1);
}

}  // namespace pylon::cuda
