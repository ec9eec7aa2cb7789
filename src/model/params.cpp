#include "model/params.h"

#include <cmath>

#include "core/checked.h"
#include "core/error.h"
#include "core/rng.h"

namespace pylon {

const ParamInfo* ParamTable::find(const std::string& name) const {
  for (const auto& p : params)
    if (p.name == name) return &p;
  return nullptr;
}

ParamTable param_table(const ModelConfig& c) {
  ParamTable t;
  const int64_t V = c.vocab, D = c.dim, Q = c.q_dim(), KV = c.kv_dim(), F = c.ffn_hidden();
  const bool hf = c.preset.naming == Naming::hugging_face;
  // Adds a parameter stored as `pieces` (name, rows) in files; returns its table index.
  auto add = [&](std::string name, std::vector<int64_t> shape, int unit, Init init,
                 std::vector<ParamPiece> pieces = {}) {
    ParamInfo p;
    p.name = std::move(name);
    p.shape = std::move(shape);
    p.numel = 1;
    for (auto s : p.shape) p.numel = checked_mul(p.numel, s, "the model's parameter count");
    p.offset = t.total;
    p.unit = unit;
    p.init = init;
    p.pieces = pieces.empty() ? std::vector<ParamPiece>{{p.name, p.shape[0]}} : std::move(pieces);
    t.total = checked_add(t.total, p.numel, "the model's parameter count");
    t.params.push_back(std::move(p));
    return static_cast<int>(t.params.size() - 1);
  };
  const Init matrix = hf ? Init::normal_002 : Init::kaiming_linear;
  t.embed = add(hf ? "model.embed_tokens.weight" : "embed.weight", {V, D}, -1, hf ? Init::normal_002 : Init::normal);
  for (int i = 0; i < c.layers; ++i) {
    std::vector<int> slot(kBlockParams, -1);
    if (hf) {
      const std::string l = "model.layers." + std::to_string(i) + ".";
      const std::string a = l + "self_attn.";
      slot[kNorm1] = add(l + "input_layernorm.weight", {D}, i, Init::ones);
      slot[kQkv] = add(a + "qkv_proj.weight", {Q + 2 * KV, D}, i, matrix,
                       {{a + "q_proj.weight", Q}, {a + "k_proj.weight", KV}, {a + "v_proj.weight", KV}});
      if (c.qkv_bias)
        slot[kQkvBias] = add(a + "qkv_proj.bias", {Q + 2 * KV}, i, Init::zeros,
                             {{a + "q_proj.bias", Q}, {a + "k_proj.bias", KV}, {a + "v_proj.bias", KV}});
      slot[kOut] = add(a + "o_proj.weight", {D, Q}, i, matrix);
      if (c.out_bias) slot[kOutBias] = add(a + "o_proj.bias", {D}, i, Init::zeros);
      slot[kNorm2] = add(l + "post_attention_layernorm.weight", {D}, i, Init::ones);
      const std::string m = l + "mlp.";
      slot[kFfnIn] = add(m + "gate_up_proj.weight", {2 * F, D}, i, matrix,
                         {{m + "gate_proj.weight", F}, {m + "up_proj.weight", F}});
      slot[kFfnOut] = add(m + "down_proj.weight", {D, F}, i, matrix);
    } else {  // nn.MultiheadAttention's model (validate: no grouped heads, biases, F = 4D)
      const std::string l = "layers." + std::to_string(i) + ".";
      slot[kNorm1] = add(l + "norm1.weight", {D}, i, Init::ones);
      slot[kQkv] = add(l + "attn.in_proj_weight", {3 * D, D}, i, Init::xavier_uniform);
      slot[kQkvBias] = add(l + "attn.in_proj_bias", {3 * D}, i, Init::zeros);
      slot[kOut] = add(l + "attn.out_proj.weight", {D, D}, i, Init::kaiming_linear);
      slot[kOutBias] = add(l + "attn.out_proj.bias", {D}, i, Init::zeros);
      slot[kNorm2] = add(l + "norm2.weight", {D}, i, Init::ones);
      slot[kFfnIn] = add(l + "ffn.0.weight", {F, D}, i, Init::kaiming_linear);
      slot[kFfnOut] = add(l + "ffn.2.weight", {D, F}, i, Init::kaiming_linear);
    }
    t.blocks.push_back(std::move(slot));
  }
  if (c.preset.final_norm) t.final_norm = add(hf ? "model.norm.weight" : "norm.weight", {D}, -1, Init::ones);
  if (!c.tied_head) t.head = add(hf ? "lm_head.weight" : "head.weight", {V, D}, -1, matrix);
  return t;
}

void init_param_range(const ParamInfo& p, uint64_t seed, int64_t begin, int64_t end, float* out) {
  // Stream id: a hash of the name, so adding parameters never shifts the others' values.
  uint64_t stream = 1469598103934665603ull;
  for (unsigned char ch : p.name) stream = (stream ^ ch) * 1099511628211ull;
  const double fan_in = p.shape.size() > 1 ? static_cast<double>(p.shape[1]) : 1.0;
  const double fan_out = static_cast<double>(p.shape[0]);
  for (int64_t i = begin; i < end; ++i) {
    const auto idx = static_cast<uint64_t>(i);
    double v = 0.0;
    switch (p.init) {
      case Init::normal: v = random_normal(seed, stream, idx); break;
      case Init::normal_002: v = 0.02 * random_normal(seed, stream, idx); break;
      case Init::kaiming_linear:
        v = (2.0 * random_uniform(seed, stream, idx) - 1.0) / std::sqrt(fan_in);
        break;
      case Init::xavier_uniform:
        v = (2.0 * random_uniform(seed, stream, idx) - 1.0) * std::sqrt(6.0 / (fan_in + fan_out));
        break;
      case Init::zeros: v = 0.0; break;
      case Init::ones: v = 1.0; break;
    }
    out[i - begin] = static_cast<float>(v);
  }
}

void init_params(const ParamTable& t, uint64_t seed, float* flat) {
  for (const auto& p : t.params) init_param_range(p, seed, 0, p.numel, flat + p.offset);
}

}  // namespace pylon
