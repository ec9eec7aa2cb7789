#include "model/recipe.h"

#include "model/params.h"

namespace pylon {
namespace {

BlockWeights block_weights(int layer) {
  const Weight W = block_first_param(layer);
  return {W + kNorm1, W + kInProjW, W + kInProjB, W + kOutProjW, W + kOutProjB, W + kNorm2, W + kFfn1, W + kFfn2};
}

}  // namespace

InferenceSpec inference_spec(const ModelConfig& c, int max_tokens) {
  InferenceSpec s;
  s.vocab = c.vocab, s.dim = c.dim, s.heads = c.heads, s.layers = c.layers;
  s.max_tokens = max_tokens;
  s.norm_eps = c.norm_eps, s.rope_theta = c.rope_theta;
  s.kv_cache = c.preset.mask == Mask::causal;
  s.rotary = c.preset.positions == Positions::rope;
  s.embed = kEmbedParam;
  s.head = block_first_param(c.layers);  // the last parameter
  for (int l = 0; l < c.layers; ++l) s.blocks.push_back(block_weights(l));
  return s;
}

void forward_blocks(InferenceOps& ops, const ModelConfig& c, int n) {
  const bool causal = c.preset.mask == Mask::causal;  // keys from the KV cache
  const bool rope = c.preset.positions == Positions::rope;
  if (causal && n == 1 && ops.decode_blocks(n)) return;
  ops.embedding(n, kEmbedParam);
  for (int l = 0; l < c.layers; ++l) {
    const BlockWeights w = block_weights(l);
    // x = x + out_proj(attention(rope(in_proj(RMSNorm1(x)))))
    ops.attention_inputs(l, n, w.norm1, w.qkv, w.qkv_bias, rope, causal);
    ops.attention(l, n, causal);
    ops.linear(Act::x, Act::att, n, w.out, w.out_bias, {.accumulate = true});
    // x = x + W2 · SiLU(W1 · RMSNorm2(x))
    ops.norm_linear(Act::ffn, Act::x, n, w.norm2, w.ffn_up, kNoWeight, {.silu = true});
    ops.linear(Act::x, Act::ffn, n, w.ffn_down, kNoWeight, {.accumulate = true});
  }
}

}  // namespace pylon
