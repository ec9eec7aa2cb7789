// The GPU training loop, one for every world size and both compute types (bf16, or fp32 for
// --dtype fp32): FsdpCuda holds the shards and runs the unit hooks, MiniLLMCuda enqueues forward
// and backward, NCCL (world > 1) gathers and reduces. A step is enqueued without host
// synchronisation; the host reads step t's metrics while step t + 1 runs. With --cuda-graph the
// second and third steps are captured as CUDA graphs (one per step parity: token and scalar
// buffers alternate) and every later step replays its parity's graph.
#include "train/cuda/trainer_cuda.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/timer.h"
#include "dist/cuda/fsdp_cuda.h"
#include "dist/fsdp.h"
#include "dist/shard_layout.h"
#include "io/safetensors.h"
#include "io/token_file.h"
#include "model/cuda/minillm_cuda.h"
#include "ops/cuda/runtime.h"
#include "profile/gpu_monitor.h"
#include "profile/session.h"
#include "profile/tracer.h"
#include "train/checkpoint.h"
#include "train/data_loader.h"
#include "train/loop.h"
#include "train/memory_plan.h"
#ifdef PYLON_HAVE_NCCL
#include "dist/cuda/nccl_communicator.h"
#endif

namespace pylon {
namespace {

size_t free_device_bytes() {
  size_t free = 0, total = 0;
  PYLON_CUDA_CHECK(cudaMemGetInfo(&free, &total));
  return free;
}

#ifdef PYLON_HAVE_NCCL
// Thread blocks each FSDP collective may take from the kernels it overlaps (0: NCCL's choice;
// 8 made the 2-GPU step 3% slower, bench/fsdp_notes.md); NCCL_MAX_CTAS overrides it.
constexpr int kFsdpMaxCtas = 0;
#endif

// The communicators of a GPU job: none for a world of one; otherwise the rendezvous store and
// three NCCL communicators (gather, reduce, and the host-side one for checkpoints and metrics).
struct GpuComms {
  std::unique_ptr<TcpStore> store;
#ifdef PYLON_HAVE_NCCL
  std::unique_ptr<cuda::NcclComm> gather, reduce;
#endif
  std::unique_ptr<Communicator> host;
};

GpuComms connect(const DistEnv& env, std::chrono::milliseconds timeout) {
  GpuComms c;
  if (env.world == 1) {
    c.host = make_single_rank_communicator();
    return c;
  }
#ifdef PYLON_HAVE_NCCL
  const std::string who = "rank " + std::to_string(env.rank);
  c.store = std::make_unique<TcpStore>(env.master_addr, env.master_port, env.rank == 0, timeout, who);
  check_world_size(*c.store, env, who);
  c.gather = std::make_unique<cuda::NcclComm>(*c.store, "gather", env.rank, env.world, timeout, kFsdpMaxCtas);
  c.reduce = std::make_unique<cuda::NcclComm>(*c.store, "reduce", env.rank, env.world, timeout, kFsdpMaxCtas);
  c.host = std::make_unique<cuda::NcclHostCommunicator>(
      std::make_unique<cuda::NcclComm>(*c.store, "host", env.rank, env.world, timeout), timeout);
  return c;
#else
  (void)timeout;
  throw Error("--device cuda over " + std::to_string(env.world) +
              " ranks needs NCCL: this build has none (apt install libnccl-dev and rebuild)");
#endif
}

// The model's weights as FSDP holds them: bf16, or fp32 for the fp32 model.
template <typename Act>
const std::vector<const Act*>& device_params(const cuda::FsdpCuda& fsdp) {
  if constexpr (std::is_same_v<Act, float>) {
    return fsdp.params_f32();
  } else {
    return fsdp.params();
  }
}

// A step enqueued without host synchronisation: the host fills and copies step t's tokens (a
// buffer per step parity), FsdpCuda and MiniLLMCuda enqueue the work, and step t's results are read
// while step t + 1 runs. Activations and gathered weights of type Act (cuda::bf16 or float).
template <typename Act>
class CudaStep final : public TrainStep {
 public:
  CudaStep(const TrainOptions& o, const CheckpointInfo& resume, const DistEnv& env, GpuComms& comms,
           std::chrono::milliseconds timeout, size_t free_at_start)
      : o_(o), world_(env.world), rank_(env.rank), who_("rank " + std::to_string(env.rank)),
        free_at_start_(free_at_start), start_step_(o.resume_dir.empty() ? 0 : resume.step), timeout_(timeout),
        comms_(&comms), model_(o.model, o.batch, o.seq, o.recompute), layout_(model_.table(), env.world),
        host_(layout_, *comms.host, host_options()), fsdp_(layout_, stream_.get(), gather(comms), reduce(comms),
                                                           cuda_fsdp_options(o)) {
    init_shards(o, resume, host_);  // on the host: init, load or resume, then to the device
    fsdp_.upload(host_.shards());
#ifdef PYLON_HAVE_NCCL
    if (comms.gather) watched_ = {comms.gather.get(), comms.reduce.get()};
#endif
    const size_t rows = static_cast<size_t>(o.batch) * o.seq;
    step_tokens_ = static_cast<size_t>(o.grad_accum) * 2 * rows;  // the memory plan's token buffers
    host_tokens_ = cuda::PinnedArray<int32_t>(2 * step_tokens_);
    dev_tokens_ = cuda::DeviceBuffer(2 * step_tokens_ * sizeof(int32_t));
    if (!o.val_data.empty() && o.eval_every > 0) {  // o.eval_steps micro-batches of tokens and losses at once
      const size_t m = static_cast<size_t>(o.eval_steps);
      val_host_tokens_ = cuda::PinnedArray<int32_t>(m * 2 * rows);
      val_host_losses_ = cuda::PinnedArray<float>(m);
      val_tokens_ = cuda::DeviceBuffer(m * 2 * rows * sizeof(int32_t));
      val_losses_ = cuda::DeviceBuffer(m * sizeof(float));
    }
    const int64_t global_tokens = static_cast<int64_t>(rows) * world_ * o.grad_accum;
    model_.set_loss_scale(1.f / static_cast<float>(global_tokens));
    allocated_ = fsdp_.device_bytes() + model_.activation_bytes() + dev_tokens_.bytes() + val_tokens_.bytes() +
                 val_losses_.bytes() + cuda::Gemm::kWorkspaceBytes;  // the memory plan's total
    for (auto& e : inputs_free_) e.record(stream_.get());
    // World > 1: a watchdog thread ends this rank when a step does not complete within `timeout`
    // (a dead or hung peer), naming the ranks that did not enqueue it (each rank sets
    // step/<t>/<rank> in the store once step t is enqueued; the watchdog asks through a store
    // connection of its own, the store not being thread-safe).
#ifdef PYLON_HAVE_NCCL
    if (world_ > 1) {
      watchdog_store_ = std::make_unique<TcpStore>(env.master_addr, env.master_port, false, timeout, who_);
      auto late = [&store = *watchdog_store_, world = world_](int64_t t) -> std::string {
        std::string missing;
        for (int r = 0; r < world; ++r) try {
            store.wait({"step/" + std::to_string(t) + "/" + std::to_string(r)}, std::chrono::milliseconds(500));
          } catch (const Error&) {
            missing += (missing.empty() ? "rank " : ", rank ") + std::to_string(r);
          }
        return missing.empty() ? "every rank enqueued step " + std::to_string(t) + ": one died or hangs inside it"
                               : missing + " did not enqueue step " + std::to_string(t) + " (died or hangs)";
      };
      watchdog_ = std::make_unique<cuda::StepWatchdog>(watched_, timeout, who_, late);
    }
#endif
    // Power, clocks and energy of this rank's GPU (profile/gpu_monitor.h), sampled every 20 ms.
    char bus_id[32] = {};
    PYLON_CUDA_CHECK(cudaDeviceGetPCIBusId(bus_id, sizeof bus_id, env.local_rank));
    std::string why;
    monitor_ = profile::GpuMonitor::open_nvml(bus_id, kMonitorPeriodMs, &why);
    if (!monitor_ && rank_ == 0) std::printf("note: no power, clock or energy readings: %s\n", why.c_str());
  }

  std::string describe() const override {
    constexpr bool kFp32 = std::is_same_v<Act, float>;
    return detail::concat("on GPUs (", kFp32 ? "fp32" : "bf16", " compute, fp32 master, FSDP ",
                          o_.reshard_after_forward ? "reshard" : "no-reshard",
                          cuda_fsdp_options(o_).fused_optimizer ? ", AdamW per unit" : "", "; allocated per rank ",
                          format_gb(static_cast<double>(allocated_)), " GB, activations ",
                          format_gb(static_cast<double>(model_.activation_bytes())), " GB, recompute ",
                          recompute_name(o_.recompute), ", reduce ", o_.reduce_bf16 ? "bf16" : "fp32",
                          fsdp_.split_root() ? ", split root" : "",
                          world_ == 1 && o_.one_gpu_reshard ? ", one-GPU reshard" : "",
                          o_.cuda_graph ? "; CUDA graph: steps after the first replay a captured step" : "", ")");
  }
  int lag() const override { return 1; }

  // Step t's micro-batches are loaded here, all of them, while step t − 1 runs on the GPU; the host
  // waits only for step t − 2 to have finished with this parity's buffers.
  void run(const StepBatches& batches, float lr) override {
    const int64_t t = batches.step();
    const cudaStream_t s = stream_.get();
    const size_t parity = static_cast<size_t>(t % 2), rows = static_cast<size_t>(o_.batch) * o_.seq;
    wait(inputs_free_[parity], t - 2);
    int32_t* h = host_tokens_.data() + parity * step_tokens_;
    for (int a = 0; a < batches.count(); ++a) {
      int32_t* inputs = h + 2 * static_cast<size_t>(a) * rows;
      batches.load(a, inputs, inputs + rows);
    }
    int32_t* d = dev_tokens_.as<int32_t>() + parity * step_tokens_;
    const cuda::AdamWStep adam{lr, o_.adamw.beta1, o_.adamw.beta2, o_.adamw.eps, o_.adamw.weight_decay, t};
    const bool as_graph = o_.cuda_graph && t > start_step_ + 1;  // the first step runs eagerly
    step_start_[parity].record(s);
    if (profile::enabled()) record_memory();
    if (as_graph && graphs_[parity].ready()) {
      fsdp_.write_step_constants(adam);
      graphs_[parity].launch(s);
    } else if (as_graph) {  // capture this step, then run it
      // Before the first capture every stream has finished (CudaGraph's contract); later captures
      // follow a graph on the same stream.
      if (!graphs_[1 - parity].ready()) wait(fsdp_.step_done(t - 1), t - 1);
      cuda::CudaGraph::begin_capture(s);
      enqueue(t, d, h, adam);
      graphs_[parity].end_capture(s);
      graphs_[parity].launch(s);
    } else {
      enqueue(t, d, h, adam);
    }
    if (as_graph) graph_done_[parity].record(s);
    ran_as_graph_[parity] = as_graph;
    inputs_free_[parity].record(s);
    if (comms_->store) comms_->store->set("step/" + std::to_string(t) + "/" + std::to_string(rank_), {'1'});
#ifdef PYLON_HAVE_NCCL
    if (watchdog_) watchdog_->step_enqueued(t, s);  // the compute stream joins the others at a step's end
#endif
  }

  StepResult result(int64_t t) override {
    const size_t parity = static_cast<size_t>(t % 2);
    const cuda::Event& done = ran_as_graph_[parity] ? graph_done_[parity] : fsdp_.step_done(t);
    wait(done, t);
    const float* sc = host_scalars_.data() + 2 * parity;
    StepResult r;
    r.loss = static_cast<double>(sc[0]) / static_cast<double>(world_ * o_.grad_accum);
    r.grad_norm = std::sqrt(static_cast<double>(sc[1]));
    r.ms = done.elapsed_since(step_start_[parity]);
    peak_used_ = std::max(peak_used_, free_at_start_ - free_device_bytes());
    r.peak_mem_bytes = static_cast<int64_t>(peak_used_);
    if (monitor_) {  // step t has just finished (and t + 1 runs): the window ends here
      const profile::GpuWindow w = monitor_->mark_step();
      r.energy_j = w.energy_j, r.power_w = w.power_w, r.sm_clock_mhz = w.sm_mhz;
      r.power_capped_frac = w.power_capped_frac;
    }
    return r;
  }

  void add_metrics(int64_t t, nlohmann::json& row) override {
    const cuda::OverlapStats ov = fsdp_.overlap(t);
    row["allocated_bytes"] = allocated_;
    row["gather_ms"] = ov.gather_ms, row["reduce_ms"] = ov.reduce_ms;
    row["exposed_wait_ms"] = ov.exposed_wait_ms, row["tail_ms"] = ov.tail_ms;
    row["cuda_graph"] = ran_as_graph_[static_cast<size_t>(t % 2)];
  }

  // Forwards enqueued after the last step, then this rank's sum of micro-batch means, summed over
  // the ranks.
  double evaluate(const TokenFile& data, int64_t steps) override {
    PYLON_RANGE("eval", "eval");
    const cudaStream_t s = stream_.get();
    const size_t rows = static_cast<size_t>(o_.batch) * o_.seq, m = static_cast<size_t>(steps);
    PYLON_ASSERT(m * 2 * rows <= val_host_tokens_.size(), "evaluate: buffers for ", o_.eval_steps, " micro-batches");
    // After a graph, the forwards' eager waits on its events are dropped (cuda::Event): the graph
    // has finished first.
    for (size_t p = 0; p < 2; ++p)
      if (ran_as_graph_[p]) wait(graph_done_[p], -1);
    const DataLoader loader(data, o_.batch, o_.seq, rank_, world_);
    int32_t* h = val_host_tokens_.data();
    for (size_t i = 0; i < m; ++i) loader.load(static_cast<int64_t>(i), h + 2 * i * rows, h + (2 * i + 1) * rows);
    int32_t* d = val_tokens_.as<int32_t>();
    PYLON_CUDA_CHECK(cudaMemcpyAsync(d, h, m * 2 * rows * sizeof(int32_t), cudaMemcpyHostToDevice, s));
    PYLON_CUDA_CHECK(cudaMemsetAsync(val_losses_.get(), 0, m * sizeof(float), s));
    for (size_t i = 0; i < m; ++i) {
      fsdp_.set_forward_only(true);
      model_.forward(device_params<Act>(fsdp_), d + 2 * i * rows, d + (2 * i + 1) * rows, val_losses_.as<float>() + i,
                     s, &fsdp_);
    }
    fsdp_.set_forward_only(false);
    PYLON_CUDA_CHECK(
        cudaMemcpyAsync(val_host_losses_.data(), val_losses_.get(), m * sizeof(float), cudaMemcpyDeviceToHost, s));
    val_done_.record(s);
    wait(val_done_, -1);
    double sum = 0;
    for (size_t i = 0; i < m; ++i) sum += static_cast<double>(val_host_losses_.data()[i]);
    comms_->host->all_reduce_sum(&sum, 1);
    return sum / static_cast<double>(m * static_cast<size_t>(world_));
  }

  FsdpModel& checkpoint_shards() override {
    fsdp_.download(host_.shards());
    return host_;
  }

 private:
  static FsdpOptions host_options() {
    FsdpOptions h;
    h.return_memory = false;
    return h;
  }
#ifdef PYLON_HAVE_NCCL
  static cuda::NcclComm* gather(GpuComms& c) { return c.gather.get(); }
  static cuda::NcclComm* reduce(GpuComms& c) { return c.reduce.get(); }
#else
  static cuda::NcclComm* gather(GpuComms&) { return nullptr; }
  static cuda::NcclComm* reduce(GpuComms&) { return nullptr; }
#endif
  static std::string format_gb(double bytes) {
    char text[32];
    std::snprintf(text, sizeof(text), "%.2f", bytes / 1e9);
    return text;
  }

  // Waits for an event of this rank's steps (t: the step, for messages; -1 none); with NCCL the
  // watchdog bounds it (the main thread's own bound is a backstop, should the watchdog thread itself
  // be stuck).
  void wait(const cuda::Event& e, int64_t t) {
#ifdef PYLON_HAVE_NCCL
    if (world_ > 1)
      return cuda::wait_watched(e.get(), watched_, 2 * timeout_ + std::chrono::seconds(10), who_,
                                t >= 0 ? "step " + std::to_string(t) : std::string("evaluation"));
#endif
    (void)t;
    PYLON_CUDA_CHECK(cudaEventSynchronize(e.get()));
  }

  // Step t's work, from the tokens at `d` (this parity's, copied from `h`).
  void enqueue(int64_t t, int32_t* d, const int32_t* h, const cuda::AdamWStep& adam) {
    const cudaStream_t s = stream_.get();
    const size_t rows = static_cast<size_t>(o_.batch) * o_.seq;
    fsdp_.begin_step(adam, o_.grad_clip);
    PYLON_CUDA_CHECK(cudaMemcpyAsync(d, h, step_tokens_ * sizeof(int32_t), cudaMemcpyHostToDevice, s));
    for (int a = 0; a < o_.grad_accum; ++a) {
      const int32_t* inputs = d + 2 * static_cast<size_t>(a) * rows;
      const bool accumulate = fsdp_.begin_micro_step(a, o_.grad_accum);
      model_.forward_backward(device_params<Act>(fsdp_), fsdp_.grads(), inputs, inputs + rows, fsdp_.loss_sum(),
                              accumulate, s, &fsdp_);
    }
    fsdp_.end_step(host_scalars_.data() + 2 * (t % 2));
  }

  // Counter tracks of the device memory Pylon allocated, by use (the trace's memory view; its
  // device_used_bytes track is everything in use, the CUDA context, cuBLAS and NCCL included).
  void record_memory() const {
    const cuda::DeviceMemory& m = fsdp_.memory();
    const size_t workspace = model_.workspace_bytes();
    profile::record_counter("mem_weights_bytes", static_cast<double>(m.weights));
    profile::record_counter("mem_gradients_bytes", static_cast<double>(m.gradients));
    profile::record_counter("mem_optimizer_bytes", static_cast<double>(m.optimizer));
    profile::record_counter("mem_activations_bytes", static_cast<double>(model_.activation_bytes() - workspace));
    profile::record_counter("mem_workspace_bytes", static_cast<double>(m.workspace + workspace + dev_tokens_.bytes() +
                                                                        val_tokens_.bytes() + val_losses_.bytes()));
    profile::record_counter("mem_communication_bytes", static_cast<double>(m.communication));
  }

  const TrainOptions& o_;
  const int world_, rank_;
  const std::string who_;
  const size_t free_at_start_;
  const int64_t start_step_;
  const std::chrono::milliseconds timeout_;
  GpuComms* const comms_;
  cuda::MiniLLMCuda<Act> model_;
  ShardLayout layout_;
  FsdpModel host_;  // host copies: load, init, checkpoints
  cuda::Stream stream_;
  cuda::FsdpCuda fsdp_;
  std::vector<cuda::NcclComm*> watched_;
  size_t step_tokens_ = 0;  // grad_accum x [inputs, targets]
  // One step's tokens per step parity: step t's copy reads parity t % 2, which the host refills once
  // step t − 2 has finished.
  cuda::PinnedArray<int32_t> host_tokens_;
  cuda::DeviceBuffer dev_tokens_;
  cuda::PinnedArray<float> host_scalars_{4};  // per step parity: Σ losses, grad norm²
  cuda::PinnedArray<int32_t> val_host_tokens_;
  cuda::PinnedArray<float> val_host_losses_;
  cuda::DeviceBuffer val_tokens_, val_losses_;
  size_t allocated_ = 0, peak_used_ = 0;
  // Per step parity: the step that used it has finished (its tokens and AdamW constants may be
  // rewritten); when it was a graph, when it ended (timing); whether it was.
  std::vector<cuda::Event> inputs_free_ = std::vector<cuda::Event>(2);
  cuda::Event step_start_[2] = {cuda::Event(true), cuda::Event(true)};
  cuda::Event graph_done_[2] = {cuda::Event(true), cuda::Event(true)};
  bool ran_as_graph_[2] = {false, false};
  cuda::CudaGraph graphs_[2];
  cuda::Event val_done_;
  std::unique_ptr<TcpStore> watchdog_store_;
#ifdef PYLON_HAVE_NCCL
  std::unique_ptr<cuda::StepWatchdog> watchdog_;
#endif
  static constexpr int kMonitorPeriodMs = 20;
  std::unique_ptr<profile::GpuMonitor> monitor_;  // null without NVML
};

// The run on this rank's GPU: its communicators, the step, the loop.
template <typename Act>
TrainResult train_cuda_as(const TrainOptions& o, const DistEnv& env, std::chrono::milliseconds timeout) {
  const int devices = cuda::device_count();
  PYLON_CHECK(devices > 0, "--device cuda: no CUDA device is visible (driver missing, or "
                           "CUDA_VISIBLE_DEVICES empty)");
  const CheckpointInfo resume = check_train_options(o);
  const std::string who = "rank " + std::to_string(env.rank);
  PYLON_CHECK(env.local_rank < devices, who, ": local rank ", env.local_rank, " needs GPU ", env.local_rank,
              " but only ", devices, " are visible");
  PYLON_CUDA_CHECK(cudaSetDevice(env.local_rank));
  const size_t free_at_start = free_device_bytes();
  GpuComms comms = connect(env, timeout);
  check_ranks_agree(o, *comms.host);  // ranks started by hand with other flags: one error each
  profile::ProfileOptions profile = o.profile;
  profile.device = true;  // CUPTI kernels, copies and launch flows
  const int64_t start_step = o.resume_dir.empty() ? 0 : resume.step;
  profile::check_schedule(profile, o.steps - start_step);
  PYLON_CHECK(!o.profile.counters || env.world == 1, who, ": --profile-roofline in a world of ", env.world,
              ": kernel replay would run NCCL's kernels out of step with their peers; profile one rank");
  // The memory plan against what is free now (the communicators' buffers taken), before the step
  // allocates anything.
  check_fits_on_gpu(cuda_step_memory(o, env.world), o, env.local_rank, static_cast<int64_t>(free_device_bytes()));
  CudaStep<Act> step(o, resume, env, comms, timeout, free_at_start);
  return run_training(o, resume, *comms.host, step, profile);
}

}  // namespace

MemoryPlan cuda_step_memory(const TrainOptions& o, int world) {
  CudaScratch scratch;
  scratch.model = &cuda::MiniLLMCuda<cuda::bf16>::workspace_bytes;  // the same for both activation types
  scratch.fsdp = &cuda::FsdpCuda::scratch_bytes;
  scratch.gemm = static_cast<int64_t>(cuda::Gemm::kWorkspaceBytes);
  return cuda_train_memory(o, world, scratch);
}

TrainResult train_cuda(const TrainOptions& o, const DistEnv& env, std::chrono::milliseconds timeout) {
  PYLON_CHECK(o.dtype == "bf16" || o.dtype == "fp32", "--device cuda: --dtype must be bf16 or fp32, got '", o.dtype,
              "'");
  if (o.dtype == "fp32") return train_cuda_as<float>(o, env, timeout);
  return train_cuda_as<cuda::bf16>(o, env, timeout);
}

}  // namespace pylon
