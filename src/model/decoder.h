// Incremental inference on the CPU, for generation and eval. Causal preset: a KV cache, so each
// new token costs one row of work. Seed preset (bidirectional, no positions): every earlier position
// changes when a token is appended, so each step recomputes the whole sequence (no cache is valid).
// The weights are read through WeightViews, either from a flat fp32 buffer (checkpoints,
// safetensors) or in place from a mapped edge file in its stored precision (f16 / int8 / int4):
// the matrices and the embedding table are never copied (embedding rows are converted as they are
// looked up); only the 1-D tensors (norms, biases: 6·D per block) are decoded to fp32.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "model/edge_model.h"
#include "model/config.h"
#include "model/params.h"
#include "model/weight_view.h"

namespace pylon {

class Decoder {
 public:
  // params: flat buffer (table order) that outlives the decoder; max_tokens bounds the context.
  Decoder(const ModelConfig& config, const float* params, int max_tokens);
  // model: an edge file that outlives the decoder; its tensors are read in place.
  Decoder(const EdgeModel& model, int max_tokens);

  // Appends n tokens (prefill when n > 1) and returns the logits (V) after the last one.
  const float* feed(const int32_t* tokens, int n);
  // Logits (n, V) of a whole row from position 0, for eval; leaves the context empty.
  void score(const int32_t* tokens, int n, float* logits);
  void reset();  // empties the context (position 0)
  int position() const { return pos_; }
  int max_tokens() const { return max_tokens_; }
  const ModelConfig& config() const { return config_; }

 private:
  void init(int max_tokens);
  void check_tokens(const int32_t* tokens, int n) const;
  const float* vec(size_t param) const { return static_cast<const float*>(w_[param].values); }
  void embed(const int32_t* tokens, int n, float* x) const;  // x (n, D)
  // The blocks over x (n, D) in place, the tokens at positions pos0..: causal appends their keys
  // and values to the cache and attends to everything before; seed attends over all n.
  void blocks(float* x, int n, int pos0);

  ModelConfig config_;
  ParamTable table_;
  std::vector<WeightView> w_;  // one per parameter, table order; 1-D ones are f32
  std::vector<float> small_;   // edge file: its 1-D tensors decoded to fp32
  int max_tokens_ = 0, pos_ = 0;
  // (L, max_tokens, D) each, k after RoPE; left uninitialised, so pages are touched only as
  // positions fill.
  std::unique_ptr<float[]> k_cache_, v_cache_;
  std::vector<int32_t> history_;  // seed preset: all tokens so far
  std::vector<float> logits_;     // (V)
};

}  // namespace pylon
