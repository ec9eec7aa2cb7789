// The Vulkan decoder against the CPU path on small models: greedy generation identical in f16
// (causal and seed presets), logits and eval loss within tolerance at f16 / int8 / int4, the same
// results with the weights imported or uploaded and split into several buffers; bad devices,
// files and injected allocation failures give clear errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "io/atomic_file.h"
#include "io/edge_format.h"
#include "model/decoder.h"
#include "model/edge_model.h"
#include "model/edge_weights.h"
#include "model/minillm.h"
#include "model/params.h"
#include "model/vulkan/vulkan_decoder.h"
#include "ops/vulkan/ops.h"
#include "support/presets.h"
#include "support/temp_dir.h"
#include "support/varied_params.h"
#include "support/vulkan_test_util.h"
#include "train/evaluate.h"

namespace pylon {
namespace {

ModelConfig small_config(const Preset& p) {
  ModelConfig c;
  c.preset = p;
  c.vocab = 97, c.dim = 64, c.layers = 2, c.heads = 4;
  return c;
}

// Random weights (the init of training, its constant biases and norm weights varied) exported.
std::string export_model(const testing::TempDir& tmp, const ModelConfig& c, EdgeDType q, int group = 32) {
  const ParamTable table = param_table(c);
  std::vector<float> flat(table.total);
  init_params(table, 5, flat.data());
  testing::vary_constant_params(table, flat.data());
  EdgeQuant quant;
  quant.matrices = q;
  quant.group_size = group;
  const std::string path = tmp.file(std::string(c.preset.name) + edge_dtype_name(q) + ".edge");
  write_edge_model(path, c, encode_edge_tensors(table, flat.data(), quant), "");
  return path;
}

std::vector<float> dequantized(const std::string& path) {
  const EdgeModel f(path);
  std::vector<float> flat(param_table(f.config).total);
  load_edge_weights(f.file, param_table(f.config), flat.data());
  return flat;
}


int argmax(const float* v, int n) { return static_cast<int>(std::max_element(v, v + n) - v); }

// Prefill the prompt, then greedy steps; returns the ids and the logits on the way.
template <typename Feed>
std::vector<int32_t> greedy(Feed&& feed, int V, int steps, std::vector<std::vector<float>>* logits,
                            std::vector<int32_t> ids) {
  const float* l = feed(ids.data(), static_cast<int>(ids.size()));
  for (int i = 0; i < steps; ++i) {
    logits->emplace_back(l, l + V);
    const int32_t next = argmax(l, V);
    ids.push_back(next);
    l = feed(&next, 1);
  }
  return ids;
}

// Whether a model decodes on the persistent kernel (a causal one: MiniLLM's blocks or llama's).
bool runs_persistent(const ModelConfig& c) { return c.preset.mask == Mask::causal; }

// The plain kernels' prompt (5 tokens: prefilled op by op) and the coopmat rows' (20: the coopmat
// GEMM and attention run from 16 tokens, so a causal model reaches them only through a prompt this
// long; a bidirectional one re-prefills its whole context every step).
const std::vector<int32_t> kShortPrompt = {5, 17, 42, 7, 90};
const std::vector<int32_t> kLongPrompt = {5, 17, 42, 7, 90, 3, 66, 12, 81, 29, 54, 1, 38, 72, 9, 60, 23, 47, 88, 14};

// Over the steps of `ref` while both ids agree: the worst |ref - got| relative to each logit
// (1e-3 floor), and relative to the step's largest |ref| (the logits' scale).
struct LogitError {
  double elementwise = 0, scaled = 0;
};
LogitError logit_error(const std::vector<int32_t>& a, const std::vector<int32_t>& b, size_t prompt,
                       const std::vector<std::vector<float>>& ref, const std::vector<std::vector<float>>& got) {
  LogitError e;
  for (size_t s = 0; s < ref.size() && a[prompt + s] == b[prompt + s]; ++s) {
    double scale = 0, diff = 0;
    for (size_t v = 0; v < ref[s].size(); ++v) {
      const double d = std::fabs(double(ref[s][v]) - got[s][v]);
      e.elementwise = std::max(e.elementwise, d / (1e-3 + std::fabs(ref[s][v])));
      scale = std::max(scale, std::fabs(double(ref[s][v])));
      diff = std::max(diff, d);
    }
    e.scaled = std::max(e.scaled, diff / scale);
  }
  return e;
}

// The CPU path runs the same dequantized weights in fp32, so logits differ by summation order only.
void expect_matches_cpu(const testing::TempDir& tmp, const ModelConfig& c) {
  for (const EdgeDType q : {EdgeDType::f16, EdgeDType::int8, EdgeDType::int4}) {
    const std::string path = export_model(tmp, c, q);
    const std::vector<float> flat = dequantized(path);
    std::vector<std::vector<float>> lc_short, lc_long;
    std::vector<int32_t> a_short, a_long;
    {
      Decoder cpu(c, flat.data(), 64);
      a_short = greedy([&](const int32_t* t, int n) { return cpu.feed(t, n); }, c.vocab, 20, &lc_short, kShortPrompt);
    }
    {
      Decoder cpu(c, flat.data(), 64);
      a_long = greedy([&](const int32_t* t, int n) { return cpu.feed(t, n); }, c.vocab, 20, &lc_long, kLongPrompt);
    }
    // The plain kernels (fp32 activations): summation order only, 1e-3 of each logit. The coopmat
    // GEMM and attention round their inputs to fp16 (unit roundoff u = 2^-11 = 4.9e-4):
    // activations, q, k, v and the softmax's weights, and int8 / int4 weights as they are decoded
    // to fp16. Each rounding moves a dot product by about u of its scale, so the logits move by
    // under a few u of theirs; bound: 4u = 2e-3 of the step's largest logit. Relative to each logit
    // the same error reaches 1e-1 near 0, which is why that metric is not bounded here (H200
    // figures of every preset: bench/vulkan_notes.md, "The coopmat path's logits, every preset").
    // Decode with both one-token GEMVs on any device: the subgroup one (GPUs' op-by-op path;
    // fused RMSNorm, RoPE and KV append) and the row-per-invocation one (CPU devices' default),
    // and (causal models: MiniLLM's blocks or llama's) the persistent kernel (GPUs' default).
    for (const bool coopmat : {false, true})
      for (const std::string gemv : {"subgroup", "rows", "persistent"}) {
        if (gemv == "persistent" && !runs_persistent(c)) continue;
        VulkanOptions o;
        o.allow_coopmat = coopmat;
        o.gemv = gemv == "rows" ? "rows" : "subgroup";
        o.decode = gemv == "persistent" ? "persistent" : "ops";
        VulkanDecoder gpu(path, o, 64);
        if (coopmat && gpu.describe().find("cooperative") == std::string::npos) continue;
        EXPECT_EQ(gpu.persistent_grid() > 0, gemv == "persistent");
        const std::vector<int32_t>& prompt = coopmat ? kLongPrompt : kShortPrompt;
        const auto& a = coopmat ? a_long : a_short;
        const auto& lc = coopmat ? lc_long : lc_short;
        std::vector<std::vector<float>> lg;
        const auto b = greedy([&](const int32_t* t, int n) { return gpu.feed(t, n); }, c.vocab, 20, &lg, prompt);
        const std::string what = c.describe() + " " + edge_dtype_name(q) + (coopmat ? " coopmat" : " plain") +
                                 " gemv_" + gemv;
        if (q == EdgeDType::f16) {
          EXPECT_EQ(a, b) << what;  // the contract: identical greedy text in f16
        }
        // Logits compared at the CPU's tokens (the first step always; later ones while ids agree).
        const LogitError e = logit_error(a, b, prompt.size(), lc, lg);
        if (coopmat)
          EXPECT_LT(e.scaled, 2e-3) << what;
        else
          EXPECT_LT(e.elementwise, 1e-3) << what;
        std::printf("[ vulkan ] %s: greedy %s, worst logit difference %.2e of the logit, %.2e of the largest\n",
                    what.c_str(), a == b ? "identical" : "differs", e.elementwise, e.scaled);
      }
  }
}

TEST(VulkanDecoder, GreedyIdenticalToCpuAndLogitsClose) {
  if (!testing::vulkan_available()) GTEST_SKIP() << "no Vulkan device";
  testing::TempDir tmp;
  for (const Preset& p : testing::multi_head_presets()) expect_matches_cpu(tmp, small_config(p));
}

// The llama variants: grouped-query and multi-query heads (KV caches of the key/value heads), a
// head size apart from dim/heads (10: not a multiple of 4), SwiGLU of widths whose rows are not
// whole 16-byte words, the final norm, optional biases and a tied head; on every decode path, the
// persistent kernel's llama blocks (decode_layer_llama) and its head behind the final norm
// included.
TEST(VulkanDecoder, LlamaGreedyIdenticalToCpuAndLogitsClose) {
  if (!testing::vulkan_available()) GTEST_SKIP() << "no Vulkan device";
  testing::TempDir tmp;
  for (const ModelConfig& c : testing::llama_variants(small_config(find_preset("causal")))) expect_matches_cpu(tmp, c);
}

// The fused forms of the inference ops (the RMSNorm in the GEMV, the qkv GEMV with RoPE and the KV
// append, the persistent kernel's blocks) against the plain ops of the same backend, their oracle
// (InferenceOps::set_fusion(false)): teacher-forced, a 6-token prompt and 10 steps, the logits
// within 1e-3 relative (fp32 summation order).
TEST(VulkanDecoder, FusedFormsMatchThePlainOps) {
  if (!testing::vulkan_available()) GTEST_SKIP() << "no Vulkan device";
  testing::TempDir tmp;
  std::vector<ModelConfig> configs;
  for (const Preset& p : testing::multi_head_presets()) configs.push_back(small_config(p));
  for (const ModelConfig& c : testing::llama_variants(small_config(find_preset("causal")))) configs.push_back(c);
  for (const ModelConfig& c : configs) {
    const std::string path = export_model(tmp, c, EdgeDType::int8);
    for (const std::string decode : {"ops", "persistent"}) {
      if (decode == "persistent" && !runs_persistent(c)) continue;
      VulkanOptions o;
      o.gemv = "subgroup", o.decode = decode;
      VulkanDecoder fused(path, o, 32), plain(path, o, 32);
      plain.decoder().ops().set_fusion(false);
      EXPECT_EQ(fused.persistent_grid() > 0, decode == "persistent");
      std::vector<int32_t> ids(16);
      for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int32_t>((i * 29 + 3) % c.vocab);
      double worst = 0;
      for (int at = 0; at < 16;) {
        const int n = at == 0 ? 6 : 1;
        const float* a = fused.feed(ids.data() + at, n);
        const float* b = plain.feed(ids.data() + at, n);
        for (int v = 0; v < c.vocab; ++v) worst = std::max(worst, std::fabs(double(a[v]) - b[v]) / (1e-3 + std::fabs(b[v])));
        at += n;
      }
      EXPECT_LT(worst, 1e-3) << c.describe() << " " << decode;
      std::printf("[ vulkan ] %s decode %s: fused vs plain ops, worst logit relative difference %.2e\n",
                  c.describe().c_str(), decode.c_str(), worst);
    }
  }
}

// A persistent decoder's shape: grid (0: probed), rows per subgroup and subgroups per row set
// (0: chosen), keys per attention item (0: chosen); its weights' path ("upload": one buffer, so
// runs of several blocks a dispatch; "import": a buffer per tensor, so a dispatch per block),
// blocks a dispatch at most (0: no cap), and the head on matmul's GEMV (after the final norm's
// own dispatch where there is one) instead of decode_head.
struct PersistentCase {
  uint32_t grid, rows, split, chunk;
  std::string weights = "upload";
  uint32_t blocks = 0;
  bool matmul_head = false;
};

// The persistent decode kernel of each case against the op-by-op decode of the model at `path`
// on the same device, teacher-forced: a 40-token prompt, then `steps` tokens. Logits within 1e-3
// relative (fp32 summation order, as against the CPU).
void expect_persistent_matches_ops(const std::string& path, const ModelConfig& c, int steps,
                                   const std::vector<PersistentCase>& cases) {
  std::vector<int32_t> prompt(40);
  for (size_t i = 0; i < prompt.size(); ++i) prompt[i] = static_cast<int32_t>((i * 37 + 11) % c.vocab);
  VulkanOptions ops_o;
  ops_o.decode = "ops", ops_o.gemv = "subgroup";
  VulkanDecoder ref(path, ops_o, 80);
  std::vector<std::vector<float>> want;
  std::vector<int32_t> fed;
  const float* l = ref.feed(prompt.data(), static_cast<int>(prompt.size()));
  for (int s = 0; s < steps; ++s) {
    fed.push_back(argmax(l, c.vocab));
    l = ref.feed(&fed.back(), 1);
    want.emplace_back(l, l + c.vocab);
  }
  for (const PersistentCase& pc : cases) {
    const auto [grid, rows, split, chunk, weights, blocks, matmul_head] = pc;
    VulkanOptions o;
    o.decode = "persistent", o.persistent_grid = grid, o.gemv_rows = rows, o.gemv_split = split;
    o.attention_chunk = chunk, o.weights = weights, o.persistent_blocks = blocks, o.matmul_head = matmul_head;
    VulkanDecoder gpu(path, o, 80);
    ASSERT_GT(gpu.persistent_grid(), 0u);
    if (grid) {
      EXPECT_EQ(gpu.persistent_grid(), grid);
    }
    const uint32_t runs = weights == "import" || blocks == 1 ? c.layers : blocks ? (c.layers + blocks - 1) / blocks : 1;
    EXPECT_EQ(gpu.persistent_dispatches(), runs) << weights << ", at most " << blocks << " blocks a dispatch";
    gpu.feed(prompt.data(), static_cast<int>(prompt.size()));
    double worst = 0;
    for (int s = 0; s < steps; ++s) {
      const float* g = gpu.feed(&fed[s], 1);
      for (int v = 0; v < c.vocab; ++v)
        worst = std::max(worst, std::fabs(double(want[s][v]) - g[v]) / (1e-3 + std::fabs(want[s][v])));
    }
    const std::string what = "dim " + std::to_string(c.dim) + ", grid " + std::to_string(gpu.persistent_grid()) +
                             ", rows " + std::to_string(rows) + ", split " + std::to_string(split) + ", chunk " +
                             std::to_string(chunk) + ", " + std::to_string(gpu.persistent_dispatches()) +
                             " dispatch(es) for " + std::to_string(c.layers) + " blocks" +
                             (matmul_head ? ", the head on matmul" : "");
    EXPECT_GT(gpu.persistent_grid(), 0u) << "no barrier may have given up: " << what;
    EXPECT_LT(worst, 1e-3) << what;
    std::printf("[ vulkan ] persistent decode %s: worst logit relative difference %.2e\n", what.c_str(), worst);
  }
}

bool cpu_device() {  // CPU devices run the persistent kernel with one workgroup only (Ops::persistent_grid)
  return testing::vulkan_context_or_null()->info().type == VK_PHYSICAL_DEVICE_TYPE_CPU;
}

// The persistent decode kernel (its workgroups meeting at grid barriers) against the op-by-op
// decode: 30 steps after the prompt, so attention spans three chunks of 32 keys. Grids of 1 and 3
// workgroups make every workgroup take several attention items, row sets and FFN slices; 0 is the
// probed grid. Forced GEMV shapes cover odd rows per subgroup and row sets split over subgroups,
// and attention items of 32 keys the combine of a head's items. The 3 blocks run in one dispatch,
// in runs of 2 and 1, and a dispatch each (imported weights: a buffer per tensor).
// Then llama blocks (decode_layer_llama; the prompt op by op, so the two paths share the KV cache),
// 12 steps (two chunks of 32 keys): the three llama variants at one precision each, their rows not
// whole 16-byte words (GQA with F = 107 in int4; MQA of head dim 10 with q/k/v biases and a tied
// head in int8; multi-head with all four biases and F = 130 in f16), and at every precision one
// whose rows are whole words (ALIGNED), 8 query heads of 16 over 2, so that q (128) is wider than
// the model (64), no biases; each also with its head on matmul's GEMV behind the final norm's own
// dispatch. (Every variant at every precision: LlamaGreedyIdenticalToCpuAndLogitsClose.)
TEST(VulkanDecoder, PersistentDecodeMatchesOpByOp) {
  if (!testing::vulkan_available()) GTEST_SKIP() << "no Vulkan device";
  testing::TempDir tmp;
  ModelConfig c = small_config(find_preset("causal"));
  c.layers = 3;
  // (Zero-copy import on CPU devices, lavapipe in CI: a GPU's driver may refuse it.)
  const std::string import_if_cpu = cpu_device() ? "import" : "upload";
  std::vector<PersistentCase> cases = {{1, 0, 0, 0}, {1, 1, 2, 32, "upload", 2}, {1, 3, 4, 0, import_if_cpu, 1}};
  if (!cpu_device())
    cases.insert(cases.end(), {{0, 0, 0, 0}, {3, 0, 0, 32, "upload", 1}, {0, 1, 4, 32, "upload", 2}, {0, 0, 0, 0, import_if_cpu}});
  const std::vector<EdgeDType> all = {EdgeDType::f16, EdgeDType::int8, EdgeDType::int4};
  for (const EdgeDType q : all) {
    std::printf("[ vulkan ] %s:\n", edge_dtype_name(q));
    expect_persistent_matches_ops(export_model(tmp, c, q), c, 30, cases);
  }
  const std::vector<ModelConfig> llama = testing::llama_variants(c);
  ModelConfig aligned = llama[0];
  aligned.heads = 8, aligned.kv_heads = 2, aligned.head_size = 16, aligned.ffn_dim = 96;
  const std::vector<std::pair<ModelConfig, std::vector<EdgeDType>>> models = {
      {llama[0], {EdgeDType::int4}}, {llama[1], {EdgeDType::int8}}, {llama[2], {EdgeDType::f16}}, {aligned, all}};
  cases.push_back({1, 0, 0, 0, "upload", 0, true});
  for (const auto& [m, precisions] : models)
    for (const EdgeDType q : precisions) {
      std::printf("[ vulkan ] %s %s:\n", m.describe().c_str(), edge_dtype_name(q));
      expect_persistent_matches_ops(export_model(tmp, m, q), m, 12, cases);
    }
}

// Shapes the seed size does not have: a width whose FFN (4D = 288) ends in a part of a 64-row
// slice, heads of 24, and int4 groups of 64 (two 16-byte words a scale); and a width (576) whose
// W2 rows the FFN reads in several chunks, the last one partial (256 or 512 rows a chunk in f16,
// 256 or 512 in int8 (4 words in flight a lane), at 256 or 512 threads).
TEST(VulkanDecoder, PersistentDecodeOddShapes) {
  if (!testing::vulkan_available()) GTEST_SKIP() << "no Vulkan device";
  std::vector<PersistentCase> cases = {{1, 0, 0, 0}};
  if (!cpu_device()) cases.insert(cases.end(), {{0, 0, 0, 0}, {3, 0, 0, 0}});
  {
    testing::TempDir tmp;
    ModelConfig c = small_config(find_preset("causal"));
    c.dim = 72, c.heads = 3;
    expect_persistent_matches_ops(export_model(tmp, c, EdgeDType::f16), c, 8, cases);
  }
  {
    testing::TempDir tmp;
    ModelConfig c = small_config(find_preset("causal"));
    c.dim = 576, c.heads = 4;  // W2 read in several chunks of rows (the last one partial)
    for (const EdgeDType q : {EdgeDType::f16, EdgeDType::int8})
      expect_persistent_matches_ops(export_model(tmp, c, q), c, 8, cases);
  }
  testing::TempDir tmp;
  const ModelConfig c = small_config(find_preset("causal"));
  expect_persistent_matches_ops(export_model(tmp, c, EdgeDType::int4, 64), c, 8, cases);
  // A llama block's int4 groups of 64 over rows that are not whole words (W2's 107 columns: two
  // groups, the second partial, in 4 words).
  const ModelConfig llama = testing::llama_variants(c).front();
  expect_persistent_matches_ops(export_model(tmp, llama, EdgeDType::int4, 64), llama, 8, cases);
}

// At dim = 64 x the subgroup size: on the H200 the seed size's width (2048) on the whole grid,
// where a row is a whole number of each dtype's steps of words a lane (8, 4, 2 words of 32 lanes);
// 512 on lavapipe (subgroups of 8).
TEST(VulkanDecoder, PersistentDecodeWideModel) {
  if (!testing::vulkan_available()) GTEST_SKIP() << "no Vulkan device";
  std::vector<PersistentCase> cases = {{1, 0, 0, 0}};
  if (!cpu_device()) cases.insert(cases.end(), {{0, 0, 0, 0}});
  ModelConfig c = small_config(find_preset("causal"));
  c.dim = 64 * static_cast<int>(testing::vulkan_context_or_null()->info().subgroup_size);
  c.heads = c.dim / 128, c.layers = 1;
  for (const EdgeDType q : {EdgeDType::f16, EdgeDType::int8, EdgeDType::int4}) {
    testing::TempDir tmp;
    expect_persistent_matches_ops(export_model(tmp, c, q), c, 6, cases);
  }
}

// The benchmark's timeline variant (clock marks at every step of every block) decodes as the
// plain kernel does, and its marks come in the kernel's order: each step's clock difference
// non-negative (modulo 2^32), every block's marks inside the workgroup's start and end; for
// MiniLLM's blocks and llama's (decode_layer_llama_timeline). Where the device has no shader clock,
// or the model no persistent kernel, asking for it is an error.
TEST(VulkanDecoder, PersistentTimelineMarksEveryStepInOrder) {
  if (!testing::vulkan_available()) GTEST_SKIP() << "no Vulkan device";
  testing::TempDir tmp;
  const ModelConfig causal = small_config(find_preset("causal"));
  for (const ModelConfig& c : {causal, testing::llama_variants(causal)[1]}) {
    const std::string path = export_model(tmp, c, EdgeDType::f16);
    VulkanOptions o;
    o.decode = "persistent", o.weights = "upload";
    VulkanOptions ot = o;
    ot.timeline = true;
    VulkanOptions ops_o = ot;
    ops_o.decode = "ops";
    EXPECT_THROW(VulkanDecoder(path, ops_o, 16), Error);
    if (!testing::vulkan_context_or_null()->info().shader_clock) {
      EXPECT_THROW(VulkanDecoder(path, ot, 16), Error);
      GTEST_SKIP() << "no shader clock";
    }
    VulkanDecoder plain(path, o, 16), timed(path, ot, 16);
    ASSERT_EQ(timed.persistent_dispatches(), 1u);
    const int32_t prompt[3] = {5, 17, 42};
    plain.feed(prompt, 3);
    timed.feed(prompt, 3);
    for (const int32_t t : {7, 90, 3}) {
      const float* a = plain.feed(&t, 1);
      const std::vector<float> want(a, a + c.vocab);
      const float* b = timed.feed(&t, 1);
      for (int v = 0; v < c.vocab; ++v)
        ASSERT_NEAR(b[v], want[v], 1e-4 * (1.0 + std::fabs(want[v]))) << c.describe() << ", logit " << v;
      const vk::LayerTimeline tl = timed.layer_timeline();
      ASSERT_EQ(tl.groups, timed.persistent_grid());
      ASSERT_EQ(tl.blocks, static_cast<uint32_t>(c.layers));
      for (uint32_t g = 0; g < tl.groups; ++g) {
        const uint32_t span = tl.end(g) - tl.start(g);
        EXPECT_GT(span, 0u);
        uint32_t last = tl.start(g);
        for (uint32_t blk = 0; blk < tl.blocks; ++blk)
          for (uint32_t e = 0; e < vk::LayerTimeline::kEvents; ++e) {
            const uint32_t at = tl.at(blk, e, g);
            EXPECT_LE(at - last, span) << c.describe() << ", block " << blk << " event " << e << " workgroup " << g
                                       << " out of order";
            last = at;
          }
        EXPECT_LE(tl.end(g) - last, span);
      }
    }
  }
}

// What the persistent kernel does not run is refused with one line naming it (the decoder then
// decodes op by op, or says that line where the kernel is demanded): a SiLU MLP in blocks other
// than MiniLLM's (no preset has one), query heads that are not groups of the key/value heads, an
// odd head dim, int4 groups that are not a multiple of 32 columns. The same block with SwiGLU runs.
TEST(VulkanDecoder, PersistentKernelRefusesBlocksItDoesNotRun) {
  const std::unique_ptr<vk::Context> ctx = testing::vulkan_context_or_null();
  if (!ctx) GTEST_SKIP() << "no Vulkan device";
  vk::Ops ops(*ctx);
  const auto matrix = [](int64_t rows, int64_t cols, EdgeDType d, int group = 0) {
    vk::DeviceMatrix m;
    m.dtype = d, m.rows = rows, m.cols = cols, m.group = group;
    m.chunks.resize(1);
    return m;
  };
  const int64_t D = 64, F = 96;
  const auto refusal = [&](HeadLayout heads, bool swiglu, EdgeDType d, int group) {
    const vk::DeviceMatrix norm = matrix(1, D, EdgeDType::f32), qkv = matrix(heads.row(), D, d, group),
                           out = matrix(D, heads.q_dim(), d, group), up = matrix(swiglu ? 2 * F : F, D, d, group),
                           down = matrix(D, F, d, group);
    vk::Ops::DecodeLayerArgs a{};
    a.norm1 = a.norm2 = &norm, a.qkv = &qkv, a.out = &out, a.ffn0 = &up, a.ffn2 = &down;
    a.heads = heads, a.max_keys = 16, a.swiglu = swiglu;
    return ops.decode_layer_unsupported(a);
  };
  const std::string runs = refusal({4, 2, 16}, true, EdgeDType::int4, 32);
  if (runs.find("atomic") != std::string::npos || runs.find("subgroups") != std::string::npos ||
      runs.find("storage buffers") != std::string::npos)
    GTEST_SKIP() << "the device runs no persistent kernel: " << runs;
  EXPECT_EQ(runs, "");
  EXPECT_EQ(refusal({4, 2, 16}, false, EdgeDType::f16, 0),
            "a SiLU MLP outside MiniLLM's blocks (heads of dim/heads with q, k, v and o biases, 4·dim wide)");
  EXPECT_EQ(refusal({4, 3, 16}, true, EdgeDType::f16, 0),
            "query heads that are not groups of the key/value heads (at most 1024)");
  EXPECT_EQ(refusal({4, 2, 15}, true, EdgeDType::f16, 0), "a head dim that is not even up to 256");
  EXPECT_EQ(refusal({4, 2, 16}, true, EdgeDType::int4, 48), "int4 groups that are not a multiple of 32");
}

// The benchmarks' load counts: 2, 4, 8 or 16 words a lane; another (3 would leave one row of each
// 64-row slice of the MLP uncomputed) is one line.
TEST(VulkanDecoder, PersistentTuningRefusesLoadCountsThatSkipRows) {
  const std::unique_ptr<vk::Context> ctx = testing::vulkan_context_or_null();
  if (!ctx) GTEST_SKIP() << "no Vulkan device";
  vk::Ops ops(*ctx);
  for (const uint32_t ok : {0u, 2u, 4u, 8u, 16u}) EXPECT_NO_THROW(ops.set_decode_tuning({ok, ok, 0, 0}));
  for (const uint32_t bad : {1u, 3u, 6u, 12u, 32u}) {
    EXPECT_THROW(ops.set_decode_tuning({bad, 0, 0, 0}), Error) << bad;
    EXPECT_THROW(ops.set_decode_tuning({0, bad, 0, 0}), Error) << bad;
  }
  try {
    ops.set_decode_tuning({3, 0, 0, 0});
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("layer loads 3 is not 2, 4, 8 or 16"), std::string::npos) << e.what();
  }
}

// A grid too large to run at once is refused by the probe (a clear error when the persistent path
// is demanded, as for a seed-preset model or a device without float or 64-bit atomics; "auto" then
// decodes op by op); a barrier that gives up mid-token (injected) makes the decoder redo the token
// op by op, with the same result, and stay on that path.
TEST(VulkanDecoder, PersistentDecodeFallsBackWhenBarriersFail) {
  if (!testing::vulkan_available()) GTEST_SKIP() << "no Vulkan device";
  testing::TempDir tmp;
  const ModelConfig c = small_config(find_preset("causal"));
  const std::string path = export_model(tmp, c, EdgeDType::f16);
  VulkanOptions o;
  o.decode = "persistent", o.persistent_grid = 4096;
  try {
    VulkanDecoder gpu(path, o, 16);
    ADD_FAILURE() << "a grid of 4096 workgroups of 256 passed the residency probe";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("persistent decode kernel cannot run"), std::string::npos) << e.what();
  }
  // A device without float atomic adds or 64-bit atomics (the FFN's sums, q and k's tagged pairs):
  // the kernel's reason when it is demanded, op by op under "auto".
  for (const bool lacks_int64 : {false, true}) {
    VulkanOptions lacking = o;
    lacking.persistent_grid = 0;
    (lacks_int64 ? lacking.allow_int64_atomics : lacking.allow_float_atomics) = false;
    const std::string reason = lacks_int64 ? "no 64-bit atomics" : "no float atomic add";
    try {
      VulkanDecoder gpu(path, lacking, 16);
      ADD_FAILURE() << "the persistent kernel ran with " << reason;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(reason), std::string::npos) << e.what();
    }
    lacking.decode = "auto";
    EXPECT_EQ(VulkanDecoder(path, lacking, 16).persistent_grid(), 0u) << reason;
  }
  VulkanOptions seed_o;  // the seed preset has no decode step: asking for the kernel is an error
  seed_o.decode = "persistent";
  EXPECT_THROW(VulkanDecoder(export_model(tmp, small_config(find_preset("seed")), EdgeDType::f16), seed_o, 16), Error);
  VulkanOptions ops_o;
  ops_o.decode = "ops", ops_o.gemv = "subgroup";
  VulkanDecoder ref(path, ops_o, 16);
  o.persistent_grid = 0;
  VulkanDecoder gpu(path, o, 16);
  ASSERT_GT(gpu.persistent_grid(), 0u);
  const int32_t prompt[3] = {5, 17, 42};
  ref.feed(prompt, 3);
  gpu.feed(prompt, 3);
  const int32_t t = 7;
  const float* a = ref.feed(&t, 1);
  const std::vector<float> want(a, a + c.vocab);
  const float* b = nullptr;
  gpu.backend().set_fail_barriers(true);  // every grid barrier gives up
  b = gpu.feed(&t, 1);
  gpu.backend().set_fail_barriers(false);
  EXPECT_EQ(gpu.persistent_grid(), 0u);
  EXPECT_EQ(gpu.persistent_gave_up_at(), 3);
  EXPECT_NE(gpu.describe().find("op by op since position 3"), std::string::npos) << gpu.describe();
  for (int v = 0; v < c.vocab; ++v) EXPECT_NEAR(b[v], want[v], 1e-4 * (1e-3 + std::fabs(want[v]))) << v;
}

// prepare() records the commands of a prefill and of the decode step without running them: the
// logits that follow are those of a decoder that never prepared (the decode step's recording,
// made before the prefill ran, replays the same), and a prompt that does not fit is an error.
// Within 1e-5 of the row's largest logit, not to the bit: on GPUs the persistent kernel adds its FFN
// sums with float atomics, whose order varies run to run, so a logit's error scales with the terms
// summed (the residual stream's size), not with the logit itself (H200: 6e-8 on a logit of 2.4e-3).
TEST(VulkanDecoder, PrepareLeavesTheLogitsAsTheyWere) {
  if (!testing::vulkan_available()) GTEST_SKIP() << "no Vulkan device";
  testing::TempDir tmp;
  std::vector<int32_t> tokens(12);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<int32_t>((i * 29 + 3) % 97);
  for (const Preset& p : testing::multi_head_presets()) {
    const std::string path = export_model(tmp, small_config(p), EdgeDType::int8);
    const auto run = [&](bool prepared, int prompt) {
      VulkanDecoder gpu(path, VulkanOptions{}, 16);
      if (prepared) gpu.prepare(prompt);
      std::vector<float> all;
      const float* l = gpu.feed(tokens.data(), prompt);
      all.insert(all.end(), l, l + 97);
      for (size_t t = static_cast<size_t>(prompt); t < tokens.size(); ++t) {
        l = gpu.feed(&tokens[t], 1);
        all.insert(all.end(), l, l + 97);
      }
      return all;
    };
    for (const int prompt : {1, 7}) {
      const std::vector<float> a = run(true, prompt), b = run(false, prompt);
      ASSERT_EQ(a.size(), b.size());
      for (size_t row = 0; row < a.size(); row += 97) {
        float scale = 0;
        for (size_t i = row; i < row + 97; ++i) scale = std::max(scale, std::fabs(b[i]));
        for (size_t i = row; i < row + 97; ++i)
          ASSERT_NEAR(a[i], b[i], 1e-5 * scale) << p.name << ", prompt " << prompt << ", " << i;
      }
    }
    VulkanDecoder gpu(path, VulkanOptions{}, 16);
    EXPECT_THROW(gpu.prepare(17), Error);
    EXPECT_THROW(gpu.prepare(0), Error);
  }
}

TEST(VulkanDecoder, EvalLossMatchesCpu) {
  if (!testing::vulkan_available()) GTEST_SKIP() << "no Vulkan device";
  testing::TempDir tmp;
  std::vector<uint16_t> toks(4096);
  for (size_t i = 0; i < toks.size(); ++i) toks[i] = static_cast<uint16_t>((i * 31 + i / 7) % 97);
  write_file_atomic(tmp.file("t.bin"), std::string(reinterpret_cast<const char*>(toks.data()), toks.size() * 2));
  const TokenFile data(tmp.file("t.bin"));
  for (const Preset& p : testing::multi_head_presets()) {
    const ModelConfig c = small_config(p);
    const std::string path = export_model(tmp, c, EdgeDType::int8);
    const std::vector<float> flat = dequantized(path);
    MiniLLM model(c);
    const EvalResult ref = evaluate(model, flat.data(), data, 2, 24, 2);
    VulkanDecoder gpu(path, {}, 24);
    const EvalResult got =
        evaluate_rows([&gpu](const int32_t* t, int n, float* logits) { gpu.score(t, n, logits); }, c.vocab, data, 2, 24, 2);
    EXPECT_EQ(got.tokens, ref.tokens);
    EXPECT_NEAR(got.loss, ref.loss, 1e-5 * ref.loss) << p.name;  // fp32 summation order
    std::printf("[ vulkan ] eval %s: %.7f vs cpu %.7f\n", p.name, got.loss, ref.loss);
  }
}

TEST(VulkanDecoder, ImportUploadAndSplitBuffersAgree) {
  if (!testing::vulkan_available()) GTEST_SKIP() << "no Vulkan device";
  testing::TempDir tmp;
  ModelConfig c = small_config(find_preset("causal"));
  c.vocab = 601;  // the head and embedding (601 rows) split at 256 rows below
  c.dim = 32;     // one int4 group per row: 601 f16 scales, a range that ends mid-word
  const std::string path = export_model(tmp, c, EdgeDType::int4);
  std::vector<std::vector<float>> runs;
  for (const std::string w : {"upload", "import", "split"}) {
    VulkanOptions o;
    o.weights = w == "split" ? "auto" : w;
    if (w == "split") o.max_buffer_bytes = 300 * 32 * 4;  // 300 rows of fp32 activations
    std::unique_ptr<VulkanDecoder> d;
    try {
      d = std::make_unique<VulkanDecoder>(path, o, 16);
    } catch (const Error& e) {
      ASSERT_EQ(w, "import") << e.what();  // a driver may refuse imports; upload must work
      std::printf("[ vulkan ] import refused here: %s\n", e.what());
      continue;
    }
    std::printf("[ vulkan ] %s\n", d->describe().c_str());
    const int32_t ids[] = {1, 500, 600, 3};
    const float* l = d->feed(ids, 4);
    runs.emplace_back(l, l + c.vocab);
  }
  for (size_t i = 1; i < runs.size(); ++i) EXPECT_EQ(runs[i], runs[0]);
}

TEST(VulkanDecoder, BadDeviceFileAndAllocationFailuresGiveErrors) {
  if (!testing::vulkan_available()) GTEST_SKIP() << "no Vulkan device";
  testing::TempDir tmp;
  const std::string path = export_model(tmp, small_config(find_preset("causal")), EdgeDType::f16);
  VulkanOptions bad;
  bad.device_index = 99;
  EXPECT_THROW(VulkanDecoder(path, bad, 16), Error);
  EXPECT_THROW(parse_vulkan_options("vulkan:x", true, "auto"), Error);
  EXPECT_THROW(parse_vulkan_options("vulkan:", true, "auto"), Error);
  EXPECT_EQ(parse_vulkan_options("vulkan:1", false, "upload").device_index, 1);
  EXPECT_THROW(VulkanDecoder(std::string(PYLON_GOLDEN_DIR) + "/seed_small/init.safetensors", {}, 16), Error);  // a safetensors file, not an edge file
  write_file_atomic(tmp.file("cut.edge"), std::string(4096, 'x'));
  EXPECT_THROW(VulkanDecoder(tmp.file("cut.edge"), {}, 16), Error);

  // Every allocation in turn fails: each gives a pylon::Error naming the failed call, never a crash.
  // (Forced upload: on the automatic path a failed import falls back to the upload, by design.)
  VulkanOptions upload;
  upload.weights = "upload";
  int failures = 0;
  for (int n = 1; n < 200; ++n) {
    upload.fail_allocation = n;
    try {
      VulkanDecoder d(path, upload, 16);
      const int32_t t = 3;
      d.feed(&t, 1);
      break;  // n is past the last allocation
    } catch (const Error& e) {
      ++failures;
      EXPECT_NE(std::string(e.what()).find("VK_ERROR_OUT_OF_DEVICE_MEMORY"), std::string::npos) << e.what();
    }
  }
  EXPECT_GT(failures, 10);
}

}  // namespace
}  // namespace pylon
