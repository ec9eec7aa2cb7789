#include "model/recipe.h"

#include "core/error.h"
#include "model/params.h"

namespace pylon {
namespace {

BlockWeights block_weights(const ParamTable& t, int layer) {
  const std::vector<int>& s = t.blocks[static_cast<size_t>(layer)];
  const auto w = [&](BlockParam p) { return s[p] >= 0 ? static_cast<Weight>(s[p]) : kNoWeight; };
  return {w(kNorm1), w(kQkv), w(kQkvBias), w(kOut), w(kOutBias), w(kNorm2), w(kFfnIn), w(kFfnOut)};
}

}  // namespace

InferenceSpec inference_spec(const ModelConfig& c, int max_tokens) {
  const ParamTable t = param_table(c);
  InferenceSpec s;
  s.vocab = c.vocab, s.dim = c.dim, s.heads = c.heads, s.layers = c.layers;
  s.kv_heads = c.kv_head_count(), s.head_size = c.head_dim(), s.ffn_dim = c.ffn_hidden();
  s.max_tokens = max_tokens;
  s.norm_eps = c.norm_eps, s.rope_theta = c.rope_theta, s.rope_scaling = c.rope_scaling;
  s.kv_cache = c.preset.mask == Mask::causal;
  s.rotary = c.preset.positions == Positions::rope;
  s.swiglu = c.preset.ffn == Ffn::swiglu;
  s.embed = static_cast<Weight>(t.embed);
  s.head = static_cast<Weight>(t.head_or_embed());
  if (t.final_norm >= 0) s.final_norm = static_cast<Weight>(t.final_norm);
  for (int l = 0; l < c.layers; ++l) s.blocks.push_back(block_weights(t, l));
  return s;
}

void forward_blocks(InferenceOps& ops, const InferenceSpec& s, int n) {
  const bool causal = s.kv_cache;  // keys from the KV cache
  if (causal && n == 1 && ops.decode_blocks(n)) return;
  ops.embedding(n, s.embed);
  for (const BlockWeights& w : s.blocks) {
    const int l = static_cast<int>(&w - s.blocks.data());
    // x = x + out(attention(rope(qkv(RMSNorm1(x)))))
    ops.attention_inputs(l, n, w.norm1, w.qkv, w.qkv_bias, s.rotary, causal);
    ops.attention(l, n, causal);
    ops.linear(Act::x, Act::att, n, w.out, w.out_bias, {.accumulate = true});
    // x = x + W_down · act(W_up · RMSNorm2(x)), act SiLU or SwiGLU
    ops.norm_linear(Act::ffn, Act::x, n, w.norm2, w.ffn_up, kNoWeight, {.silu = !s.swiglu, .swiglu = s.swiglu});
    ops.linear(Act::x, Act::ffn, n, w.ffn_down, kNoWeight, {.accumulate = true});
  }
  if (s.final_norm != kNoWeight) ops.rmsnorm(Act::h, Act::x, n, s.final_norm);  // the head's input
}

}  // namespace pylon
