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

void check_decodable(const ModelConfig& c) {
  PYLON_CHECK(c.preset.naming == Naming::torch, "the decoders (generate, eval of edge files, export) run the ",
              "seed and causal presets so far; the ", c.preset.name, " preset trains and evaluates on the CPU");
}

InferenceSpec inference_spec(const ModelConfig& c, int max_tokens) {
  check_decodable(c);
  const ParamTable t = param_table(c);
  InferenceSpec s;
  s.vocab = c.vocab, s.dim = c.dim, s.heads = c.heads, s.layers = c.layers;
  s.max_tokens = max_tokens;
  s.norm_eps = c.norm_eps, s.rope_theta = c.rope_theta;
  s.kv_cache = c.preset.mask == Mask::causal;
  s.rotary = c.preset.positions == Positions::rope;
  s.embed = static_cast<Weight>(t.embed);
  s.head = static_cast<Weight>(t.head_or_embed());
  for (int l = 0; l < c.layers; ++l) s.blocks.push_back(block_weights(t, l));
  return s;
}

void forward_blocks(InferenceOps& ops, const ModelConfig& c, int n) {
  const bool causal = c.preset.mask == Mask::causal;  // keys from the KV cache
  const bool rope = c.preset.positions == Positions::rope;
  if (causal && n == 1 && ops.decode_blocks(n)) return;
  const ParamTable t = param_table(c);
  ops.embedding(n, static_cast<Weight>(t.embed));
  for (int l = 0; l < c.layers; ++l) {
    const BlockWeights w = block_weights(t, l);
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
