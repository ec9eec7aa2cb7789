#include "train/cuda/trainer_cuda.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "dist/communicator.h"
#include "dist/fsdp.h"
#include "dist/shard_layout.h"
#include "core/timer.h"
#include "io/safetensors.h"
#include "io/token_file.h"
#include "model/cuda/minillm_cuda.h"
#include "model/weights.h"
#include "ops/cuda/adamw.h"
#include "ops/cuda/cast.h"
#include "ops/cuda/reduce.h"
#include "ops/cuda/runtime.h"
#include "profile/session.h"
#include "profile/tracer.h"
#include "train/checkpoint.h"
#include "train/data_loader.h"

namespace pylon {
namespace {

// Page-locked host memory, so copies to the device run asynchronously.
template <typename T>
class PinnedArray {
 public:
  explicit PinnedArray(size_t n) : n_(n) { PYLON_CUDA_CHECK(cudaMallocHost(&p_, n * sizeof(T))); }
  ~PinnedArray() { cudaFreeHost(p_); }
  PinnedArray(const PinnedArray&) = delete;
  PinnedArray& operator=(const PinnedArray&) = delete;
  T* data() const { return p_; }
  T& operator[](size_t i) const { return p_[i]; }

 private:
  T* p_ = nullptr;
  size_t n_;
};

// The optimizer state in table order, as the device holds it; on disk it is the sharded format
// (train/checkpoint.h) of a world of one, so CPU and GPU runs resume each other's checkpoints.
struct HostState {
  int64_t step = 0;
  std::vector<float> params, m, v;
  std::string tokenizer;
};

void copy_units(const ShardLayout& layout, std::vector<UnitShards>& shards, HostState& flat,
                bool to_shards) {
  for (size_t u = 0; u < layout.units().size(); ++u)
    for (const UnitParam& p : layout.units()[u].params) {
      float* unit_side[3] = {shards[u].param.data(), shards[u].m.data(), shards[u].v.data()};
      float* flat_side[3] = {flat.params.data(), flat.m.data(), flat.v.data()};
      for (int k = 0; k < 3; ++k) {
        float* a = unit_side[k] + p.unit_offset;
        float* b = flat_side[k] + p.flat_offset;
        std::copy_n(to_shards ? b : a, p.numel, to_shards ? a : b);
      }
    }
}

HostState load_state(const std::string& dir, const ModelConfig& config) {
  const CheckpointInfo info = read_checkpoint_info(dir);
  PYLON_CHECK(info.config.dim == config.dim && info.config.layers == config.layers &&
                  info.config.heads == config.heads && info.config.vocab == config.vocab &&
                  info.config.preset == config.preset,
              dir, ": checkpoint model differs from the requested one");
  const ShardLayout layout(param_table(config), 1);
  std::vector<UnitShards> shards;
  load_checkpoint_shards(info, layout, 0, shards);
  HostState s;
  s.step = info.step, s.tokenizer = info.tokenizer_path;
  const int64_t n = layout.table().total;
  s.params.resize(n), s.m.resize(n), s.v.resize(n);
  copy_units(layout, shards, s, /*to_shards=*/false);
  return s;
}

std::string save_state(const std::string& dir, const ModelConfig& config, HostState& s,
                       const nlohmann::json& options) {
  const auto comm = make_single_rank_communicator();
  const ShardLayout layout(param_table(config), 1);
  FsdpModel host(layout, *comm, FsdpOptions{});
  copy_units(layout, host.shards(), s, /*to_shards=*/true);
  return save_checkpoint(dir, CheckpointMeta{config, s.step, {{"options", options}}, s.tokenizer}, host);
}

size_t free_device_bytes() {
  size_t free = 0, total = 0;
  PYLON_CUDA_CHECK(cudaMemGetInfo(&free, &total));
  return free;
}

}  // namespace

TrainResult train_cuda(const TrainOptions& o) {
  using cuda::bf16;
  PYLON_CHECK(cuda::device_count() > 0, "--device cuda: no CUDA device is visible (driver missing, "
                                        "or CUDA_VISIBLE_DEVICES empty)");
  PYLON_CHECK(o.batch > 0 && o.seq > 0 && o.steps > 0 && o.grad_accum > 0,
              "--batch, --seq, --steps and --grad-accum must be positive");
  PYLON_CHECK(o.init_from.empty() || o.resume_dir.empty(), "--init-from and --resume exclude each other");
  PYLON_CUDA_CHECK(cudaSetDevice(0));
  const size_t free_at_start = free_device_bytes();

  // Host copies of the initial state (resumed, loaded or initialised), then on to the device.
  ModelConfig config = o.model;
  HostState state;
  if (!o.resume_dir.empty()) {
    state = load_state(o.resume_dir, config);
    PYLON_CHECK(state.step < o.steps, o.resume_dir, ": already at step ", state.step);
  }
  if (!o.tokenizer.empty()) state.tokenizer = o.tokenizer;
  cuda::MiniLLMCuda model(config, o.batch, o.seq);
  const ParamTable& table = model.table();
  const int64_t n = table.total;
  if (state.params.empty()) {
    state.params.resize(n);
    if (!o.init_from.empty())
      load_weights(SafetensorsReader(o.init_from), table, state.params.data());
    else
      init_params(table, o.seed, state.params.data());
    state.m.assign(n, 0.f), state.v.assign(n, 0.f);
  }
  const size_t fbytes = static_cast<size_t>(n) * sizeof(float);
  cuda::DeviceBuffer master(fbytes), m(fbytes), v(fbytes), grads(fbytes);
  cuda::DeviceBuffer weights(static_cast<size_t>(n) * sizeof(bf16));
  cuda::DeviceBuffer scalars(4 * sizeof(float));  // loss_sum, grad norm², clip coefficient
  cuda::DeviceBuffer reduce_ws(cuda::reduce_workspace_bytes(n));
  PYLON_CUDA_CHECK(cudaMemcpy(master.get(), state.params.data(), fbytes, cudaMemcpyHostToDevice));
  PYLON_CUDA_CHECK(cudaMemcpy(m.get(), state.m.data(), fbytes, cudaMemcpyHostToDevice));
  PYLON_CUDA_CHECK(cudaMemcpy(v.get(), state.v.data(), fbytes, cudaMemcpyHostToDevice));
  std::vector<const bf16*> P(table.params.size());
  std::vector<float*> G(table.params.size());
  for (size_t i = 0; i < table.params.size(); ++i) {
    P[i] = weights.as<bf16>() + table.params[i].offset;
    G[i] = grads.as<float>() + table.params[i].offset;
  }

  const TokenFile data(o.data);
  data.check_vocab(config.vocab);
  const DataLoader loader(data, o.batch, o.seq);
  const size_t rows = static_cast<size_t>(o.batch) * o.seq;
  PinnedArray<int32_t> host_tokens(4 * rows);  // 2 slots x (inputs, targets)
  cuda::DeviceBuffer dev_tokens(4 * rows * sizeof(int32_t));
  PinnedArray<float> host_scalars(4);
  const int64_t tokens_per_step = loader.tokens_per_micro_step() * o.grad_accum;
  model.set_loss_scale(1.f / static_cast<float>(tokens_per_step));

  cuda::Stream stream;
  const cudaStream_t s = stream.get();
  cuda::cast_f32_to_bf16(weights.as<bf16>(), master.as<float>(), n, s);
  std::vector<cuda::Event> slot_free;  // the device finished reading a token slot
  slot_free.emplace_back(), slot_free.emplace_back();
  slot_free[0].record(s), slot_free[1].record(s);
  cuda::Event step_start(true), step_end(true);
  float* loss_sum = scalars.as<float>();
  float* norm_sq = loss_sum + 1;
  float* clip = loss_sum + 2;

  const size_t planned = 4 * fbytes + static_cast<size_t>(n) * sizeof(bf16) + model.activation_bytes() +
                         reduce_ws.bytes();
  std::printf("model: %s preset, %lld parameters on cuda:0 (bf16 compute, fp32 master); batch %d x %d "
              "x %d accum = %lld tokens/step; planned device memory %.2f GB\n",
              preset_name(config.preset), static_cast<long long>(n), o.batch, o.seq, o.grad_accum,
              static_cast<long long>(tokens_per_step), static_cast<double>(planned) / 1e9);
  std::fflush(stdout);

  std::FILE* metrics = nullptr;
  if (!o.metrics_path.empty()) {
    metrics = std::fopen(o.metrics_path.c_str(), state.step ? "a" : "w");
    PYLON_CHECK(metrics, o.metrics_path, ": cannot open for writing");
  }
  profile::ProfileOptions profile_options = o.profile;
  profile_options.device = true;
  profile::check_schedule(profile_options, o.steps - state.step);
  profile::ProfileSession profiler(profile_options, 0);
  TrainResult result;
  const Stopwatch clock;
  size_t peak_used = 0;
  // Reports step `done` (1-based) once its scalars have reached the host.
  auto report = [&](int64_t done, float lr) {
    PYLON_CUDA_CHECK(cudaEventSynchronize(step_end.get()));
    const double loss = static_cast<double>(host_scalars[0]) / o.grad_accum;
    const double grad_norm = std::sqrt(static_cast<double>(host_scalars[1]));
    const double ms = step_end.elapsed_since(step_start);
    const double tok_s = static_cast<double>(tokens_per_step) / (ms / 1e3);
    peak_used = std::max(peak_used, free_at_start - free_device_bytes());
    PYLON_CHECK(std::isfinite(loss), "training diverged at step ", done, " (loss ", loss, ")");
    if (metrics) {
      const std::string line = nlohmann::json{{"step", done}, {"loss", loss}, {"lr", lr},
                                              {"grad_norm", grad_norm}, {"tokens_per_s", tok_s},
                                              {"peak_mem_bytes", peak_used}, {"step_ms", ms}}
                                   .dump() + "\n";
      PYLON_CHECK(std::fputs(line.c_str(), metrics) >= 0 && std::fflush(metrics) == 0,
                  "cannot write metrics");
    }
    if (done == state.step + 1 || done == o.steps || (o.log_every > 0 && done % o.log_every == 0)) {
      std::printf("step %6lld/%lld  loss %.4f  lr %.2e  norm %.3f  %.0f tok/s  %.1f ms  mem %.2f GB\n",
                  static_cast<long long>(done), static_cast<long long>(o.steps), loss,
                  static_cast<double>(lr), grad_norm, tok_s, ms, static_cast<double>(peak_used) / 1e9);
      std::fflush(stdout);
    }
    result.final_loss = static_cast<float>(loss);
    result.steps_done = done;
    result.peak_mem_bytes = static_cast<int64_t>(peak_used);
  };

  for (int64_t step = state.step; step < o.steps; ++step) {
    profiler.step(step - state.step);
    PYLON_RANGE("step", "train_step");
    step_start.record(s);
    PYLON_CUDA_CHECK(cudaMemsetAsync(loss_sum, 0, sizeof(float), s));
    for (int a = 0; a < o.grad_accum; ++a) {
      const int64_t micro = step * o.grad_accum + a;
      const size_t slot = static_cast<size_t>(micro % 2);
      PYLON_CUDA_CHECK(cudaEventSynchronize(slot_free[slot].get()));  // host may reuse the slot
      int32_t* h = host_tokens.data() + slot * 2 * rows;
      int32_t* d = dev_tokens.as<int32_t>() + slot * 2 * rows;
      loader.load(micro, h, h + rows);
      PYLON_CUDA_CHECK(cudaMemcpyAsync(d, h, 2 * rows * sizeof(int32_t), cudaMemcpyHostToDevice, s));
      model.forward(P, d, d + rows, loss_sum, s);
      model.backward(P, G, /*accumulate=*/a > 0, s);
      slot_free[slot].record(s);
    }
    cuda::sum_of_squares(norm_sq, grads.as<float>(), n, reduce_ws.get(), s);
    cuda::clip_coefficient(clip, norm_sq, o.grad_clip, s);
    const float lr = lr_at(o.schedule, step, o.steps);
    cuda::adamw_update(master.as<float>(), m.as<float>(), v.as<float>(), grads.as<float>(),
                       weights.as<bf16>(), n, lr, o.adamw.beta1, o.adamw.beta2, o.adamw.eps,
                       o.adamw.weight_decay, step + 1, clip, s);
    PYLON_CUDA_CHECK(cudaMemcpyAsync(host_scalars.data(), loss_sum, 2 * sizeof(float),
                                     cudaMemcpyDeviceToHost, s));
    step_end.record(s);
    report(step + 1, lr);
    if (!o.save_dir.empty() && ((o.save_every > 0 && (step + 1) % o.save_every == 0) || step + 1 == o.steps)) {
      PYLON_CUDA_CHECK(cudaStreamSynchronize(s));  // explicit: a checkpoint is outside the step
      HostState c{step + 1, std::vector<float>(n), std::vector<float>(n), std::vector<float>(n),
                  state.tokenizer};
      PYLON_CUDA_CHECK(cudaMemcpy(c.params.data(), master.get(), fbytes, cudaMemcpyDeviceToHost));
      PYLON_CUDA_CHECK(cudaMemcpy(c.m.data(), m.get(), fbytes, cudaMemcpyDeviceToHost));
      PYLON_CUDA_CHECK(cudaMemcpy(c.v.data(), v.get(), fbytes, cudaMemcpyDeviceToHost));
      const nlohmann::json options = {{"device", "cuda"}, {"batch", o.batch}, {"seq", o.seq},
                                      {"grad_accum", o.grad_accum}, {"lr", o.adamw.lr}};
      std::printf("saved checkpoint %s\n", save_state(o.save_dir, config, c, options).c_str());
    }
  }
  if (metrics) std::fclose(metrics);
  profiler.finish();
  result.seconds = clock.seconds();
  return result;
}

}  // namespace pylon
