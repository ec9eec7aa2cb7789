// The GPU memory plan (train/memory_plan.h, cuda_step_memory) against what the CUDA step really
// allocates: the model's activation arena, FSDP's buffers and a whole run's allocated bytes; and a
// run that cannot fit refused from the plan, with one line, before anything is allocated.
#include <gtest/gtest.h>

#include <climits>
#include <cstdint>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "dist/cuda/fsdp_cuda.h"
#include "dist/shard_layout.h"
#include "io/token_file.h"
#include "model/cuda/minillm_cuda.h"
#include "ops/cuda/runtime.h"
#include "support/presets.h"
#include "support/temp_dir.h"
#include "train/cuda/trainer_cuda.h"
#include "train/memory_plan.h"

namespace pylon {
namespace {

int64_t free_bytes() {
  size_t free = 0, total = 0;
  PYLON_CUDA_CHECK(cudaMemGetInfo(&free, &total));
  return static_cast<int64_t>(free);
}

int64_t total_bytes() {
  size_t free = 0, total = 0;
  PYLON_CUDA_CHECK(cudaMemGetInfo(&free, &total));
  return static_cast<int64_t>(total);
}

// A small run on 20000 tokens written to tmp's data.bin; model and sizes set by the caller.
TrainOptions small_run(const testing::TempDir& tmp, const ModelConfig& model) {
  std::vector<uint32_t> ids(20000);
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<uint32_t>((i * 29 + i / 3) % 199);
  write_token_file(tmp.file("data.bin"), ids, TokenWidth::u16);
  TrainOptions o;
  o.device = "cuda";
  o.model = model;
  o.batch = 2, o.seq = 64, o.steps = 2;
  o.data = tmp.file("data.bin"), o.log_every = 0;
  return o;
}

ModelConfig model_of(const char* preset) {
  ModelConfig c;
  c.set_preset(find_preset(preset));
  c.vocab = 200, c.dim = 128, c.layers = 2, c.heads = 2;
  return c;
}

std::vector<ModelConfig> plan_models() {
  std::vector<ModelConfig> out = {model_of("seed"), model_of("causal")};
  for (const ModelConfig& c : testing::llama_variants(model_of("causal"))) out.push_back(c);
  return out;
}

// The plan's activations are the arena the model allocates, for both activation types, every
// recompute policy and batch shapes whose buffers do not end on 256-byte boundaries.
TEST(CudaMemoryPlan, ActivationsEqualTheModelsArena) {
  if (cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device";
  for (const ModelConfig& c : plan_models())
    for (Recompute r : {Recompute::none, Recompute::selective, Recompute::full})
      for (const auto& [B, T] : {std::pair{2, 64}, std::pair{3, 37}}) {
        SCOPED_TRACE(c.describe() + " recompute " + recompute_name(r) + " B " + std::to_string(B) + " T " +
                     std::to_string(T));
        TrainOptions o;
        o.device = "cuda", o.model = c, o.batch = B, o.seq = T, o.recompute = r;
        o.dtype = "bf16";
        EXPECT_EQ(cuda_step_memory(o, 1).part("activations"),
                  static_cast<int64_t>(cuda::MiniLLMCuda<cuda::bf16>(c, B, T, r).activation_bytes()));
        o.dtype = "fp32";
        EXPECT_EQ(cuda_step_memory(o, 1).part("activations"),
                  static_cast<int64_t>(cuda::MiniLLMCuda<float>(c, B, T, r).activation_bytes()));
      }
}

// The plan's FSDP parts are what FsdpCuda allocates at a world of one, by use, for the options
// that change its buffers.
TEST(CudaMemoryPlan, FsdpPartsEqualWhatFsdpCudaAllocates) {
  if (cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device";
  struct Case {
    const char* name;
    float clip;
    int accum;
    bool no_sync;
    const char* dtype;
  };
  for (const ModelConfig& c : plan_models())
    for (const Case k : {Case{"clipped", 1.f, 1, false, "bf16"}, Case{"per-unit AdamW", 0.f, 1, false, "bf16"},
                         Case{"no-sync", 1.f, 2, true, "bf16"}, Case{"fp32", 1.f, 2, false, "fp32"}}) {
      SCOPED_TRACE(c.describe() + " " + k.name);
      TrainOptions o;
      o.device = "cuda", o.model = c, o.batch = 2, o.seq = 64;
      o.grad_clip = k.clip, o.grad_accum = k.accum, o.no_sync = k.no_sync, o.dtype = k.dtype;
      const MemoryPlan plan = cuda_step_memory(o, 1);
      const ShardLayout layout(param_table(c), 1);
      cuda::Stream stream;
      const cuda::FsdpCuda fsdp(layout, stream.get(), nullptr, nullptr, cuda_fsdp_options(o));
      const cuda::DeviceMemory& m = fsdp.memory();
      EXPECT_EQ(plan.part("parameters") + plan.part("bf16 weights"), static_cast<int64_t>(m.weights));
      EXPECT_EQ(plan.part("AdamW state"), static_cast<int64_t>(m.optimizer));
      EXPECT_EQ(plan.part("gradients"), static_cast<int64_t>(m.gradients));
      EXPECT_EQ(plan.part("gathered weights"), static_cast<int64_t>(m.communication));
      EXPECT_EQ(plan.part("workspace"), static_cast<int64_t>(m.workspace + cuda::Gemm::kWorkspaceBytes));
    }
}

// A run allocates what its plan says: the metrics' allocated_bytes equal the plan's total (with
// validation buffers, accumulation, fp32, full recompute and the per-unit optimizer).
TEST(CudaMemoryPlan, RunsAllocateTheirPlan) {
  if (cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device";
  testing::TempDir tmp;
  struct Case {
    const char* name;
    const char* dtype;
    int accum;
    float clip;
    Recompute recompute;
    bool validate;
  };
  for (const Case k : {Case{"bf16", "bf16", 1, 1.f, Recompute::selective, false},
                       Case{"accumulated, validated", "bf16", 3, 1.f, Recompute::none, true},
                       Case{"per-unit AdamW, full recompute", "bf16", 1, 0.f, Recompute::full, false},
                       Case{"fp32", "fp32", 2, 1.f, Recompute::selective, true}}) {
    SCOPED_TRACE(k.name);
    TrainOptions o = small_run(tmp, model_of("causal"));
    o.dtype = k.dtype, o.grad_accum = k.accum, o.grad_clip = k.clip, o.recompute = k.recompute;
    if (k.validate) o.val_data = o.data, o.eval_every = 1, o.eval_steps = 3;
    o.metrics_path = tmp.file("m.jsonl");
    train(o);
    std::ifstream in(o.metrics_path);
    std::string line;
    ASSERT_TRUE(std::getline(in, line));
    EXPECT_EQ(nlohmann::json::parse(line)["allocated_bytes"].get<int64_t>(), cuda_step_memory(o, 1).total);
  }
}

// A --batch far too big is one line from the plan, naming its biggest parts, GPU 0's free memory
// and a hint. Its activations alone exceed the GPU, so had the model been built first, cudaMalloc
// would have failed instead; and the free memory is what it was (nothing allocated and kept).
// The same for the 2^31 - 1 layers that once were a parameter table built layer by layer.
TEST(CudaMemoryPlan, RunsThatCannotFitAreRefusedBeforeAllocating) {
  if (cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device";
  testing::TempDir tmp;
  TrainOptions o = small_run(tmp, model_of("seed"));
  o.model.vocab = 32000, o.model.dim = 1024, o.model.heads = 8;
  o.seq = 8192, o.batch = 1;
  while (cuda_step_memory(o, 1).part("activations") <= total_bytes()) o.batch *= 2;
  o.metrics_path = tmp.file("m.jsonl");
  const int64_t free_before = free_bytes();
  try {
    train(o);
    FAIL() << "trained --batch " << o.batch;
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_EQ(what.find("--device cuda: the model needs "), 0u) << what;
    EXPECT_NE(what.find(" (activations "), std::string::npos) << what;  // the biggest part first
    EXPECT_NE(what.find(" but GPU 0 has "), std::string::npos) << what;
    EXPECT_NE(what.find(" free; try --recompute full or a smaller --batch"), std::string::npos) << what;
    EXPECT_EQ(what.find('\n'), std::string::npos) << what;
  }
  // Allowance for the runtime's own bookkeeping; the plan's buffers are gigabytes.
  EXPECT_NEAR(static_cast<double>(free_bytes()), static_cast<double>(free_before), 64.0 * (1 << 20));
  EXPECT_FALSE(std::ifstream(o.metrics_path).good());

  o.batch = 2, o.seq = 64, o.model = model_of("seed");
  o.model.layers = INT_MAX;
  try {
    train(o);
    FAIL() << "trained 2^31 - 1 layers";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_EQ(what.find("--device cuda: the model needs "), 0u) << what;
    EXPECT_NE(what.find("; try more GPUs (--nproc-per-node), --one-gpu-reshard or a smaller model"), std::string::npos)
        << what;
  }
}

}  // namespace
}  // namespace pylon
