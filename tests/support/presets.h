// The models the tests loop over: the presets each path runs, and llama variants that cover the
// per-model options. Every path runs every preset: the nn.MultiheadAttention ones (seed, causal) and
// llama.
#pragma once

#include <vector>

#include "model/config.h"
#include "model/preset.h"

namespace pylon::testing {

inline std::vector<Preset> multi_head_presets() {
  std::vector<Preset> out;
  for (const Preset& p : presets())
    if (p.naming == Naming::torch) out.push_back(p);
  return out;
}

// Three llama models of `base`'s vocab, dim (a multiple of 4, at least 24) and layers: grouped-query
// heads (4 over 2) of dim/4 with an odd MLP width and no biases; multi-query heads of 10 (not
// dim/heads, not a multiple of 4) with q/k/v biases, the head tied to the embedding and Llama 3's
// rope scaling (an original context of 16: its frequencies in all three bands); multi-head (2 of
// dim/2) with q/k/v and o biases.
inline std::vector<ModelConfig> llama_variants(const ModelConfig& base) {
  struct Variant {
    int heads, kv_heads, head_dim, ffn;
    bool qkv_bias, out_bias, tied;
  };
  const int D = base.dim;
  std::vector<ModelConfig> out;
  for (const Variant& v : {Variant{4, 2, D / 4, D * 5 / 3 + 1, false, false, false},
                           Variant{4, 1, 10, D * 3 / 2, true, false, true},
                           Variant{2, 2, D / 2, 2 * D + 2, true, true, false}}) {
    ModelConfig c = base;
    c.set_preset(find_preset("llama"));
    c.vocab = base.vocab, c.dim = D, c.layers = base.layers;
    c.heads = v.heads, c.kv_heads = v.kv_heads, c.head_size = v.head_dim, c.ffn_dim = v.ffn;
    c.qkv_bias = v.qkv_bias, c.out_bias = v.out_bias, c.tied_head = v.tied, c.norm_eps = 1e-5f;
    if (v.tied) c.rope_scaling = {32.f, 1.f, 4.f, 16};
    out.push_back(c);
  }
  return out;
}

}  // namespace pylon::testing
