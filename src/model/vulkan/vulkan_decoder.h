// Inference on a Vulkan device from an edge file: model/decoder.h's Decoder (the one block recipe)
// over the Vulkan inference ops (ops/vulkan/inference.h), whose weights stay in their file encoding
// (f16 / int8 / int4) on the device, activations fp32; plus the Vulkan backend's knobs and reports.
// No Vulkan header here: the CLI includes this in any build with PYLON_HAVE_VULKAN.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "model/config.h"
#include "model/decoder.h"
#include "model/edge_model.h"
#include "ops/vulkan/inference.h"

namespace pylon {

// Vulkan's knobs (ops/vulkan/inference.h).
using VulkanOptions = vk::InferenceOptions;

// The options of --device vulkan|vulkan:N (throws pylon::Error for another spelling), --no-coopmat
// (allow_coopmat false) and --weights-path.
VulkanOptions parse_vulkan_options(const std::string& device, bool allow_coopmat,
                                   const std::string& weights);

class VulkanDecoder {
 public:
  // Maps and validates the edge file (anything else, a checkpoint say, is refused with a line
  // saying so), opens the device, places the weights. Throws pylon::Error.
  VulkanDecoder(const std::string& edge_path, const VulkanOptions& options, int max_tokens);
  VulkanDecoder(const VulkanDecoder&) = delete;
  VulkanDecoder& operator=(const VulkanDecoder&) = delete;

  const ModelConfig& config() const;
  std::string tokenizer_model() const;  // the file's tokenizer bytes (Tokenizer::from_bytes), or ""
  // One line: device name and type, which GEMM, how a token is decoded, which weight path.
  std::string describe() const;

  // Appends n tokens (prefill when n > 1) and returns the logits (V) after the last one.
  const float* feed(const int32_t* tokens, int n);
  // Builds the pipelines that a prefill of `prompt_tokens` and then one-token decode steps use
  // (a cold driver compiles them for seconds), by recording those commands without running them,
  // so that the feeds after it time their work alone. Optional: feed builds what is missing.
  void prepare(int prompt_tokens) { decoder_.prepare(prompt_tokens); }
  int position() const;
  int max_tokens() const;
  void reset();  // empties the context (position 0)
  // Benchmarks: switch between the coopmat GEMM (where available) and the plain one; true when
  // the coopmat GEMM will be used for prefill.
  bool use_coopmat(bool on);
  // Benchmarks: with the coopmat GEMM on, its VK_NV_cooperative_matrix2 form (gemm_coopmat2) where
  // the device has it; true when a prefill of `tokens` takes it for the qkv GEMM.
  bool use_coopmat2(bool on, int tokens = 64);
  // Benchmarks: from how many tokens int8 / int4 weights take gemm_coopmat2, decoded to fp16 first
  // (vk::Ops::Coopmat2Dequant).
  void set_coopmat2_dequant_tokens(uint32_t tokens);
  // Benchmarks: gemm_coopmat2's tile and K splits (vk::Ops::set_coopmat2_tile; zeros: chosen).
  void set_coopmat2_tile(uint32_t tokens, uint32_t rows, uint32_t k, uint32_t splits = 0);
  // Benchmarks: device time of every later command added to *times (nullptr: stop timing).
  void time_dispatches(vk::GpuTimes* times);
  // Logits (n, V) of a whole row from position 0 (the cache is reset): for eval.
  void score(const int32_t* tokens, int n, float* logits) { decoder_.score(tokens, n, logits); }
  Decoder& decoder() { return decoder_; }
  vk::VulkanInference& backend() { return *ops_; }
  // Workgroups of the persistent decode kernel, 0 when decoding runs op by op.
  uint32_t persistent_grid() const;
  // Its dispatches a token (runs of blocks whose weights share buffers), 0 when op by op.
  uint32_t persistent_dispatches() const;
  // The position at which the persistent kernel gave up (a grid wait timed out; that token and
  // the rest then ran op by op), -1 if it never did. describe() says so too.
  int persistent_gave_up_at() const;
  // VulkanOptions::timeline: the last decoded token's clock marks.
  vk::LayerTimeline layer_timeline();

 private:
  EdgeModel edge_;            // the mapping outlives imported weights
  vk::VulkanInference* ops_;  // decoder_'s backend
  Decoder decoder_;
};

}  // namespace pylon
