// The memory plans' arithmetic, without a GPU: the CUDA model's activation arena in closed form
// equals carving it buffer by buffer, layer by layer (as MiniLLMCuda did); FSDP's GPU buffers from
// the root and one block equal the sums over every unit of a full layout; the CUDA plan's parts
// and its refusal line; the CPU plan holds one micro-batch of tokens whatever --grad-accum.
#include <gtest/gtest.h>

#include <algorithm>
#include <climits>
#include <string>
#include <vector>

#include "core/error.h"
#include "dist/fsdp_cuda_buffers.h"
#include "dist/shard_layout.h"
#include "model/activation_arena.h"
#include "model/params.h"
#include "support/presets.h"
#include "train/memory_plan.h"
#include "train/trainer.h"

namespace pylon {
namespace {

ModelConfig small(const char* preset, int layers = 3) {
  ModelConfig c;
  c.set_preset(find_preset(preset));
  c.vocab = 97, c.dim = 32, c.layers = layers, c.heads = 4;
  return c;
}

// The models the arena is checked over: both multi-head presets and the llama variants (grouped
// and multi-query heads, SwiGLU, a final norm, a tied head).
std::vector<ModelConfig> arena_models() {
  std::vector<ModelConfig> out = {small("seed"), small("causal")};
  for (const ModelConfig& c : testing::llama_variants(small("causal"))) out.push_back(c);
  return out;
}

// The oracle: MiniLLMCuda's former sizing pass, every buffer taken in turn from one running offset
// aligned to 256 bytes, every layer's own (no strides). Returns the offsets in the order of
// ActivationArena's fields and the total.
struct Carved {
  std::vector<int64_t> offsets;
  int64_t bytes = 0;
};
Carved carve_sequentially(const ModelConfig& c, int64_t B, int64_t T, Recompute r, int64_t A, int64_t workspace) {
  const bool swiglu = c.preset.ffn == Ffn::swiglu;
  const int64_t N = B * T, D = c.dim, V = c.vocab, H = c.heads, Q = c.q_dim(), QKV = c.qkv_dim();
  const int64_t F = c.ffn_hidden(), FIn = swiglu ? 2 * F : F;
  int64_t offset = 0;
  Carved out;
  auto take = [&](int64_t count, int64_t elem) {
    offset = (offset + 255) & ~int64_t{255};
    out.offsets.push_back(offset);
    offset += count * elem;
  };
  auto take_saved = [&] {
    take(N * QKV, A), take(N * Q, A), take(N * D, A), take(N * FIn, A), take(N, 4), take(N, 4), take(B * H * T, 4);
    if (r == Recompute::none) {
      take(N * D, A), take(N * D, A);
      if (!swiglu) take(N * F, A);
    }
  };
  if (r == Recompute::full) take_saved();
  for (int l = 0; l < c.layers; ++l) {
    take(N * D, A);
    if (r != Recompute::full) take_saved();
  }
  take(N * D, A);
  if (c.preset.final_norm) take(N * D, A), take(N, 4);
  const int64_t head_rows = activation_arena(c, B, T, r, static_cast<int>(A), workspace).head_rows;  // its own test below
  for (int64_t n : {N * D, std::max(N * F, head_rows * V), N * D, N * D, N * D, N * D, N * Q, N * QKV}) take(n, A);
  take(N, 4), take(N, 4), take(1, 4), take(workspace, 1);
  out.bytes = offset;
  return out;
}

// The same offsets read from the closed form, in the oracle's order.
std::vector<int64_t> offsets_of(const ActivationArena& a, const ModelConfig& c, Recompute r) {
  std::vector<int64_t> out;
  auto saved = [&](const ActivationArena::Saved& s) {
    for (int64_t o : {s.qkv, s.att, s.x_mid, s.f1, s.rstd1, s.rstd2, s.lse, s.h1, s.h2, s.act})
      if (o != ActivationArena::kNone) out.push_back(o);
  };
  if (r == Recompute::full) saved(a.shared);
  for (int l = 0; l < c.layers; ++l) {
    out.push_back(a.x_of(l));
    if (r != Recompute::full) saved(a.saved_of(l));
  }
  for (int64_t o : {a.x_last, a.x_final, a.rstd_final, a.h, a.wide, a.tmp, a.dx, a.dx_mid, a.dh, a.datt,
                    a.dqkv, a.losses, a.rstd_tmp, a.loss_tmp, a.workspace})
    if (o != ActivationArena::kNone) out.push_back(o);
  return out;
}

TEST(MemoryPlan, ActivationArenaEqualsCarvingEveryBufferInTurn) {
  for (const ModelConfig& c : arena_models())
    for (Recompute r : {Recompute::none, Recompute::selective, Recompute::full})
      for (int A : {2, 4})
        for (const auto& [B, T, workspace] : {std::tuple{2, 16, 0}, std::tuple{3, 7, 1001}, std::tuple{1, 5, 4096}}) {
          SCOPED_TRACE(c.describe() + " recompute " + recompute_name(r) + " act " + std::to_string(A) + " B " +
                       std::to_string(B) + " T " + std::to_string(T));
          const ActivationArena a = activation_arena(c, B, T, r, A, workspace);
          const Carved expect = carve_sequentially(c, B, T, r, A, workspace);
          EXPECT_EQ(a.bytes, expect.bytes);
          EXPECT_EQ(offsets_of(a, c, r), expect.offsets);
        }
}

// The head's row chunks: the logits of a chunk fit the MLP's scratch (N, F) unless that would make the
// chunk narrower than kMinHeadRows; rows a multiple of 8 unless one chunk takes every row; the
// chunks evened out (the last at most 7 rows short of the others, or the rest).
TEST(MemoryPlan, HeadRowChunksFitTheMlpScratch) {
  struct Case {
    const char* preset;
    int64_t vocab, dim, B, T, rows;
  };
  for (const Case& k : {Case{"seed", 32000, 2048, 8, 1024, 2048},   // the seed preset: 4 chunks
                        Case{"seed", 151936, 896, 8, 1024, 256},   // a Qwen2-like vocabulary: 32
                        Case{"seed", 97, 32, 2, 16, 32},           // V < F: one chunk of every row
                        Case{"seed", 4099, 256, 2, 290, 200},      // 200, 200, 180
                        Case{"seed", 500000, 64, 1, 100, 100}}) {  // fewer rows than the floor
    ModelConfig c = small(k.preset);
    c.vocab = static_cast<int>(k.vocab), c.dim = static_cast<int>(k.dim);
    const int64_t N = k.B * k.T, F = c.ffn_hidden();
    SCOPED_TRACE(c.describe() + " N " + std::to_string(N));
    const ActivationArena a = activation_arena(c, k.B, k.T, Recompute::selective, 2, 0);
    EXPECT_EQ(a.head_rows, k.rows);
    EXPECT_LE(a.head_rows * k.vocab, std::max(N * F, ActivationArena::kMinHeadRows * k.vocab));
    EXPECT_TRUE(a.head_rows == N || a.head_rows % 8 == 0);
  }
}

TEST(MemoryPlan, ActivationArenaOfAHugeModelIsComputedNotAllocated) {
  ModelConfig c = small("causal", INT_MAX);
  const ActivationArena a = activation_arena(c, 2, 16, Recompute::selective, 2, 0);
  EXPECT_GT(a.bytes, int64_t{INT_MAX} * a.block_stride / 2);
  EXPECT_EQ(a.x_of(INT_MAX - 1), a.first_block + int64_t{INT_MAX - 1} * a.block_stride + a.block_x);
  // Keeping less costs less: none > selective > full.
  c.layers = 4;
  const int64_t none = activation_arena(c, 2, 16, Recompute::none, 2, 0).bytes;
  const int64_t selective = activation_arena(c, 2, 16, Recompute::selective, 2, 0).bytes;
  const int64_t full = activation_arena(c, 2, 16, Recompute::full, 2, 0).bytes;
  EXPECT_GT(none, selective);
  EXPECT_GT(selective, full);
  c.vocab = INT_MAX, c.layers = INT_MAX;
  try {
    activation_arena(c, INT_MAX, INT_MAX, Recompute::none, 4, 0);
    FAIL() << "no overflow";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("the GPU activations' size overflows a 64-bit integer"), std::string::npos)
        << e.what();
  }
}

// The oracle: FsdpCuda's former constructor, its sizes summed over every unit of the full layout.
FsdpCudaBuffers buffers_over_every_unit(const ShardLayout& layout, const FsdpCudaOptions& o) {
  const std::vector<ShardUnit>& units = layout.units();
  const int world = layout.world(), L = static_cast<int>(units.size()) - 1;
  int64_t total = 0, most = 0, block_padded = 0, widest = 0;
  for (const ShardUnit& u : units) {
    for (const UnitParam& q : u.params) widest = std::max(widest, world * q.chunk);
    total += u.shard;
    most = std::max(most, u.shard);
    if (u.id >= 0) block_padded = std::max(block_padded, u.padded);
  }
  const bool persistent = world == 1 && o.persistent_at_one;
  const int64_t h = o.fp32_params ? 4 : 2;
  FsdpCudaBuffers b;
  b.param_slots = o.reshard_after_forward && !persistent ? std::min(2, L) : L;
  b.grad_slots = o.no_sync ? L : std::min(2, L);
  b.shard = total, b.summed = o.fused_optimizer ? most : total;
  b.master = b.m = b.v = 4 * total;
  b.grad = o.fused_optimizer ? 0 : 4 * total;
  if (o.reduce_bf16 && world > 1) b.reduce_bf16 = widest * h;
  if (persistent) {
    if (!o.fp32_params) b.weights = total * h;
  } else {
    b.root_param = units[0].padded * h, b.block_params = b.param_slots * block_padded * h;
  }
  int64_t root_grad = units[0].padded;
  if (o.split_root && units[0].params.size() >= 2 && !o.no_sync) {  // the embedding's, or the rest's
    int64_t rest = 0;
    for (size_t k = 1; k < units[0].params.size(); ++k) rest += world * units[0].params[k].chunk;
    root_grad = std::max(world * units[0].params[0].chunk, rest);
  }
  b.root_grad = 4 * root_grad, b.block_grads = 4 * b.grad_slots * block_padded;
  return b;
}

TEST(MemoryPlan, FsdpGpuBuffersFromOneBlockEqualTheSumsOverEveryUnit) {
  std::vector<FsdpCudaOptions> options(1);
  auto vary = [&](auto set) {
    FsdpCudaOptions o;
    set(o);
    options.push_back(o);
  };
  vary([](FsdpCudaOptions& o) { o.reshard_after_forward = false; });
  vary([](FsdpCudaOptions& o) { o.no_sync = true; });
  vary([](FsdpCudaOptions& o) { o.fused_optimizer = true; });
  vary([](FsdpCudaOptions& o) { o.reduce_bf16 = true, o.split_root = false; });
  vary([](FsdpCudaOptions& o) { o.fp32_params = true, o.no_sync = true, o.fused_optimizer = true; });
  vary([](FsdpCudaOptions& o) { o.persistent_at_one = false; });
  vary([](FsdpCudaOptions& o) { o.persistent_at_one = false, o.reshard_after_forward = false; });
  for (ModelConfig c : arena_models())
    for (int layers : {1, 2, 5})
      for (int world : {1, 2, 3})
        for (const FsdpCudaOptions& o : options) {
          c.layers = layers;
          SCOPED_TRACE(c.describe() + " world " + std::to_string(world));
          const ShardLayout full(param_table(c), world);
          ModelConfig one = c;
          one.layers = 1;
          const ShardLayout first(param_table(one), world);
          const FsdpCudaBuffers b = fsdp_cuda_buffers(first.units()[0], first.units()[1], layers, world, o);
          const FsdpCudaBuffers e = buffers_over_every_unit(full, o);
          EXPECT_EQ(b.param_slots, e.param_slots);
          EXPECT_EQ(b.grad_slots, e.grad_slots);
          EXPECT_EQ(b.shard, e.shard);
          EXPECT_EQ(b.summed, e.summed);
          for (auto field : {&FsdpCudaBuffers::master, &FsdpCudaBuffers::m, &FsdpCudaBuffers::v, &FsdpCudaBuffers::grad,
                             &FsdpCudaBuffers::weights, &FsdpCudaBuffers::root_param, &FsdpCudaBuffers::block_params,
                             &FsdpCudaBuffers::reduce_bf16, &FsdpCudaBuffers::root_grad, &FsdpCudaBuffers::block_grads})
            EXPECT_EQ(b.*field, e.*field);
          const DeviceMemory d = b.by_use();
          EXPECT_EQ(static_cast<int64_t>(d.weights + d.gradients + d.optimizer + d.workspace + d.communication), b.total());
        }
}

TrainOptions cuda_options() {
  TrainOptions o;
  o.device = "cuda";
  o.model = small("causal", 2);
  o.batch = 2, o.seq = 16, o.grad_accum = 3;
  return o;
}

// A world of one holds whole fp32 shards (4 bytes a parameter each for the master weights and the
// gradient, 8 for AdamW's m and v) and their bf16 copy; the activations are the arena's; the
// tokens of a step per step parity.
TEST(MemoryPlan, CudaPlanOfOneGpu) {
  TrainOptions o = cuda_options();
  const int64_t P = param_table(o.model).total;
  const CudaScratch scratch{nullptr, nullptr, 1000};
  MemoryPlan plan = cuda_train_memory(o, 1, scratch);
  EXPECT_EQ(plan.part("parameters"), 4 * P);
  EXPECT_EQ(plan.part("bf16 weights"), 2 * P);
  EXPECT_EQ(plan.part("AdamW state"), 8 * P);
  EXPECT_GE(plan.part("gradients"), 4 * P);  // the shard, and the root's and two blocks' slots
  EXPECT_EQ(plan.part("gathered weights"), 0);
  EXPECT_EQ(plan.part("activations"), activation_arena(o.model, 2, 16, Recompute::selective, 2, 0).bytes);
  EXPECT_EQ(plan.part("token buffers"), 2 * 3 * 2 * 2 * 16 * 4);
  EXPECT_EQ(plan.part("validation buffers"), 0);
  EXPECT_EQ(plan.part("workspace"), 1000);
  int64_t sum = 0;
  for (const auto& [what, bytes] : plan.parts) sum += bytes;
  EXPECT_EQ(plan.total, sum);

  // fp32: no bf16 copy, 4-byte activations; validation buffers of --eval-steps micro-batches.
  o.dtype = "fp32", o.recompute = Recompute::full, o.val_data = "v.bin", o.eval_every = 5, o.eval_steps = 7;
  plan = cuda_train_memory(o, 1, scratch);
  EXPECT_EQ(plan.part("bf16 weights"), 0);
  EXPECT_EQ(plan.part("activations"), activation_arena(o.model, 2, 16, Recompute::full, 4, 0).bytes);
  EXPECT_EQ(plan.part("validation buffers"), 7 * (2 * 2 * 16 * 4 + 4));

  // Sharded over 2: gathered slots instead of the bf16 copy, half the shards (rounded up per parameter).
  o = cuda_options();
  plan = cuda_train_memory(o, 2, scratch);
  EXPECT_EQ(plan.part("bf16 weights"), 0);
  EXPECT_GT(plan.part("gathered weights"), 0);
  EXPECT_GE(plan.part("parameters"), 2 * P);
  EXPECT_LT(plan.part("parameters"), 4 * P);
}

TEST(MemoryPlan, CudaPlanOfSizesThatCannotBeIndexed) {
  TrainOptions o = cuda_options();
  o.batch = INT_MAX, o.seq = 2;
  try {
    cuda_train_memory(o, 1);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "--batch 2147483647 x --seq 2 rows exceed the CUDA step's 32-bit row index");
  }
  // check_train_options says so for --device cuda before a GPU is looked for.
  o.data = std::string(PYLON_GOLDEN_DIR) + "/seed_small/tokens.bin";
  try {
    check_train_options(o);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "--device cuda: the model does not fit: --batch 2147483647 x --seq 2 rows exceed the CUDA "
                           "step's 32-bit row index");
  }
  // 2^31 - 1 layers are counted, not built.
  o = cuda_options();
  o.model.layers = INT_MAX;
  const MemoryPlan plan = cuda_train_memory(o, 8);
  EXPECT_GT(plan.part("parameters"), int64_t{INT_MAX} * 4 * 32 * 32 / 8);
}

// The refusal is one line, largest parts first, with a hint for the largest.
TEST(MemoryPlan, GpuRefusalNamesTheBiggestPartsAndAHint) {
  MemoryPlan plan;
  plan.parts = {{"parameters", 12'000'000'000}, {"AdamW state", 24'000'000'000}, {"activations", 150'200'000'000},
                {"workspace", 40'000'000}};
  plan.total = 12'000'000'000 + 24'000'000'000 + 150'200'000'000 + 40'000'000;
  TrainOptions o = cuda_options();
  auto refusal = [&](int64_t free) -> std::string {
    try {
      check_fits_on_gpu(plan, o, 1, free);
    } catch (const Error& e) {
      return e.what();
    }
    return "";
  };
  EXPECT_EQ(refusal(139'800'000'000),
            "--device cuda: the model needs 186 GB (activations 150 GB, AdamW state 24 GB, parameters 12 GB, "
            "workspace 40 MB) but GPU 1 has 140 GB free; try --recompute full or a smaller --batch");
  EXPECT_EQ(refusal(plan.total), "");
  o.recompute = Recompute::full;
  EXPECT_NE(refusal(1).find("; try a smaller --batch or --seq"), std::string::npos);
  plan.parts[2].second = 1;
  EXPECT_NE(refusal(1).find("; try more GPUs (--nproc-per-node) or a smaller model"), std::string::npos);
  plan.parts.push_back({"bf16 weights", 6'000'000'000});  // one GPU's whole copy
  EXPECT_NE(refusal(1).find("; try more GPUs (--nproc-per-node), --one-gpu-reshard or a smaller model"),
            std::string::npos);
  plan.parts.push_back({"token buffers", 50'000'000'000});
  EXPECT_NE(refusal(1).find("; try a smaller --grad-accum"), std::string::npos);
  plan.parts.push_back({"validation buffers", 60'000'000'000});
  EXPECT_NE(refusal(1).find("; try a smaller --eval-steps"), std::string::npos);
}

// The CPU step loads each micro-batch before its forward: its tokens are one micro-batch's,
// however many micro-steps a step has (a --grad-accum of 2^31 - 1 once planned, and filled, 17 GB
// at --batch 1 --seq 1 before the first forward).
TEST(MemoryPlan, CpuPlanHoldsOneMicroBatchOfTokens) {
  const MemoryPlan plan = cpu_train_memory(small("seed", 2), 3, 16, 1);
  EXPECT_EQ(plan.part("token buffer"), 2 * 3 * 16 * 4);
  TrainOptions o;
  o.model = small("seed", 2);
  o.batch = 1, o.seq = 1, o.grad_accum = INT_MAX, o.steps = 1;
  o.data = std::string(PYLON_GOLDEN_DIR) + "/seed_small/tokens.bin";
  EXPECT_NO_THROW(check_train_options(o));
}

}  // namespace
}  // namespace pylon
