// pylon eval / generate --device vulkan: the contract command lines, eval loss within tolerance of
// the CPU, a model trained by pylon train generating the same greedy text on CPU and Vulkan, and
// one clear line with exit code 1 for no device, bad files and allocation failures.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <random>
#include <string>

#include <nlohmann/json.hpp>

#include "io/atomic_file.h"
#include "support/golden.h"
#include "support/hf_folder.h"
#include "support/run_command.h"
#include "support/temp_dir.h"
#include "support/vulkan_test_util.h"

namespace pylon {
namespace {

using testing::expect_clear_error;
using testing::run_pylon;

using testing::kGolden;

double last_json_loss(const testing::CommandResult& r) {
  return nlohmann::json::parse(testing::last_line(r.out))["loss"].get<double>();
}

TEST(VulkanCli, EvalMatchesCpuAtEveryPrecision) {
  if (!testing::vulkan_available()) GTEST_SKIP() << "no Vulkan device";
  testing::TempDir tmp;
  for (const std::string q : {"f16", "int8", "int4"}) {
    const std::string edge = tmp.file(q + ".edge");
    ASSERT_EQ(run_pylon("export --model " + kGolden + "/init.safetensors --preset seed --heads 4 --out " +
                        edge + " --quant " + q).exit_code, 0);
    const std::string args = "eval --model " + edge + " --data " + kGolden + "/tokens.bin --batch 2 --seq 16 --steps 3 --json";
    const auto cpu = run_pylon(args + " --device cpu");
    const auto gpu = run_pylon(args + " --device vulkan");
    ASSERT_EQ(cpu.exit_code, 0) << cpu.err;
    ASSERT_EQ(gpu.exit_code, 0) << gpu.err;
    EXPECT_NE(gpu.err.find("vulkan: "), std::string::npos) << gpu.err;  // says device and weight path
    const double a = last_json_loss(cpu), b = last_json_loss(gpu);
    EXPECT_NEAR(b, a, 1e-5 * a) << q;  // same dequantized weights; fp32 summation order only
    std::printf("[ vulkan ] eval %s: vulkan %.7f cpu %.7f\n", q.c_str(), b, a);
  }
}

TEST(VulkanCli, TrainedModelGeneratesTheSameTextOnCpuAndVulkan) {
#ifndef PYLON_HAVE_SENTENCEPIECE
  GTEST_SKIP() << "built without SentencePiece";
#endif
  if (!testing::vulkan_available()) GTEST_SKIP() << "no Vulkan device";
  testing::TempDir tmp;
  const char* words[] = {"red", "green", "blue", "sky", "sea", "under", "over", "the", "a", "is"};
  std::mt19937 rng(3);
  std::string text;
  for (int line = 0; line < 1500; ++line) {
    const size_t start = rng() % std::size(words);
    for (size_t w = 0; w < 8; ++w) text += std::string(w ? " " : "") + words[(start + 3 * w) % std::size(words)];
    text += "\n";
  }
  write_file_atomic(tmp.file("in.txt"), text);
  ASSERT_EQ(run_pylon("tokenize --input " + tmp.file("in.txt") + " --train-vocab 300 --out " + tmp.file("d.bin")).exit_code, 0);
  // MiniLLM's causal blocks, and llama's: grouped heads of 6 (q 24 wide on a width of 32; the KV
  // cache read by element), an MLP of 90 (rows that are not whole 16-byte words), the final norm.
  for (const std::string preset : {"causal", "llama"}) {
    const std::string model = "--preset " + preset + (preset == "llama" ? " --kv-heads 2 --head-dim 6 --ffn-dim 90" : "");
    const std::string ckpt = tmp.file("ckpt_" + preset);
    const auto train = run_pylon("train " + model + " --vocab 300 --dim 32 --layers 2 --heads 4 --batch 8 "
                                 "--seq 32 --steps 100 --lr 1e-2 --data " + tmp.file("d.bin") + " --tokenizer " +
                                 tmp.file("d.model") + " --eval-every 0 --save " + ckpt + " --device cpu --dtype fp32");
    ASSERT_EQ(train.exit_code, 0) << train.err;
    const std::string edge = ckpt + ".edge";
    ASSERT_EQ(run_pylon("export --model " + ckpt + " --out " + edge).exit_code, 0);  // f16
    const std::string gen = "generate --model " + edge + " --prompt 'the sky is' --max-new-tokens 24 --temperature 0";
    const auto a = run_pylon(gen + " --device cpu");
    const auto b = run_pylon(gen + " --device vulkan");
    // The persistent kernel, both blocks in one dispatch (uploaded weights: one buffer).
    const auto c = run_pylon(gen + " --device vulkan --vulkan-decode persistent --weights-path upload");
    ASSERT_EQ(a.exit_code, 0) << a.err;
    ASSERT_EQ(b.exit_code, 0) << b.err;
    ASSERT_EQ(c.exit_code, 0) << c.err;
    EXPECT_EQ(a.out, b.out) << model;
    EXPECT_EQ(a.out, c.out) << model;
    EXPECT_NE(c.err.find("decode in 1 persistent dispatch for 2 blocks"), std::string::npos) << c.err;
    EXPECT_NE(b.err.find("decode"), std::string::npos);
    EXPECT_NE(b.err.find("(vulkan)"), std::string::npos) << b.err;
    std::printf("[ vulkan ] %s: greedy on cpu and vulkan: %s%s", model.c_str(), a.out.c_str(), b.err.c_str());
  }
}

// A llama model from a Hugging Face folder (multi-query heads of 10, q/k/v biases, a tied head)
// evaluates on Vulkan as on the CPU at each precision (its decode: TrainedModelGeneratesTheSameTextOnCpuAndVulkan).
TEST(VulkanCli, LlamaFolderEvaluatesAsOnTheCpu) {
  if (!testing::vulkan_available()) GTEST_SKIP() << "no Vulkan device";
  testing::TempDir tmp;
  const std::string folder = testing::hf_folder_from_golden("llama_mqa_tied", tmp.file("hf"));
  const std::string data = std::string(PYLON_GOLDEN_DIR) + "/llama_mqa_tied/tokens.bin";
  for (const std::string q : {"f16", "int8", "int4"}) {
    const std::string edge = tmp.file(q + ".edge");
    ASSERT_EQ(run_pylon("export --model " + folder + " --out " + edge + " --quant " + q).exit_code, 0);
    const std::string args = "eval --model " + edge + " --data " + data + " --batch 2 --seq 16 --steps 3 --json";
    const auto cpu = run_pylon(args + " --device cpu");
    const auto gpu = run_pylon(args + " --device vulkan");
    ASSERT_EQ(cpu.exit_code, 0) << cpu.err;
    ASSERT_EQ(gpu.exit_code, 0) << gpu.err;
    const double a = last_json_loss(cpu), b = last_json_loss(gpu);
    EXPECT_NEAR(b, a, 1e-5 * a) << q;
    std::printf("[ vulkan ] llama eval %s: vulkan %.7f cpu %.7f\n", q.c_str(), b, a);
  }
}

TEST(VulkanCli, NoDeviceBadFilesAndAllocationFailuresGiveOneLine) {
  testing::TempDir tmp;
  const std::string edge = tmp.file("m.edge");
  ASSERT_EQ(run_pylon("export --model " + kGolden + "/init.safetensors --preset seed --heads 4 --out " + edge).exit_code, 0);
  const std::string eval = "eval --data " + kGolden + "/tokens.bin --batch 1 --seq 8 --steps 1 --model ";
  expect_clear_error(run_pylon(eval + edge + " --device vulkan:abc"), "vulkan:abc");
  expect_clear_error(run_pylon(eval + kGolden + "/init.safetensors --device vulkan"), "edge file");

  // No usable driver: the loader finds no ICD (the variables are restored for the later tests).
  const auto none = [&] {
    const char* names[] = {"VK_DRIVER_FILES", "VK_ICD_FILENAMES"};
    std::string saved[2];
    bool had[2];
    for (int i = 0; i < 2; ++i) {
      const char* v = std::getenv(names[i]);
      had[i] = v != nullptr;
      if (v) saved[i] = v;
      setenv(names[i], "/nonexistent/icd.json", 1);
    }
    const auto r = run_pylon(eval + edge + " --device vulkan");
    for (int i = 0; i < 2; ++i) {
      if (had[i]) setenv(names[i], saved[i].c_str(), 1);
      else unsetenv(names[i]);
    }
    return r;
  }();
  expect_clear_error(none, "Vulkan");

  if (!testing::vulkan_available()) GTEST_SKIP() << "no Vulkan device";
  expect_clear_error(run_pylon(eval + edge + " --device vulkan:99"), "does not exist");
  const std::string bytes = read_text_file(edge);
  for (size_t n : {size_t{30}, bytes.size() / 2}) {
    write_file_atomic(tmp.file("cut.edge"), bytes.substr(0, n));
    expect_clear_error(run_pylon(eval + tmp.file("cut.edge") + " --device vulkan"), "cut.edge");
    expect_clear_error(run_pylon("generate --prompt hi --device vulkan --model " + tmp.file("cut.edge")), "cut.edge");
  }
  const auto oom = run_pylon(eval + edge + " --device vulkan --weights-path upload", "PYLON_TEST_VK_FAIL_ALLOC=4");
  expect_clear_error(oom, "VK_ERROR_OUT_OF_DEVICE_MEMORY");
}

}  // namespace
}  // namespace pylon
