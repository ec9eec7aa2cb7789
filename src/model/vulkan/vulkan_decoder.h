// MiniLLM inference on a Vulkan device from an edge file: the weights stay in their file encoding
// (f16 / int8 / int4) on the device, activations are fp32. The same contract as model/decoder.h
// (causal: KV cache; seed: whole-sequence recompute), plus whole-row scoring for eval.
// No Vulkan header here: the CLI includes this in any build with PYLON_HAVE_VULKAN.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "model/config.h"
#include "ops/vulkan/gpu_times.h"

namespace pylon {

struct VulkanOptions {
  int device_index = -1;           // --device vulkan:N; -1 = the first GPU, else the first device
  bool allow_coopmat = true;       // false: the plain kernels (tiled GEMM, fp32 attention) even where coopmat runs
  uint64_t max_buffer_bytes = 0;   // test hook: a smaller storage-binding cap (0 = the device's)
  std::string weights = "auto";    // auto | import | upload
  // Test hook: the one-token GEMV, "auto" (the device type's), "subgroup" (the GPU decode path:
  // fused RMSNorm, RoPE and KV append) or "rows" (the CPU devices' path).
  std::string gemv = "auto";
  // A causal token's blocks: "auto" (the persistent kernel, decode_layer: all blocks in one
  // dispatch where the weights are in one buffer, else a dispatch per block, on GPUs
  // that report their SM count, where it runs; else op by op), "persistent" (that on any device,
  // an error where it cannot run) or "ops". persistent_grid / persistent_threads: its
  // workgroups and their size (0: the first of Ops::persistent_grid's candidates that the device
  // runs at once).
  std::string decode = "auto";
  uint32_t persistent_grid = 0, persistent_threads = 0;
  // Blocks per persistent dispatch at most (0: every run of blocks whose weights share buffers,
  // all of them with the one-buffer upload; 1: a dispatch per block, as with a buffer per tensor).
  uint32_t persistent_blocks = 0;
  // Test hook: the subgroup GEMVs' shape (Ops::set_gemv_shape): rows per subgroup, subgroups per
  // row set (a power of two for the persistent kernel). 0: chosen per matrix.
  uint32_t gemv_rows = 0, gemv_split = 0;
  // Test hook: the persistent kernel's keys per attention item (a multiple of 32); 0: chosen.
  uint32_t attention_chunk = 0;
  bool allow_float_atomics = true;  // test hook: false, a device without them (no persistent kernel)
  bool allow_int64_atomics = true;  // test hook: the same for 64-bit buffer atomics
  // Benchmarks: the persistent kernel's variant that marks its clock at points of every block
  // (layer_timeline()); needs the persistent kernel and a shader clock, else an error.
  bool timeline = false;
};

// The options of --device vulkan|vulkan:N (throws pylon::Error for another spelling), --no-coopmat
// (allow_coopmat false) and --weights-path.
VulkanOptions parse_vulkan_options(const std::string& device, bool allow_coopmat,
                                   const std::string& weights);

class VulkanDecoder {
 public:
  // Maps and validates the edge file (anything else, a checkpoint say, is refused with a line
  // saying so), opens the device, places the weights. Throws pylon::Error.
  VulkanDecoder(const std::string& edge_path, const VulkanOptions& options, int max_tokens);
  ~VulkanDecoder();
  VulkanDecoder(const VulkanDecoder&) = delete;
  VulkanDecoder& operator=(const VulkanDecoder&) = delete;

  const ModelConfig& config() const;
  std::string tokenizer_model() const;  // the file's SentencePiece bytes, or ""
  // One line: device name and type, which GEMM, how a token is decoded, which weight path.
  std::string describe() const;

  // Appends n tokens (prefill when n > 1) and returns the logits (V) after the last one.
  const float* feed(const int32_t* tokens, int n);
  // Builds the pipelines that a prefill of `prompt_tokens` and then one-token decode steps use
  // (a cold driver compiles them for seconds), by recording those commands without running them,
  // so that the feeds after it time their work alone. Optional: feed builds what is missing.
  void prepare(int prompt_tokens);
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
  void score(const int32_t* tokens, int n, float* logits);
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
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace pylon
