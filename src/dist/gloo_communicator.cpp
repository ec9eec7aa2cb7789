// Gloo collectives with a deadline each; Gloo's exceptions become one-line pylon::Errors that name
// this rank, the collective and the timeout.
#include "dist/gloo_communicator.h"

#include <algorithm>
#include <chrono>

#include <gloo/allgather.h>
#include <gloo/allreduce.h>
#include <gloo/barrier.h>
#include <gloo/broadcast.h>
#include <gloo/math.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/store.h>
#include <gloo/transport/tcp/device.h>
#include <gloo/types.h>

#include <cstring>
#include <string>
#include <vector>

#include "core/error.h"

namespace pylon {
namespace {

// Gloo's Store interface over our TcpStore (which stays free of Gloo for the NCCL bootstrap).
class StoreAdapter final : public gloo::rendezvous::Store {
 public:
  explicit StoreAdapter(TcpStore& s) : store_(s) {}
  void set(const std::string& key, const std::vector<char>& data) override { store_.set(key, data); }
  std::vector<char> get(const std::string& key) override { return store_.get(key); }
  void wait(const std::vector<std::string>& keys) override { store_.wait(keys); }
  void wait(const std::vector<std::string>& keys, const std::chrono::milliseconds& t) override {
    store_.wait(keys, t);
  }

 private:
  TcpStore& store_;
};

constexpr uint8_t kReduceScatterSlotPrefix = 0x10;  // above Gloo's own prefixes (0x01..0x08)

}  // namespace

struct GlooCommunicator::Impl {
  std::unique_ptr<TcpStore> store;
  std::shared_ptr<gloo::transport::Device> device;
  std::shared_ptr<gloo::rendezvous::Context> context;
  std::vector<float> ring_acc, ring_recv;  // reduce-scatter scratch: (world·n) and (n)
};

GlooCommunicator::GlooCommunicator(const DistEnv& env, std::chrono::milliseconds timeout)
    : rank_(env.rank), world_(env.world), timeout_(timeout), impl_(std::make_unique<Impl>()) {
  PYLON_CHECK(timeout.count() > 0, "the collective timeout must be positive");
  const std::string who = "rank " + std::to_string(rank_);
  impl_->store = std::make_unique<TcpStore>(env.master_addr, env.master_port, rank_ == 0, timeout, who);
  check_world_size(*impl_->store, env, who);
  try {
    gloo::transport::tcp::attr attr;
    attr.hostname = impl_->store->local_address();  // the interface that reaches the master
    impl_->device = gloo::transport::tcp::CreateDevice(attr);
    impl_->context = std::make_shared<gloo::rendezvous::Context>(rank_, world_);
    impl_->context->setTimeout(timeout);
    StoreAdapter store(*impl_->store);
    impl_->context->connectFullMesh(store, impl_->device);
    // A rank's mesh can be complete while a peer's is still connecting to it: without this
    // barrier, a rank that fails right after starting (every rank's scan of the data, say) breaks
    // the peers' connection and they report that instead of finding the same error.
    gloo::BarrierOptions opts(impl_->context);
    opts.setTimeout(timeout);
    gloo::barrier(opts);
  } catch (const gloo::Exception& e) {
    throw Error(who + ": cannot connect to the other " + std::to_string(world_ - 1) + " ranks (" +
                env.source + ", master " + env.master_addr + ":" + std::to_string(env.master_port) +
                "): " + e.what());
  }
}

GlooCommunicator::~GlooCommunicator() = default;

std::string GlooCommunicator::ranks_that_never_came(uint64_t seq) {
  const std::string prefix = "timed_out/" + std::to_string(seq) + "/";
  std::string missing;
  try {
    impl_->store->set(prefix + std::to_string(rank_), {'1'});
    // The ranks waiting in the same collective timed out within moments of this one.
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(2);
    for (int r = 0; r < world_; ++r) {
      if (r == rank_) continue;
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(until - std::chrono::steady_clock::now());
      try {
        impl_->store->wait({prefix + std::to_string(r)}, std::max(left, std::chrono::milliseconds(1)));
      } catch (const Error&) {
        missing += (missing.empty() ? "rank " : ", rank ") + std::to_string(r);
      }
    }
  } catch (const Error&) {
    return "";  // the store (rank 0's) does not answer either
  }
  return missing;
}

template <typename F>
void GlooCommunicator::run(const char* op, F&& body) {
  PYLON_CHECK(!aborted_, "rank ", rank_, ": collective ", op, " after abort()");
  const uint64_t seq = seq_++;
  try {
    body();
  } catch (const gloo::Exception& e) {
    aborted_ = true;  // the context is broken: never wait on it again
    const std::string what = e.what();
    const double secs = static_cast<double>(timeout_.count()) / 1000.0;
    if (what.find("Timed out") != std::string::npos) {
      const std::string missing = ranks_that_never_came(seq);
      throw Error(detail::concat("rank ", rank_, ": collective ", op, " timed out after ", secs, " s ",
                                 missing.empty() ? "(a peer died or hung)"
                                                 : "(" + missing + " never reached it: hung or stopped)"));
    }
    throw PeerLost(detail::concat("rank ", rank_, ": collective ", op,
                                  " failed (a peer died or closed its connection): ", what));
  }
}

void GlooCommunicator::all_gather(const float* in, float* out, size_t n) {
  run("all_gather", [&] {
    gloo::AllgatherOptions opts(impl_->context);
    opts.setInput(const_cast<float*>(in), n);  // Gloo only reads the input
    opts.setOutput(out, n * static_cast<size_t>(world_));
    opts.setTimeout(timeout_);
    gloo::allgather(opts);
  });
}

void GlooCommunicator::reduce_scatter_sum(const float* in, float* out, size_t n) {
  run("reduce_scatter", [&] {
    const size_t W = static_cast<size_t>(world_), r = static_cast<size_t>(rank_);
    auto& acc = impl_->ring_acc;
    auto& recv = impl_->ring_recv;
    acc.assign(in, in + W * n);
    recv.resize(n);
    auto& ctx = impl_->context;
    auto send_buf = ctx->createUnboundBuffer(acc.data(), acc.size() * sizeof(float));
    auto recv_buf = ctx->createUnboundBuffer(recv.data(), recv.size() * sizeof(float));
    const int right = static_cast<int>((r + 1) % W), left = static_cast<int>((r + W - 1) % W);
    const uint64_t slot = gloo::Slot::build(kReduceScatterSlotPrefix, 0);
    // Step s: send shard (r−s−1) (own data plus what came in so far) right; add shard (r−s−2)
    // from the left. After world−1 steps shard r holds every rank's contribution.
    for (size_t s = 0; s + 1 < W; ++s) {
      const size_t send_shard = (r + 2 * W - s - 1) % W, recv_shard = (r + 2 * W - s - 2) % W;
      send_buf->send(right, slot, send_shard * n * sizeof(float), n * sizeof(float));
      recv_buf->recv(left, slot, 0, n * sizeof(float));
      if (!recv_buf->waitRecv(timeout_) || !send_buf->waitSend(timeout_))
        throw gloo::IoException("aborted");
      float* dst = acc.data() + recv_shard * n;
      for (size_t i = 0; i < n; ++i) dst[i] += recv[i];
    }
    std::memcpy(out, acc.data() + r * n, n * sizeof(float));
  });
}

void GlooCommunicator::all_reduce_sum(float* data, size_t n) {
  run("all_reduce", [&] {
    gloo::AllreduceOptions opts(impl_->context);
    opts.setOutput(data, n);
    opts.setReduceFunction(
        static_cast<void (*)(void*, const void*, const void*, size_t)>(&gloo::sum<float>));
    opts.setTimeout(timeout_);
    gloo::allreduce(opts);
  });
}

void GlooCommunicator::all_reduce_sum(double* data, size_t n) {
  run("all_reduce", [&] {
    gloo::AllreduceOptions opts(impl_->context);
    opts.setOutput(data, n);
    opts.setReduceFunction(
        static_cast<void (*)(void*, const void*, const void*, size_t)>(&gloo::sum<double>));
    opts.setTimeout(timeout_);
    gloo::allreduce(opts);
  });
}

void GlooCommunicator::broadcast(void* data, size_t bytes, int root) {
  PYLON_ASSERT(root >= 0 && root < world_, "broadcast root ", root);
  run("broadcast", [&] {
    gloo::BroadcastOptions opts(impl_->context);
    opts.setOutput(static_cast<uint8_t*>(data), bytes);
    opts.setRoot(root);
    opts.setTimeout(timeout_);
    gloo::broadcast(opts);
  });
}

void GlooCommunicator::barrier() {
  run("barrier", [&] {
    gloo::BarrierOptions opts(impl_->context);
    opts.setTimeout(timeout_);
    gloo::barrier(opts);
  });
}

void GlooCommunicator::abort() { aborted_ = true; }


}  // namespace pylon
