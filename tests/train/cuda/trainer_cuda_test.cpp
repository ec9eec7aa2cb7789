// Training on the GPU follows the CPU's loss curve (bf16 compute vs fp32) for 60 steps, and in fp32
// (--dtype fp32) at fp32 tolerance.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "io/token_file.h"
#include "ops/cuda/runtime.h"
#include "support/presets.h"
#include "support/metrics_check.h"
#include "support/temp_dir.h"
#include "train/trainer.h"

namespace pylon {
namespace {

// One metric per metrics line (NaN where a line has none).
std::vector<double> column(const std::string& path, const char* key) {
  std::vector<double> out;
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);) {
    const auto row = nlohmann::json::parse(line);
    out.push_back(row.contains(key) ? row[key].get<double>() : std::nan(""));
  }
  return out;
}

std::vector<double> losses(const std::string& path) { return column(path, "loss"); }

// A 2-block CUDA model (V=200, D=128, H=2, T=64) on 20000 tokens (i·a + i/b) mod 199 written to
// tmp's data.bin; the callers set batch, steps and learning rate.
TrainOptions small_cuda_run(const testing::TempDir& tmp, const Preset& preset, size_t a, size_t b) {
  std::vector<uint32_t> ids(20000);
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<uint32_t>((i * a + i / b) % 199);
  write_token_file(tmp.file("data.bin"), ids, TokenWidth::u16);
  TrainOptions o;
  o.device = "cuda";
  o.model.preset = preset;
  o.model.vocab = 200, o.model.dim = 128, o.model.layers = 2, o.model.heads = 2;
  o.seq = 64;
  o.data = tmp.file("data.bin"), o.log_every = 0;
  return o;
}

// Both presets (seed: bidirectional attention; causal) at head dim 64, and the seed preset at head
// dim 128, where the forward is the warp-specialised kernel on Hopper.
TEST(CudaTrainer, FollowsTheCpuLossCurve) {
  if (cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device";
  testing::TempDir tmp;
  std::vector<uint32_t> ids(60000);
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<uint32_t>((i * i + 7 * i) % 251);  // learnable
  write_token_file(tmp.file("data.bin"), ids, TokenWidth::u16);
  struct Case {
    Preset preset;
    int dim;
  };
  for (const Case c : {Case{find_preset("seed"), 128}, Case{find_preset("causal"), 128}, Case{find_preset("seed"), 256}}) {
    SCOPED_TRACE(std::string(c.preset.name) + " head dim " + std::to_string(c.dim / 2));
    TrainOptions o;
    o.model.preset = c.preset;
    o.model.vocab = 256, o.model.dim = c.dim, o.model.layers = 2, o.model.heads = 2;
    o.batch = 4, o.seq = 64, o.steps = 60, o.adamw.lr = 2e-3f, o.grad_clip = 1.0f;
    o.schedule = {LrSchedule::cosine, 2e-3f, 5, 0.1f};
    o.data = tmp.file("data.bin"), o.log_every = 0;
    o.metrics_path = tmp.file("cpu.jsonl");
    train(o);
    o.device = "cuda", o.metrics_path = tmp.file("cuda.jsonl");
    train(o);
    const auto cpu = losses(tmp.file("cpu.jsonl")), gpu = losses(tmp.file("cuda.jsonl"));
    ASSERT_EQ(cpu.size(), 60u);
    ASSERT_EQ(gpu.size(), 60u);
    // bf16 compute drifts from fp32 as training goes on: 3% per step, and the curve must fall.
    for (size_t i = 0; i < cpu.size(); ++i) EXPECT_NEAR(gpu[i], cpu[i], 0.03 * cpu[i]) << "step " << i + 1;
    EXPECT_LT(gpu.back(), 0.8 * gpu.front());
  }
}

// --dtype fp32: fp32 weights and activations on the GPU, so the curve is the CPU's up to fp32
// summation order. Step 1 runs on identical weights: the loss differs only by the forward's
// rounding (~1e-6 relative; the model test bounds it at 1e-5). Each update then differs by the
// gradients' rounding (~1e-6 relative per element; a sign flip of AdamW's step only where a
// gradient is ~0, which moves the loss by ~0), and training carries that on: two CPU runs of
// these models whose only difference is the gradients' summation order (world 1 vs 2, the same
// global batch) stay within 2e-6 relative for 60 steps (measured: causal 2.0e-6, seed 3e-7).
// The GPU reorders every GEMM too (~10x the perturbation), so 2e-4 per step leaves ~10x room
// over the expected ~2e-5 and is 150x tighter than the bf16 test's 3% (bf16 rounding alone is
// ~4e-3 per element).
TEST(CudaTrainer, Fp32FollowsTheCpuLossCurveAtFp32Tolerance) {
  if (cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device";
  testing::TempDir tmp;
  std::vector<uint32_t> ids(60000);
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<uint32_t>((i * i + 7 * i) % 251);
  write_token_file(tmp.file("data.bin"), ids, TokenWidth::u16);
  for (const Preset& preset : testing::multi_head_presets()) {
    SCOPED_TRACE(preset.name);
    TrainOptions o;
    o.model.preset = preset;
    o.model.vocab = 256, o.model.dim = 128, o.model.layers = 2, o.model.heads = 2;  // head dim 64
    o.batch = 4, o.seq = 64, o.steps = 60, o.adamw.lr = 2e-3f, o.grad_clip = 1.0f;
    o.schedule = {LrSchedule::cosine, 2e-3f, 5, 0.1f};
    o.data = tmp.file("data.bin"), o.log_every = 0;
    o.metrics_path = tmp.file("cpu.jsonl");
    train(o);
    o.device = "cuda", o.dtype = "fp32", o.metrics_path = tmp.file("cuda.jsonl");
    train(o);
    const auto cpu = losses(tmp.file("cpu.jsonl")), gpu = losses(tmp.file("cuda.jsonl"));
    ASSERT_EQ(cpu.size(), 60u);
    ASSERT_EQ(gpu.size(), 60u);
    EXPECT_NEAR(gpu[0], cpu[0], 1e-5 * cpu[0]) << "step 1";
    for (size_t i = 1; i < cpu.size(); ++i) EXPECT_NEAR(gpu[i], cpu[i], 2e-4 * cpu[i]) << "step " << i + 1;
    EXPECT_LT(gpu.back(), 0.8 * gpu.front());
  }
}


// The llama variants (support/presets.h) at D = 256: grouped-query heads of 64, multi-query heads of
// 10 (the generic attention kernel) with q/k/v biases and a tied head, two heads of 128 with every
// bias; SwiGLU, the final norm. fp32 within the MiniLLM presets' 2e-4 (step 1: 1e-5); bf16 as said
// below.
TEST(CudaTrainer, LlamaFollowsTheCpuLossCurve) {
  if (cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device";
  testing::TempDir tmp;
  std::vector<uint32_t> ids(60000);
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<uint32_t>((i * i + 7 * i) % 251);
  write_token_file(tmp.file("data.bin"), ids, TokenWidth::u16);
  ModelConfig base;
  base.vocab = 256, base.dim = 256, base.layers = 2;
  for (const ModelConfig& model : testing::llama_variants(base)) {
    for (const char* dtype : {"bf16", "fp32"}) {
      SCOPED_TRACE(model.describe() + " " + dtype);
      TrainOptions o;
      o.model = model;
      o.batch = 4, o.seq = 64, o.steps = 40, o.adamw.lr = 2e-3f, o.grad_clip = 1.0f;
      o.schedule = {LrSchedule::cosine, 2e-3f, 5, 0.1f};
      o.data = tmp.file("data.bin"), o.log_every = 0;
      o.metrics_path = tmp.file("cpu.jsonl");
      train(o);
      o.device = "cuda", o.dtype = dtype, o.metrics_path = tmp.file("cuda.jsonl");
      train(o);
      const auto cpu = losses(tmp.file("cpu.jsonl")), gpu = losses(tmp.file("cuda.jsonl"));
      ASSERT_EQ(cpu.size(), 40u);
      ASSERT_EQ(gpu.size(), 40u);
      const bool fp32 = std::string(dtype) == "fp32";
      double worst = 0;
      for (size_t i = 0; i < cpu.size(); ++i) {
        const double rel = std::fabs(gpu[i] - cpu[i]) / cpu[i];
        worst = std::max(worst, rel);
        // fp32: as above. bf16: 3% while the loss is high (the first 10 steps); past them these
        // models memorise the data (loss 5.6 -> 0.3 in 40 steps), where bf16's perturbations grow
        // faster than in the MiniLLM runs above: 12%.
        const double bound = fp32 ? (i == 0 ? 1e-5 : 2e-4) : (i < 10 ? 0.03 : 0.12);
        EXPECT_LE(rel, bound) << "step " << i + 1 << ": " << gpu[i] << " vs " << cpu[i];
      }
      std::printf("[ curve ] %s %s: largest relative difference %.3g\n", model.describe().c_str(), dtype, worst);
      EXPECT_LT(gpu.back(), 0.8 * gpu.front());
    }
  }
}

TEST(CudaTrainer, GradAccumulationEqualsLargerBatch) {
  if (cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device";
  testing::TempDir tmp;
  TrainOptions o = small_cuda_run(tmp, find_preset("seed"), 31, 7);
  o.steps = 8, o.adamw.lr = 1e-3f;
  o.batch = 4, o.grad_accum = 1, o.metrics_path = tmp.file("big.jsonl");
  train(o);
  o.batch = 2, o.grad_accum = 2, o.metrics_path = tmp.file("accum.jsonl");
  train(o);
  const auto a = losses(tmp.file("big.jsonl")), b = losses(tmp.file("accum.jsonl"));
  ASSERT_EQ(a.size(), b.size());
  // Same rows and the same update up to bf16 rounding of different micro-batch shapes.
  for (size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(a[i], b[i], 1e-2 * a[i]) << "step " << i + 1;
}


// Checkpoints through the sharded format (a world of one): resuming continues bit-identically,
// and the CPU trainer can read what the GPU wrote.
// The causal preset, and a llama model with a tied head (its checkpoint an HF folder).
TEST(CudaTrainer, ResumeIsBitIdenticalAndCpuReadsTheCheckpoint) {
  if (cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device";
  for (const bool llama : {false, true}) {
    SCOPED_TRACE(llama ? "llama, tied head" : "causal");
    testing::TempDir tmp;
    TrainOptions o = small_cuda_run(tmp, find_preset("causal"), 17, 5);
    if (llama) o.model = testing::llama_variants(o.model)[1];
    const float lr = llama ? 3e-3f : 1e-2f;  // 1e-2 makes this llama's loss rise
    o.batch = 2, o.steps = 6, o.adamw.lr = lr, o.schedule.lr = lr;
    o.save_dir = tmp.file("full"), o.save_every = 3, o.metrics_path = tmp.file("full.jsonl");
    train(o);
    o.resume_dir = tmp.file("full/step_000003"), o.save_dir = tmp.file("resumed");
    o.metrics_path = tmp.file("resumed.jsonl");
    train(o);
    const auto a = losses(tmp.file("full.jsonl")), b = losses(tmp.file("resumed.jsonl"));
    ASSERT_EQ(a.size(), 6u);
    ASSERT_EQ(b.size(), 3u);
    for (int i = 0; i < 3; ++i) EXPECT_EQ(a[3 + i], b[i]) << "step " << 4 + i;  // bitwise
    // The CPU trainer continues the GPU's step-3 checkpoint (fp32 vs bf16: close, not equal); the
    // loss has fallen far enough by then that a wrongly loaded state would show (the llama model at
    // its lower rate: 4% on the H200).
    ASSERT_LT(a[3], (llama ? 0.98 : 0.95) * a[0]);
    o.device = "cpu", o.save_dir = "", o.metrics_path = tmp.file("cpu.jsonl");
    train(o);
    const auto c = losses(tmp.file("cpu.jsonl"));
    ASSERT_EQ(c.size(), 3u);
    for (int i = 0; i < 3; ++i) EXPECT_NEAR(c[i], a[3 + i], 0.02 * a[3 + i]) << "step " << 4 + i;
  }
}


// Without clipping AdamW sums the gradient's squares as it reads it (per unit when it runs per
// unit); with a clip threshold no gradient reaches, a separate pass sums them first and the update
// is the same (coefficient 1). The loss curves are bit-identical and grad_norm agrees to fp32
// rounding of the two summation orders, with and without accumulation (the two optimizer paths).
TEST(CudaTrainer, FoldedGradNormMatchesSeparatePass) {
  if (cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device";
  testing::TempDir tmp;
  TrainOptions o = small_cuda_run(tmp, find_preset("seed"), 13, 3);
  o.batch = 2, o.steps = 6, o.adamw.lr = 1e-3f;
  for (int accum : {1, 2}) {
    o.grad_accum = accum;
    const std::string tag = "accum" + std::to_string(accum);
    o.grad_clip = 0, o.metrics_path = tmp.file(tag + "_folded.jsonl");
    train(o);
    o.grad_clip = 1e9f, o.metrics_path = tmp.file(tag + "_separate.jsonl");
    train(o);
    const auto lf = column(tmp.file(tag + "_folded.jsonl"), "loss"), ls = column(tmp.file(tag + "_separate.jsonl"), "loss");
    const auto nf = column(tmp.file(tag + "_folded.jsonl"), "grad_norm");
    const auto ns = column(tmp.file(tag + "_separate.jsonl"), "grad_norm");
    ASSERT_EQ(lf.size(), 6u) << tag;
    ASSERT_EQ(ls.size(), 6u) << tag;
    for (size_t i = 0; i < lf.size(); ++i) {
      EXPECT_EQ(lf[i], ls[i]) << tag << " step " << i + 1;  // bitwise
      EXPECT_GT(ns[i], 0) << tag << " step " << i + 1;
      EXPECT_NEAR(nf[i], ns[i], 1e-5 * ns[i]) << tag << " step " << i + 1;
    }
  }
}

// --eval-every on the GPU: the validation loss after steps 4 and 8 (and only there) follows the
// CPU trainer's (fp32) within bf16 drift, and the GPU's eval leaves training unchanged (the loss
// curve equals a run without validation, bit for bit).
TEST(CudaTrainer, ValidationLossMatchesCpu) {
  if (cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device";
  testing::TempDir tmp;
  std::vector<uint32_t> ids(30000), val_ids(9000);
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<uint32_t>((i * i + 7 * i) % 251);
  for (size_t i = 0; i < val_ids.size(); ++i) val_ids[i] = static_cast<uint32_t>((i * i + 3 * i + 5) % 251);
  write_token_file(tmp.file("data.bin"), ids, TokenWidth::u16);
  write_token_file(tmp.file("val.bin"), val_ids, TokenWidth::u16);
  TrainOptions o;
  o.model.preset = find_preset("causal");
  o.model.vocab = 256, o.model.dim = 128, o.model.layers = 3, o.model.heads = 2;
  o.batch = 3, o.seq = 48, o.steps = 8, o.adamw.lr = 2e-3f, o.grad_clip = 1.0f;
  o.data = tmp.file("data.bin"), o.val_data = tmp.file("val.bin"), o.log_every = 0;
  o.eval_every = 4, o.eval_steps = 5;
  o.metrics_path = tmp.file("cpu.jsonl");
  const TrainResult cpu_result = train(o);
  o.device = "cuda", o.metrics_path = tmp.file("cuda.jsonl");
  const TrainResult gpu_result = train(o);
  o.eval_every = 0, o.metrics_path = tmp.file("cuda_no_eval.jsonl");
  train(o);
  const auto cpu = column(tmp.file("cpu.jsonl"), "val_loss"), gpu = column(tmp.file("cuda.jsonl"), "val_loss");
  ASSERT_EQ(cpu.size(), 8u);
  ASSERT_EQ(gpu.size(), 8u);
  for (size_t i = 0; i < gpu.size(); ++i) {
    if (i == 3 || i == 7) {
      EXPECT_NEAR(gpu[i], cpu[i], 0.02 * cpu[i]) << "step " << i + 1;
    } else {
      EXPECT_TRUE(std::isnan(gpu[i])) << "step " << i + 1 << " has a val_loss";
    }
  }
  EXPECT_NE(gpu[7], gpu[3]);  // the second evaluation saw the updated weights
  EXPECT_NEAR(gpu_result.final_val_loss, cpu_result.final_val_loss, 0.02 * cpu_result.final_val_loss);
  EXPECT_EQ(column(tmp.file("cuda.jsonl"), "loss"), column(tmp.file("cuda_no_eval.jsonl"), "loss"));
  // One metrics schema on both devices (train/metrics.h).
  testing::expect_rows_follow_schema(testing::read_metrics(tmp.file("cpu.jsonl")), 1, false, {4, 8});
  testing::expect_rows_follow_schema(testing::read_metrics(tmp.file("cuda.jsonl")), 1, true, {4, 8});
  testing::expect_rows_follow_schema(testing::read_metrics(tmp.file("cuda_no_eval.jsonl")), 1, true, {});
}

// The split root on one GPU: the AdamW of the head (and of a llama's final norm) runs as soon as their
// backward ends (during the blocks' backward), the embedding's at the end, and their gradients share
// one buffer. The same fp32 arithmetic element by element as the whole root, so the same losses bit
// for bit, for both optimizer paths, and with --one-gpu-reshard (the next step's head and norm then
// gathered on the reduce stream); the grad norm's per-parameter sums are added in another order (fp32
// rounding). (A tied head's gradient is the embedding's, final only at the end: a tied model has no
// split root.)
TEST(CudaTrainer, SplitRootEqualsWholeRoot) {
  if (cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device";
  testing::TempDir tmp;
  TrainOptions o = small_cuda_run(tmp, find_preset("seed"), 23, 5);
  o.batch = 2, o.steps = 6, o.adamw.lr = 2e-3f;
  std::vector<ModelConfig> models;
  for (const Preset& preset : testing::multi_head_presets()) models.push_back(o.model), models.back().preset = preset;
  for (const ModelConfig& llama : testing::llama_variants(o.model))
    if (!llama.tied_head) models.push_back(llama);
  for (const ModelConfig& model : models) {
    o.model = model;
    for (const float clip : {0.f, 1.f}) {
      for (const bool slots : {false, true}) {
        if (slots && clip > 0) continue;  // the reduce stream gathers with the per-unit optimizer only
        SCOPED_TRACE(model.describe() + " clip " + std::to_string(clip) + (slots ? " one-GPU reshard" : ""));
        o.grad_clip = clip, o.one_gpu_reshard = slots;
        o.split_root = true, o.metrics_path = tmp.file("split.jsonl");
        train(o);
        o.split_root = false, o.metrics_path = tmp.file("whole.jsonl");
        train(o);
        const auto split = column(tmp.file("split.jsonl"), "loss"), whole = column(tmp.file("whole.jsonl"), "loss");
        ASSERT_EQ(split.size(), 6u);
        EXPECT_EQ(split, whole);  // bitwise
        const auto ns = column(tmp.file("split.jsonl"), "grad_norm"), nw = column(tmp.file("whole.jsonl"), "grad_norm");
        for (size_t i = 0; i < ns.size(); ++i) EXPECT_NEAR(ns[i], nw[i], 1e-5 * nw[i]) << "step " << i + 1;
      }
    }
  }
  o.one_gpu_reshard = false;
}

// --one-gpu-reshard: a world of one casts each block's bf16 weights into rotating slots before its
// forward and again before its backward instead of keeping AdamW's bf16 copy of the whole model.
// Both round the same fp32 master to nearest, so the weights, losses and grad norms are the same bit
// for bit: for both optimizer paths (clipping keeps gradient shards), without resharding after
// forward, under a CUDA graph, and for a tied llama model; and 6 blocks in 2 slots take less memory.
TEST(CudaTrainer, OneGpuReshardEqualsPersistentWeights) {
  if (cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device";
  testing::TempDir tmp;
  TrainOptions o = small_cuda_run(tmp, find_preset("seed"), 23, 5);
  // 4 of 6 blocks of 1.8M parameters not kept: 14 MB, several of the allocator's 2 MiB pages.
  o.batch = 2, o.steps = 6, o.adamw.lr = 2e-3f, o.model.dim = 384, o.model.layers = 6;
  const ModelConfig seed = o.model, tied_llama = testing::llama_variants(o.model)[1];
  for (const ModelConfig& model : {seed, tied_llama}) {
    for (const float clip : {0.f, 1.f}) {
      SCOPED_TRACE(model.describe() + " clip " + std::to_string(clip));
      o.model = model, o.grad_clip = clip;
      o.one_gpu_reshard = false, o.metrics_path = tmp.file("kept.jsonl");
      train(o);
      const auto kept = column(tmp.file("kept.jsonl"), "loss");
      ASSERT_EQ(kept.size(), 6u);
      struct Variant {
        const char* name;
        bool reshard_after_forward, cuda_graph;
      };
      for (const Variant v : {Variant{"reshard", true, false}, Variant{"no-reshard", false, false},
                              Variant{"reshard, graph", true, true}}) {
        SCOPED_TRACE(v.name);
        o.one_gpu_reshard = true, o.reshard_after_forward = v.reshard_after_forward, o.cuda_graph = v.cuda_graph;
        o.metrics_path = tmp.file("slots.jsonl");
        train(o);
        EXPECT_EQ(column(tmp.file("slots.jsonl"), "loss"), kept);  // bitwise
        EXPECT_EQ(column(tmp.file("slots.jsonl"), "grad_norm"), column(tmp.file("kept.jsonl"), "grad_norm"));
        const double slots_peak = column(tmp.file("slots.jsonl"), "peak_mem_bytes").back();
        const double kept_peak = column(tmp.file("kept.jsonl"), "peak_mem_bytes").back();
        if (v.reshard_after_forward) {
          EXPECT_LT(slots_peak, kept_peak);
        }
        o.reshard_after_forward = true, o.cuda_graph = false;
      }
    }
  }
}

// --cuda-graph: steps 2 and 3 are captured (one graph per step parity) and later steps replay them,
// with the learning rate (warmup and cosine: a new value every step) and AdamW's bias corrections
// read from device memory. The losses, grad norms and validation losses equal the eager run's bit
// for bit, for both optimizer paths (AdamW per unit; gradient shards with clipping and
// accumulation), with a validation and a checkpoint between replays, and the metrics say which
// steps ran as graphs.
TEST(CudaTrainer, CudaGraphReplayEqualsEagerBitForBit) {
  if (cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device";
  testing::TempDir tmp;
  TrainOptions o = small_cuda_run(tmp, find_preset("causal"), 29, 3);
  o.val_data = o.data, o.eval_every = 4, o.eval_steps = 2;
  o.batch = 2, o.steps = 9, o.adamw.lr = 2e-3f, o.schedule.lr = 2e-3f;
  o.schedule.kind = LrSchedule::cosine, o.schedule.warmup = 3;
  struct Case {
    const char* name;
    int accum;
    float clip;
  };
  for (const Case c : {Case{"per-unit AdamW", 1, 0.f}, Case{"clipped, accumulated", 2, 1.f}}) {
    o.grad_accum = c.accum, o.grad_clip = c.clip;
    o.cuda_graph = false, o.metrics_path = tmp.file("eager.jsonl"), o.save_dir = "";
    train(o);
    o.cuda_graph = true, o.metrics_path = tmp.file("graph.jsonl"), o.save_dir = tmp.file("ckpt" + std::to_string(c.accum));
    o.save_every = 5;
    train(o);
    for (const char* key : {"loss", "grad_norm", "lr"}) {
      const auto eager = column(tmp.file("eager.jsonl"), key), graph = column(tmp.file("graph.jsonl"), key);
      ASSERT_EQ(graph.size(), 9u) << c.name;
      EXPECT_EQ(graph, eager) << c.name << ": " << key;  // bitwise
    }
    const auto ve = column(tmp.file("eager.jsonl"), "val_loss"), vg = column(tmp.file("graph.jsonl"), "val_loss");
    for (size_t i : {size_t{3}, size_t{7}, size_t{8}}) EXPECT_EQ(vg[i], ve[i]) << c.name << " step " << i + 1;
    std::ifstream in(tmp.file("graph.jsonl"));
    size_t step = 0;
    for (std::string line; std::getline(in, line); ++step)
      EXPECT_EQ(nlohmann::json::parse(line)["cuda_graph"].get<bool>(), step > 0) << c.name << " step " << step + 1;
  }
}

}  // namespace
}  // namespace pylon
