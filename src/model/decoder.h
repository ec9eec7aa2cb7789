// Incremental inference for generation. Causal preset: a KV cache, so each new token costs one
// row of work. Seed preset (bidirectional, no positions): every earlier position changes when a
// token is appended, so each step recomputes the whole sequence (no cache is valid).
#pragma once

#include <cstdint>
#include <vector>

#include "model/config.h"
#include "model/minillm.h"
#include "model/params.h"

namespace pylon {

class Decoder {
 public:
  // params: flat buffer (table order) that outlives the decoder; max_tokens bounds the context.
  Decoder(const ModelConfig& config, const float* params, int max_tokens);

  // Appends n tokens (prefill when n > 1) and returns the logits (V) after the last one.
  const float* feed(const int32_t* tokens, int n);
  int position() const { return pos_; }
  int max_tokens() const { return max_tokens_; }

 private:
  const float* feed_causal(const int32_t* tokens, int n);

  ModelConfig config_;
  ParamTable table_;
  const float* params_;
  int max_tokens_, pos_ = 0;
  std::vector<float> k_cache_, v_cache_;  // (L, max_tokens, D) each, k after RoPE
  std::vector<int32_t> history_;          // seed preset: all tokens so far
  MiniLLM full_;                          // seed preset: full recompute
  std::vector<float> logits_;             // (V)
};

}  // namespace pylon
