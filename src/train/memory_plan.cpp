#include "train/memory_plan.h"

#include <sys/sysinfo.h>

#include <algorithm>
#include <climits>
#include <cstdio>
#include <fstream>
#include <sstream>

#include "core/checked.h"
#include "core/error.h"
#include "dist/shard_layout.h"
#include "model/activation_arena.h"
#include "model/minillm.h"
#include "model/params.h"
#include "model/recipe.h"

namespace pylon {
namespace {

constexpr const char* kWhat = "the run's memory size";

// "812 GB", "3.4 GB", "120 MB", "16 kB", "512 B"
std::string gb(int64_t bytes) {
  char text[32];
  const double b = static_cast<double>(bytes);
  if (b >= 10e9)
    std::snprintf(text, sizeof(text), "%.0f GB", b / 1e9);
  else if (b >= 1e9)
    std::snprintf(text, sizeof(text), "%.1f GB", b / 1e9);
  else if (b >= 1e6)
    std::snprintf(text, sizeof(text), "%.0f MB", b / 1e6);
  else if (b >= 1e3)
    std::snprintf(text, sizeof(text), "%.0f kB", b / 1e3);
  else
    std::snprintf(text, sizeof(text), "%lld B", static_cast<long long>(bytes));
  return text;
}

// Parameter counts without building the table of every layer (a huge --layers would allocate
// it): the root unit's and one block's, from the table of a one-layer copy.
struct ParamCounts {
  int64_t root = 0, block = 0;
  int64_t total(int64_t layers) const { return checked_add(root, checked_mul(block, layers, kWhat), kWhat); }
};
ParamCounts param_counts(const ModelConfig& model) {
  ModelConfig one = model;
  one.layers = 1;
  const ParamTable t = param_table(one);
  ParamCounts c;
  for (const ParamInfo& p : t.params) (p.unit < 0 ? c.root : c.block) += p.numel;
  return c;
}

void add(MemoryPlan& plan, const char* what, int64_t bytes) {
  if (bytes == 0) return;
  plan.parts.emplace_back(what, bytes);
  plan.total = checked_add(plan.total, bytes, kWhat);
}

}  // namespace

int64_t MemoryPlan::part(const std::string& what) const {
  for (const auto& [name, bytes] : parts)
    if (name == what) return bytes;
  return 0;
}

std::string MemoryPlan::describe() const {
  std::vector<std::pair<std::string, int64_t>> largest_first = parts;
  std::stable_sort(largest_first.begin(), largest_first.end(),
                   [](const auto& a, const auto& b) { return a.second > b.second; });
  std::string s = gb(total) + " (";
  for (size_t i = 0; i < largest_first.size(); ++i)
    s += (i ? ", " : "") + largest_first[i].first + " " + gb(largest_first[i].second);
  return s + ")";
}

MemoryPlan cpu_train_memory(const ModelConfig& model, int batch, int seq, int world) {
  PYLON_CHECK(int64_t{batch} * seq <= INT_MAX, "--batch ", batch, " x --seq ", seq,
              " rows exceed the CPU step's 32-bit row index");
  const ParamCounts counts = param_counts(model);
  const int64_t f = static_cast<int64_t>(sizeof(float));
  const int64_t params = counts.total(model.layers);
  const int64_t shard = checked_mul(checked_add(params, world - 1, kWhat) / world, f, kWhat);  // each rank's share
  MemoryPlan plan;
  add(plan, "parameters", shard);
  add(plan, "gradients", shard);
  add(plan, "AdamW state", checked_mul(2, shard, kWhat));
  if (world > 1)  // a gathered unit's parameters and gradients (at least the largest unit)
    add(plan, "gathered unit", checked_mul(2 * f, std::max(counts.root, counts.block), kWhat));
  const MiniLLM::BatchBytes b = MiniLLM::batch_bytes(model, batch, seq);
  add(plan, "activations", b.activations);
  add(plan, "logits", b.logits);
  add(plan, "token buffer", checked_mul({2, batch, seq, 4}, kWhat));  // one micro-batch's inputs and targets
  return plan;
}

MemoryPlan cpu_forward_memory(const ModelConfig& model, int batch, int seq) {
  PYLON_CHECK(int64_t{batch} * seq <= INT_MAX, "--batch ", batch, " x --seq ", seq,
              " rows exceed the CPU forward's 32-bit row index");
  MemoryPlan plan;
  const MiniLLM::BatchBytes b = MiniLLM::batch_bytes(model, batch, seq);
  add(plan, "activations", b.activations);
  add(plan, "logits", b.logits);
  return plan;
}

MemoryPlan cpu_decode_memory(const ModelConfig& model, int context, bool score_rows) {
  MemoryPlan plan;
  if (inference_spec(model, context).kv_cache) add(plan, "KV cache", checked_mul({2, model.layers, context, model.kv_dim(), 4}, kWhat));
  if (score_rows) add(plan, "logits", checked_mul({context, model.vocab, 4}, kWhat));
  return plan;
}

FsdpCudaOptions cuda_fsdp_options(const TrainOptions& o) {
  FsdpCudaOptions f;
  f.reshard_after_forward = o.reshard_after_forward;
  f.no_sync = o.no_sync;
  // Without clipping and with one reduction per step, AdamW runs per unit as its gradient arrives
  // and no gradient shard is kept.
  f.fused_optimizer = o.grad_clip <= 0 && (o.grad_accum == 1 || o.no_sync);
  f.measure_overlap = !o.cuda_graph;  // timing probes are host-read events: not inside graphs
  f.reduce_bf16 = o.reduce_bf16;
  // A tied head's gradient is the embedding's, final only at the end of backward: nothing to split.
  f.split_root = o.split_root && !o.model.tied_head;
  f.fp32_params = o.dtype == "fp32";
  f.persistent_at_one = !o.one_gpu_reshard;
  return f;
}

MemoryPlan cuda_train_memory(const TrainOptions& o, int world, const CudaScratch& scratch) {
  const ModelConfig& model = o.model;
  PYLON_CHECK(int64_t{o.batch} * o.seq <= INT_MAX, "--batch ", o.batch, " x --seq ", o.seq,
              " rows exceed the CUDA step's 32-bit row index");
  // FSDP's buffers from the layout of a one-block copy: the root unit and a block are the same at
  // any --layers.
  ModelConfig one = model;
  one.layers = 1;
  const ShardLayout layout(param_table(one), world);
  const FsdpCudaBuffers fsdp =
      fsdp_cuda_buffers(layout.units()[0], layout.units()[1], model.layers, world, cuda_fsdp_options(o), scratch.fsdp);
  const int64_t workspace = scratch.model ? static_cast<int64_t>(scratch.model(model, o.batch, o.seq)) : 0;
  const ActivationArena arena = activation_arena(model, o.batch, o.seq, o.recompute, o.dtype == "fp32" ? 4 : 2, workspace);
  const int64_t micro_batch = checked_mul({2, o.batch, o.seq, 4}, kWhat);  // inputs and targets, int32
  MemoryPlan plan;
  add(plan, "parameters", fsdp.master);
  add(plan, "bf16 weights", fsdp.weights);
  add(plan, "AdamW state", checked_add(fsdp.m, fsdp.v, kWhat));
  add(plan, "gradients",
      checked_add(checked_add(fsdp.grad, fsdp.root_grad, kWhat), checked_add(fsdp.block_grads, fsdp.reduce_bf16, kWhat),
                  kWhat));
  add(plan, "gathered weights", checked_add(fsdp.root_param, fsdp.block_params, kWhat));
  add(plan, "activations", arena.bytes);
  add(plan, "token buffers", checked_mul({2, o.grad_accum, micro_batch}, kWhat));  // a step's, per step parity
  if (!o.val_data.empty() && o.eval_every > 0)  // o.eval_steps micro-batches and their losses at once
    add(plan, "validation buffers", checked_mul(o.eval_steps, checked_add(micro_batch, 4, kWhat), kWhat));
  add(plan, "workspace", checked_add(scratch.gemm, fsdp.scratch, kWhat));
  return plan;
}

int64_t available_host_bytes() {
  std::ifstream in("/proc/meminfo");
  for (std::string line; std::getline(in, line);) {
    std::istringstream fields(line);
    std::string key;
    long long kib = 0;
    if (fields >> key >> kib && key == "MemAvailable:") return static_cast<int64_t>(kib) * 1024;
  }
  struct sysinfo info {};
  if (sysinfo(&info) != 0) return INT64_MAX;  // unknown: do not refuse
  return static_cast<int64_t>(info.freeram) * info.mem_unit;
}

void check_fits(const MemoryPlan& plan, int ranks, int64_t available, const std::string& who, const std::string& where,
                const std::string& kind, const std::string& hint) {
  const int64_t need = checked_mul(plan.total, ranks, kWhat);
  PYLON_CHECK(need <= available, who, " needs ", ranks > 1 ? std::to_string(ranks) + " ranks x " : "",
              plan.describe(), " but ", where, " has ", gb(available), " ", kind, hint.empty() ? "" : "; " + hint);
}

void check_fits_on_gpu(const MemoryPlan& plan, const TrainOptions& o, int gpu, int64_t free) {
  std::string biggest;
  int64_t most = -1;
  for (const auto& [what, bytes] : plan.parts)
    if (bytes > most) biggest = what, most = bytes;
  std::string hint;
  if (biggest == "activations")
    hint = o.recompute != Recompute::full ? "try --recompute full or a smaller --batch" : "try a smaller --batch or --seq";
  else if (biggest == "token buffers")
    hint = "try a smaller --grad-accum";
  else if (biggest == "validation buffers")
    hint = "try a smaller --eval-steps";
  else if (plan.part("bf16 weights") > 0)  // one GPU's whole bf16 copy: --one-gpu-reshard keeps slots instead
    hint = "try more GPUs (--nproc-per-node), --one-gpu-reshard or a smaller model";
  else  // the weights, gradients and AdamW state: sharded over more GPUs, each holds less
    hint = "try more GPUs (--nproc-per-node) or a smaller model";
  check_fits(plan, 1, free, "--device cuda: the model", "GPU " + std::to_string(gpu), "free", hint);
}

}  // namespace pylon
