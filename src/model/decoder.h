// Incremental inference for generation and eval, on any backend of the inference op interface
// (ops/inference.h) running the one block recipe (model/recipe.h). A causal mask means a KV cache,
// so each new token costs one row of work; a bidirectional one (no cache is valid: every earlier
// position changes when a token is appended) recomputes the whole sequence for each step.
//
// On the CPU the weights are read through WeightViews, either from a flat fp32 buffer (checkpoints,
// safetensors) or in place from a mapped edge file in its stored precision (f16 / int8 / int4): the
// matrices and the embedding table are never copied (embedding rows are converted as they are
// looked up); only the 1-D tensors (norms, biases: 6·D per block) are decoded to fp32.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "model/config.h"
#include "model/edge_model.h"
#include "ops/inference.h"

namespace pylon {

class Decoder {
 public:
  // ops: a backend built for this config (its weights in table order, inference_spec(config,
  // max_tokens)).
  Decoder(const ModelConfig& config, std::unique_ptr<InferenceOps> ops, int max_tokens);
  // The CPU over a flat fp32 buffer (table order) that outlives the decoder.
  Decoder(const ModelConfig& config, const float* params, int max_tokens);
  // The CPU over an edge file that outlives the decoder; its tensors are read in place.
  Decoder(const EdgeModel& model, int max_tokens);
  ~Decoder();

  // Appends n tokens (prefill when n > 1) and returns the logits (V) after the last one.
  const float* feed(const int32_t* tokens, int n);
  // Logits (n, V) of a whole row from position 0, for eval; leaves the context empty.
  void score(const int32_t* tokens, int n, float* logits);
  // Builds what a prompt of `prompt_tokens` and then one-token steps use, without running them
  // (a backend that records its commands compiles its kernels here, so that later feeds time
  // their work alone); a no-op on the CPU. Optional: feed builds what is missing.
  void prepare(int prompt_tokens);
  void reset();  // empties the context (position 0)
  int position() const { return pos_; }
  int max_tokens() const { return max_tokens_; }
  const ModelConfig& config() const { return config_; }
  InferenceOps& ops() { return *ops_; }

 private:
  void check_tokens(const int32_t* tokens, int n) const;
  // The forward of n tokens at pos0.., then the head over rows [first, first + rows) into out.
  void forward(const int32_t* tokens, int n, int pos0, int first, int rows, float* out);
  bool cached() const { return config_.preset.mask == Mask::causal; }

  ModelConfig config_;
  InferenceSpec spec_;        // what the recipe reads of the model
  std::vector<float> small_;  // edge file: its 1-D tensors decoded to fp32 (before ops_, which views them)
  std::unique_ptr<InferenceOps> ops_;
  int max_tokens_ = 0, pos_ = 0;
  std::vector<int32_t> history_;  // bidirectional: all tokens so far
  std::vector<float> logits_;     // (V)
};

}  // namespace pylon
