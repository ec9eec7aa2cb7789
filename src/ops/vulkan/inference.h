// The inference ops on a Vulkan device (ops/inference.h), recorded into one command buffer per
// forward and run at finish(): weights stay in their edge-file encoding (f16 / int8 / int4) on the
// device, activations are fp32. One token on a GPU: each RMSNorm fused into the GEMV after it, RoPE
// and the KV append into the qkv GEMV's store; attention splits the keys over workgroups; on GPUs
// where it runs, a causal token's embedding and blocks are a persistent kernel's dispatches
// (Ops::decode_layers) and the head its GEMV. A one-token causal forward is recorded once and
// replayed (its token and position are read from buffers, so the commands never change).
// No Vulkan header here: the model's Vulkan decoder includes this in any build with Vulkan.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "io/edge_format.h"
#include "ops/inference.h"
#include "ops/vulkan/gpu_times.h"

namespace pylon::vk {

struct InferenceOptions {
  int device_index = -1;          // -1 = the first GPU, else the first device
  bool allow_coopmat = true;      // false: the plain kernels (tiled GEMM, fp32 attention) even where coopmat runs
  uint64_t max_buffer_bytes = 0;  // test hook: a smaller storage-binding cap (0 = the device's)
  std::string weights = "auto";   // auto | import | upload
  // Test hook: the one-token GEMV, "auto" (the device type's), "subgroup" (the GPU decode path:
  // fused RMSNorm, RoPE and KV append) or "rows" (the CPU devices' path).
  std::string gemv = "auto";
  // A causal token's blocks: "auto" (the persistent kernel, decode_layer: all blocks in one
  // dispatch where the weights are in one buffer, else a dispatch per block, on GPUs that report
  // their SM count, where it runs; else op by op), "persistent" (that on any device, an error where
  // it cannot run) or "ops". persistent_grid / persistent_threads: its workgroups and their size
  // (0: the first of Ops::persistent_grid's candidates that the device runs at once).
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
  // Benchmarks: the decode head through Ops::matmul's GEMV even where the persistent kernel's
  // GEMV would serve.
  bool matmul_head = false;
  // Benchmarks: the persistent kernel's tuning (Ops::DecodeTuning; zeros: the measured choices):
  // 16-byte words in flight per lane in the blocks and the head, the head's rows per subgroup and
  // workgroups per SM.
  uint32_t layer_loads = 0, head_loads = 0, head_rows = 0, head_groups = 0;
  // Benchmarks: print each pipeline's compiler statistics (ContextOptions::pipeline_stats).
  bool pipeline_stats = false;
  // Test hook: the N-th device allocation fails (0: none).
  long fail_allocation = 0;
};

class VulkanInference final : public InferenceOps {
 public:
  // Opens the device and places the weights: `names` are the file's tensors in the order the
  // spec's Weights index (the file's mapping outlives this). Throws pylon::Error.
  VulkanInference(const InferenceSpec& spec, const EdgeFile& file, const std::vector<std::string>& names,
                  const InferenceOptions& options);
  ~VulkanInference() override;

  bool begin(const int32_t* tokens, int n, int pos0, bool dry) override;
  bool finish(int first, int rows, float* out) override;
  void embedding(int n, Weight table) override;
  void rmsnorm(Act y, Act x, int n, Weight norm) override;
  void linear(Act y, Act x, int n, Weight w, Weight bias, Epilogue e) override;
  void rope(int n) override;
  void kv_append(int layer, int n) override;
  void attention(int layer, int n, bool causal) override;

  // One line: device name and type, which GEMM, how a token is decoded, which weight path, the
  // pipeline cache.
  std::string describe() const;
  // Benchmarks: the coopmat GEMM (where available) or the plain one; true when prefill takes it.
  bool use_coopmat(bool on);
  // Benchmarks: with the coopmat GEMM on, its VK_NV_cooperative_matrix2 form (gemm_coopmat2) where
  // the device has it; true when a prefill of `tokens` takes it.
  bool use_coopmat2(bool on, int tokens);
  // Benchmarks: from how many tokens int8 / int4 weights take gemm_coopmat2, decoded to fp16 first.
  void set_coopmat2_dequant_tokens(uint32_t tokens);
  // Benchmarks: gemm_coopmat2's tile and K splits (zeros: chosen).
  void set_coopmat2_tile(uint32_t tokens, uint32_t rows, uint32_t k, uint32_t splits);
  // Benchmarks: device time of every later command added to *times (nullptr: stop timing).
  void time_dispatches(GpuTimes* times);
  uint32_t persistent_grid() const;        // workgroups of the persistent kernel, 0 when op by op
  uint32_t persistent_dispatches() const;  // its dispatches a token, 0 when op by op
  // The position at which the persistent kernel gave up (a grid wait timed out; that token and the
  // rest then ran op by op), -1 if it never did.
  int persistent_gave_up_at() const;
  LayerTimeline layer_timeline();  // InferenceOptions::timeline: the last token's clock marks
  // Test hook: every grid barrier of the persistent kernel gives up (the op-by-op fallback runs).
  void set_fail_barriers(bool on);

 protected:
  bool try_norm_linear(Act y, Act x, int n, Weight norm, Weight w, Weight bias, Epilogue e) override;
  bool try_attention_inputs(int layer, int n, Weight norm, Weight w, Weight bias, bool rotate, bool append) override;
  bool try_decode_blocks(int n) override;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace pylon::vk
