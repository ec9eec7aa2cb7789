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
#include "dist/fault_injection.h"
#include "dist/fsdp.h"
#include "dist/shard_layout.h"
#include "io/safetensors.h"
#include "io/token_file.h"
#include "model/cuda/minillm_cuda.h"
#include "ops/cuda/runtime.h"
#include "profile/session.h"
#include "profile/tracer.h"
#include "train/checkpoint.h"
#include "train/data_loader.h"
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

// The loop with activations and gathered weights of type Act (cuda::bf16 or float).
template <typename Act>
TrainResult train_cuda_as(const TrainOptions& o, const DistEnv& env, std::chrono::milliseconds timeout) {
  constexpr bool kFp32 = std::is_same_v<Act, float>;
  const int devices = cuda::device_count();
  PYLON_CHECK(devices > 0, "--device cuda: no CUDA device is visible (driver missing, or "
                           "CUDA_VISIBLE_DEVICES empty)");
  const CheckpointInfo resume = check_train_options(o);
  const int rank = env.rank, world = env.world;
  const bool lead = rank == 0;
  const std::string who = "rank " + std::to_string(rank);
  PYLON_CHECK(env.local_rank < devices, who, ": local rank ", env.local_rank, " needs GPU ",
              env.local_rank, " but only ", devices, " are visible");
  PYLON_CUDA_CHECK(cudaSetDevice(env.local_rank));
  const size_t free_at_start = free_device_bytes();
  GpuComms comms = connect(env, timeout);

  // The model, this rank's shards and their values: resumed, loaded, or from the seed.
  const ModelConfig config = o.model;
  const int64_t start_step = o.resume_dir.empty() ? 0 : resume.step;
  const std::string tokenizer = o.tokenizer.empty() ? resume.tokenizer_path : o.tokenizer;
  cuda::MiniLLMCuda<Act> model(config, o.batch, o.seq, o.recompute);
  const ShardLayout layout(model.table(), world);
  FsdpOptions host_options;
  host_options.return_memory = false;
  FsdpModel host(layout, *comms.host, host_options);  // host copies: load, init, checkpoints
  if (!o.resume_dir.empty())
    load_checkpoint_shards(resume, layout, rank, host.shards());
  else if (!o.init_from.empty())
    host.load_params(SafetensorsReader(o.init_from));
  else
    host.init_params(o.seed);

  cuda::Stream stream;
  const cudaStream_t s = stream.get();
  cuda::FsdpCudaOptions fo;
  fo.reshard_after_forward = o.reshard_after_forward;
  fo.no_sync = o.no_sync;
  // Without clipping and with one reduction per step, AdamW runs per unit as its gradient
  // arrives and no gradient shard is kept.
  fo.fused_optimizer = o.grad_clip <= 0 && (o.grad_accum == 1 || o.no_sync);
  fo.measure_overlap = !o.cuda_graph;  // timing probes are host-read events: not inside graphs
  fo.reduce_bf16 = o.reduce_bf16;
  fo.split_root = o.split_root;
  fo.fp32_params = kFp32;
#ifdef PYLON_HAVE_NCCL
  cuda::FsdpCuda fsdp(layout, s, comms.gather.get(), comms.reduce.get(), fo);
  std::vector<cuda::NcclComm*> watched;
  if (comms.gather) watched = {comms.gather.get(), comms.reduce.get()};
#else
  cuda::FsdpCuda fsdp(layout, s, nullptr, nullptr, fo);
#endif
  fsdp.upload(host.shards());

  const TokenFile data(o.data);
  data.check_vocab(config.vocab);
  const DataLoader loader(data, o.batch, o.seq, rank, world);
  const size_t rows = static_cast<size_t>(o.batch) * o.seq;
  // One step's tokens, grad_accum x (inputs, targets), per step parity: step t's copy reads parity
  // t % 2, which the host refills once step t − 2 has finished.
  const size_t step_tokens = static_cast<size_t>(o.grad_accum) * 2 * rows;
  cuda::PinnedArray<int32_t> host_tokens(2 * step_tokens);
  cuda::DeviceBuffer dev_tokens(2 * step_tokens * sizeof(int32_t));
  cuda::PinnedArray<float> host_scalars(4);  // per step parity: Σ losses, grad norm²
  // Validation (--val-data with --eval-every): o.eval_steps micro-batches of the validation file,
  // each rank scoring its share of the rows as in training; tokens and losses of all at once.
  std::unique_ptr<TokenFile> val;
  if (!o.val_data.empty() && o.eval_every > 0) {
    val = std::make_unique<TokenFile>(o.val_data);
    val->check_vocab(config.vocab);
  }
  const size_t eval_steps = val ? static_cast<size_t>(o.eval_steps) : 0;
  std::unique_ptr<cuda::PinnedArray<int32_t>> val_host_tokens;
  std::unique_ptr<cuda::PinnedArray<float>> val_host_losses;
  if (val) {
    val_host_tokens = std::make_unique<cuda::PinnedArray<int32_t>>(eval_steps * 2 * rows);
    val_host_losses = std::make_unique<cuda::PinnedArray<float>>(eval_steps);
  }
  cuda::DeviceBuffer val_tokens(eval_steps * 2 * rows * sizeof(int32_t)), val_losses(eval_steps * sizeof(float));
  const int64_t tokens_per_step = loader.tokens_per_micro_step() * o.grad_accum;  // all ranks
  model.set_loss_scale(1.f / static_cast<float>(tokens_per_step));
  const int64_t global_rows = static_cast<int64_t>(o.batch) * world * o.grad_accum;

  const size_t allocated = fsdp.device_bytes() + model.activation_bytes() + dev_tokens.bytes() +
                           val_tokens.bytes() + val_losses.bytes();
  if (lead) {
    std::printf("model: %s preset, %lld parameters (V=%d D=%d L=%d H=%d) on %d GPU%s (%s compute, fp32 "
                "master, FSDP %s%s); %d x batch %d x %d tokens x %d accum = %lld tokens/step; "
                "allocated per rank %.2f GB (activations %.2f GB, recompute %s, reduce %s%s)%s%s\n",
                config.preset.name, static_cast<long long>(layout.table().total), config.vocab,
                config.dim, config.layers, config.heads, world, world > 1 ? "s" : "", kFp32 ? "fp32" : "bf16",
                o.reshard_after_forward ? "reshard" : "no-reshard",
                fo.fused_optimizer ? ", AdamW per unit" : "", world, o.batch, o.seq, o.grad_accum,
                static_cast<long long>(tokens_per_step), static_cast<double>(allocated) / 1e9,
                static_cast<double>(model.activation_bytes()) / 1e9, recompute_name(o.recompute),
                o.reduce_bf16 ? "bf16" : "fp32", o.split_root ? ", split root" : "",
                start_step ? (", resumed at step " + std::to_string(start_step)).c_str() : "",
                o.cuda_graph ? "; CUDA graph: steps after the first replay a captured step" : "");
    std::fflush(stdout);
  }

  // Per step parity: the step that used it has finished (its tokens and AdamW constants may be
  // rewritten); when it was a graph, when it ended (timing); whether it was.
  std::vector<cuda::Event> inputs_free(2);
  for (auto& e : inputs_free) e.record(s);
  cuda::Event step_start[2] = {cuda::Event(true), cuda::Event(true)};
  cuda::Event graph_done[2] = {cuda::Event(true), cuda::Event(true)};
  bool ran_as_graph[2] = {false, false};
  cuda::CudaGraph graphs[2];
  std::FILE* metrics = nullptr;
  if (lead && !o.metrics_path.empty()) {
    metrics = std::fopen(o.metrics_path.c_str(), start_step ? "a" : "w");
    PYLON_CHECK(metrics, o.metrics_path, ": cannot open for writing");
  }

  // World > 1: a watchdog thread ends this rank when a step does not complete within `timeout`
  // (a dead or hung peer), naming the ranks that did not enqueue it (each rank sets
  // step/<t>/<rank> in the store once step t is enqueued; the watchdog asks through a store
  // connection of its own, the store not being thread-safe).
  std::unique_ptr<TcpStore> watchdog_store;
#ifdef PYLON_HAVE_NCCL
  std::unique_ptr<cuda::StepWatchdog> watchdog;
  if (world > 1) {
    watchdog_store = std::make_unique<TcpStore>(env.master_addr, env.master_port, false, timeout, who);
    auto late = [&store = *watchdog_store, world](int64_t t) -> std::string {
      std::string missing;
      for (int r = 0; r < world; ++r) try {
          store.wait({"step/" + std::to_string(t) + "/" + std::to_string(r)}, std::chrono::milliseconds(500));
        } catch (const Error&) {
          missing += (missing.empty() ? "rank " : ", rank ") + std::to_string(r);
        }
      return missing.empty() ? "every rank enqueued step " + std::to_string(t) + ": one died or hangs inside it"
                             : missing + " did not enqueue step " + std::to_string(t) + " (died or hangs)";
    };
    watchdog = std::make_unique<cuda::StepWatchdog>(watched, timeout, who, late);
  }
#endif
  // Waits for an event of this rank's steps; with NCCL the watchdog bounds it (the main thread's
  // own bound is a backstop, should the watchdog thread itself be stuck).
  auto wait = [&](const cuda::Event& e, int64_t t) {
#ifdef PYLON_HAVE_NCCL
    if (world > 1)
      return cuda::wait_watched(e.get(), watched, 2 * timeout + std::chrono::seconds(10), who,
                                "step " + std::to_string(t));
#endif
    (void)t;
    PYLON_CUDA_CHECK(cudaEventSynchronize(e.get()));
  };

  TrainResult result;
  const Stopwatch clock;
  size_t peak_used = 0;
  // val_loss < 0: no validation at step t.
  auto report = [&](int64_t t, double val_loss) {
    const cuda::Event& done = ran_as_graph[t % 2] ? graph_done[t % 2] : fsdp.step_done(t);
    wait(done, t);
    const float* sc = host_scalars.data() + 2 * (t % 2);
    const double loss = static_cast<double>(sc[0]) / static_cast<double>(world * o.grad_accum);
    const double grad_norm = std::sqrt(static_cast<double>(sc[1]));
    const double ms = done.elapsed_since(step_start[t % 2]);
    peak_used = std::max(peak_used, free_at_start - free_device_bytes());
    PYLON_CHECK(std::isfinite(loss), "training diverged at step ", t, " (loss ", loss, ")");
    const cuda::OverlapStats ov = fsdp.overlap(t);
    const float lr = lr_at(o.schedule, t - 1, o.steps);
    if (metrics) {
      nlohmann::json row{{"step", t}, {"loss", loss}, {"lr", lr}, {"grad_norm", grad_norm},
                         {"tokens_per_s", static_cast<double>(tokens_per_step) / (ms / 1e3)},
                         {"peak_mem_bytes", peak_used}, {"allocated_bytes", allocated},
                         {"step_ms", ms}, {"world", world}, {"gather_ms", ov.gather_ms},
                         {"reduce_ms", ov.reduce_ms}, {"exposed_wait_ms", ov.exposed_wait_ms},
                         {"tail_ms", ov.tail_ms}, {"cuda_graph", ran_as_graph[t % 2]}};
      if (val_loss >= 0) row["val_loss"] = val_loss;
      const std::string line = row.dump() + "\n";
      PYLON_CHECK(std::fputs(line.c_str(), metrics) >= 0 && std::fflush(metrics) == 0, "cannot write metrics");
    }
    if (lead && (t == start_step + 1 || t == o.steps || (o.log_every > 0 && t % o.log_every == 0) ||
                 val_loss >= 0)) {
      const std::string val_text = val_loss >= 0 ? "  val " + std::to_string(val_loss).substr(0, 6) : "";
      std::printf("step %6lld/%lld  loss %.4f%s  lr %.2e  norm %.3f  %.0f tok/s/GPU  %.1f ms  mem %.2f GB\n",
                  static_cast<long long>(t), static_cast<long long>(o.steps), loss, val_text.c_str(),
                  static_cast<double>(lr), grad_norm,
                  static_cast<double>(tokens_per_step) / world / (ms / 1e3), ms,
                  static_cast<double>(peak_used) / 1e9);
      std::fflush(stdout);
    }
    result.final_loss = static_cast<float>(loss);
    result.steps_done = t;
    if (val_loss >= 0) result.final_val_loss = val_loss;
  };
  // The mean validation loss after step t's update (the CPU trainer's evaluate_sharded): forwards
  // enqueued after step t, then this rank's sum of micro-batch means, summed over the ranks.
  cuda::Event val_done;
  auto evaluate = [&](int64_t t) {
    PYLON_RANGE("eval", "eval");
    // After a graph, the forwards' eager waits on its events are dropped (cuda::Event): the graph
    // has finished first.
    if (ran_as_graph[t % 2]) wait(graph_done[t % 2], t);
    const DataLoader val_loader(*val, o.batch, o.seq, rank, world);
    int32_t* h = val_host_tokens->data();
    for (size_t m = 0; m < eval_steps; ++m)
      val_loader.load(static_cast<int64_t>(m), h + 2 * m * rows, h + (2 * m + 1) * rows);
    int32_t* d = val_tokens.as<int32_t>();
    PYLON_CUDA_CHECK(cudaMemcpyAsync(d, h, val_tokens.bytes(), cudaMemcpyHostToDevice, s));
    PYLON_CUDA_CHECK(cudaMemsetAsync(val_losses.get(), 0, val_losses.bytes(), s));
    for (size_t m = 0; m < eval_steps; ++m) {
      fsdp.set_forward_only(true);
      model.forward(device_params<Act>(fsdp), d + 2 * m * rows, d + (2 * m + 1) * rows, val_losses.as<float>() + m,
                    s, &fsdp);
    }
    fsdp.set_forward_only(false);
    PYLON_CUDA_CHECK(cudaMemcpyAsync(val_host_losses->data(), val_losses.get(), val_losses.bytes(),
                                     cudaMemcpyDeviceToHost, s));
    val_done.record(s);
    wait(val_done, t);
    double sum = 0;
    for (size_t m = 0; m < eval_steps; ++m) sum += static_cast<double>(val_host_losses->data()[m]);
    comms.host->all_reduce_sum(&sum, 1);
    return sum / static_cast<double>(eval_steps * static_cast<size_t>(world));
  };
  auto save = [&](int64_t t) {
    fsdp.download(host.shards());
    const nlohmann::json trainer = {
        {"options", {{"device", "cuda"}, {"batch", o.batch}, {"seq", o.seq}, {"grad_accum", o.grad_accum},
                     {"lr", o.adamw.lr}, {"world", world}}},
        {"global_batch_rows", global_rows}};
    const std::string path = save_checkpoint(o.save_dir, {config, t, trainer, tokenizer}, host);
    if (lead) std::printf("saved checkpoint %s\n", path.c_str());
  };

  profile::ProfileOptions profile_options = o.profile;
  profile_options.device = true;  // CUPTI kernels, copies and launch flows
  profile::check_schedule(profile_options, o.steps - start_step);
  PYLON_CHECK(!o.profile.counters || world == 1, who, ": --profile-roofline in a world of ", world,
              ": kernel replay would run NCCL's kernels out of step with their peers; profile one rank");
  profile::ProfileSession profiler(profile_options, rank);

  int64_t reported = start_step;
  auto catch_up = [&](int64_t upto) {
    while (reported < upto) report(++reported, -1);
  };
  // Step t's work, from the tokens at `d` (this parity's, copied from `h`).
  auto enqueue_step = [&](int64_t t, int32_t* d, const int32_t* h) {
    const int64_t step = t - 1;
    fsdp.begin_step({lr_at(o.schedule, step, o.steps), o.adamw.beta1, o.adamw.beta2, o.adamw.eps,
                     o.adamw.weight_decay, t},
                    o.grad_clip);
    PYLON_CUDA_CHECK(cudaMemcpyAsync(d, h, step_tokens * sizeof(int32_t), cudaMemcpyHostToDevice, s));
    for (int a = 0; a < o.grad_accum; ++a) {
      const int32_t* inputs = d + static_cast<size_t>(2 * a) * rows;
      const bool accumulate = fsdp.begin_micro_step(a, o.grad_accum);
      model.forward(device_params<Act>(fsdp), inputs, inputs + rows, fsdp.loss_sum(), s, &fsdp);
      model.backward(device_params<Act>(fsdp), fsdp.grads(), accumulate, s, &fsdp);
    }
    fsdp.end_step(host_scalars.data() + 2 * (t % 2));
  };
  for (int64_t step = start_step; step < o.steps; ++step) {
    const int64_t t = step + 1;
    const size_t parity = static_cast<size_t>(t % 2);
    profiler.step(step - start_step);
    PYLON_RANGE("step", "train_step");
    inject_test_faults(rank, t);
    wait(inputs_free[parity], t - 2);  // the host may refill this parity's buffers
    int32_t* h = host_tokens.data() + parity * step_tokens;
    int32_t* d = dev_tokens.as<int32_t>() + parity * step_tokens;
    for (int a = 0; a < o.grad_accum; ++a) {
      int32_t* inputs = h + static_cast<size_t>(2 * a) * rows;
      loader.load(step * o.grad_accum + a, inputs, inputs + rows);
    }
    const bool as_graph = o.cuda_graph && t > start_step + 1;  // the first step runs eagerly
    step_start[parity].record(s);
    if (as_graph && graphs[parity].ready()) {
      fsdp.write_step_constants({lr_at(o.schedule, step, o.steps), o.adamw.beta1, o.adamw.beta2, o.adamw.eps,
                                 o.adamw.weight_decay, t});
      graphs[parity].launch(s);
    } else if (as_graph) {  // capture this step, then run it
      // Before the first capture every stream has finished (CudaGraph's contract); later captures
      // follow a graph on the same stream.
      if (!graphs[1 - parity].ready()) wait(fsdp.step_done(t - 1), t - 1);
      cuda::CudaGraph::begin_capture(s);
      enqueue_step(t, d, h);
      graphs[parity].end_capture(s);
      graphs[parity].launch(s);
    } else {
      enqueue_step(t, d, h);
    }
    if (as_graph) graph_done[parity].record(s);
    ran_as_graph[parity] = as_graph;
    inputs_free[parity].record(s);
    if (comms.store) comms.store->set("step/" + std::to_string(t) + "/" + std::to_string(rank), {'1'});
#ifdef PYLON_HAVE_NCCL
    if (watchdog) watchdog->step_enqueued(t, s);  // the compute stream joins the others at a step's end
#endif
    catch_up(t - 1);  // step t runs meanwhile
    if (val && (t % o.eval_every == 0 || t == o.steps)) {
      const double val_loss = evaluate(t);
      report(++reported, val_loss);
    }
    if (!o.save_dir.empty() && ((o.save_every > 0 && t % o.save_every == 0) || t == o.steps)) {
      catch_up(t);
      save(t);
    }
  }
  catch_up(o.steps);
  // Every rank's peak, for the summary (the metrics carry rank 0's).
  std::vector<double> peaks(static_cast<size_t>(world), 0.0);
  peaks[static_cast<size_t>(rank)] = static_cast<double>(peak_used);
  comms.host->all_reduce_sum(peaks.data(), peaks.size());
  result.peak_mem_bytes = static_cast<int64_t>(*std::max_element(peaks.begin(), peaks.end()));
  if (world > 1 && lead) {
    std::printf("peak device memory in use per rank:");
    for (double p : peaks) std::printf(" %.2f GB", p / 1e9);
    std::printf(" (allocated by Pylon %.2f GB each)\n", static_cast<double>(allocated) / 1e9);
  }
  profiler.finish();
  comms.host->barrier();  // nobody tears down NCCL while a peer may still need it
  if (metrics) std::fclose(metrics);
  result.seconds = clock.seconds();
  return result;
}

}  // namespace

TrainResult train_cuda(const TrainOptions& o, const DistEnv& env, std::chrono::milliseconds timeout) {
  PYLON_CHECK(o.dtype == "bf16" || o.dtype == "fp32", "--device cuda: --dtype must be bf16 or fp32, got '", o.dtype,
              "'");
  if (o.dtype == "fp32") return train_cuda_as<float>(o, env, timeout);
  return train_cuda_as<cuda::bf16>(o, env, timeout);
}

}  // namespace pylon
