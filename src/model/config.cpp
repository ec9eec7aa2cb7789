#include "model/config.h"

#include <cmath>
#include <cstdint>
#include <cstdio>

#include "core/error.h"
#include "model/params.h"

namespace pylon {

ModelConfig ModelConfig::with_preset(std::string_view name) {
  ModelConfig c;
  c.set_preset(find_preset(name));
  return c;
}

void ModelConfig::set_preset(const Preset& p) {
  preset = p;
  qkv_bias = out_bias = p.attention_bias;
}

int64_t ModelConfig::num_params() const { return param_table(*this).total; }

void ModelConfig::validate() const {
  PYLON_CHECK(vocab > 0, "vocab must be positive, got ", vocab);
  PYLON_CHECK(dim > 0, "dim must be positive, got ", dim);
  PYLON_CHECK(layers > 0, "layers must be positive, got ", layers);
  PYLON_CHECK(heads > 0, "heads must be positive, got ", heads);
  PYLON_CHECK(kv_heads >= 0 && head_size >= 0 && ffn_dim >= 0, "kv heads, head size and ffn dim must not be negative");
  {  // the derived widths (ints: see config.h) computed without wrapping
    const int64_t hd = head_size ? head_size : dim / heads, kvh = kv_heads ? kv_heads : heads;
    const int64_t ffn = ffn_dim ? ffn_dim : 4 * int64_t{dim}, q = heads * hd, qkv = q + 2 * kvh * hd;
    PYLON_CHECK(ffn <= INT32_MAX && qkv <= INT32_MAX, "the model's widths exceed 32-bit sizes: MLP width ", ffn,
                ", attention inputs per token ", qkv, " (dim ", dim, ", heads ", heads, ")");
  }
  PYLON_CHECK(heads % kv_head_count() == 0, "heads ", heads, " is not a multiple of the kv heads ", kv_head_count());
  PYLON_CHECK(head_size || dim % heads == 0, "dim ", dim, " is not divisible by heads ", heads);
  PYLON_CHECK(preset.positions != Positions::rope || head_dim() % 2 == 0,
              "rotary embeddings need an even head size, got ", head_dim());
  PYLON_CHECK(norm_eps > 0 && std::isfinite(norm_eps), "norm eps must be positive, got ", norm_eps);
  PYLON_CHECK(rope_theta > 0 && std::isfinite(rope_theta), "rope theta must be positive, got ", rope_theta);
  const RopeScaling& rs = rope_scaling;
  PYLON_CHECK(!rs.on() || (rs.factor >= 1 && rs.low_freq_factor > 0 && rs.high_freq_factor > rs.low_freq_factor &&
                           rs.original_max_positions > 0),
              "rope scaling needs factor >= 1, 0 < low_freq_factor < high_freq_factor and original positions > 0; got ",
              "factor ", rs.factor, ", low_freq_factor ", rs.low_freq_factor, ", high_freq_factor ",
              rs.high_freq_factor, ", original positions ", rs.original_max_positions);
  PYLON_CHECK(!rs.on() || preset.positions == Positions::rope, "rope scaling needs rotary embeddings");
  if (preset.naming == Naming::torch)  // nn.MultiheadAttention's parameters
    PYLON_CHECK(kv_head_count() == heads && head_dim() == dim / heads && ffn_hidden() == 4 * dim && qkv_bias &&
                    out_bias && !tied_head && preset.ffn == Ffn::silu && !preset.final_norm,
                "the ", preset.name, " preset is PyTorch's nn.MultiheadAttention model: no grouped-query heads, ",
                "head size dim/heads, MLP width 4·dim, biases, no tied head (the llama preset has them)");
}

std::string ModelConfig::describe() const {
  std::string s = detail::concat(preset.name, " V=", vocab, " D=", dim, " L=", layers, " H=", heads);
  if (kv_head_count() != heads) s += detail::concat(" KV=", kv_head_count());
  if (head_dim() != dim / heads) s += detail::concat(" hd=", head_dim());
  if (ffn_hidden() != 4 * dim) s += detail::concat(" F=", ffn_hidden());
  if (rope_scaling.on()) s += detail::concat(" rope x", rope_scaling.factor);
  return s;
}

namespace {
std::string float_text(float v) {
  char text[32];
  std::snprintf(text, sizeof(text), "%.9g", static_cast<double>(v));
  return text;
}
}  // namespace

std::map<std::string, std::string> ModelConfig::to_metadata() const {
  std::map<std::string, std::string> meta{{"pylon.preset", preset.name},
          {"pylon.vocab", std::to_string(vocab)},
          {"pylon.dim", std::to_string(dim)},
          {"pylon.layers", std::to_string(layers)},
          {"pylon.heads", std::to_string(heads)},
          {"pylon.kv_heads", std::to_string(kv_head_count())},
          {"pylon.head_dim", std::to_string(head_dim())},
          {"pylon.ffn_dim", std::to_string(ffn_hidden())},
          {"pylon.qkv_bias", qkv_bias ? "1" : "0"},
          {"pylon.out_bias", out_bias ? "1" : "0"},
          {"pylon.tied_head", tied_head ? "1" : "0"},
          {"pylon.norm_eps", float_text(norm_eps)},
          {"pylon.rope_theta", float_text(rope_theta)}};
  if (rope_scaling.on()) {  // Llama 3's; files without these keys have none
    meta["pylon.rope_scaling_factor"] = float_text(rope_scaling.factor);
    meta["pylon.rope_scaling_low_freq_factor"] = float_text(rope_scaling.low_freq_factor);
    meta["pylon.rope_scaling_high_freq_factor"] = float_text(rope_scaling.high_freq_factor);
    meta["pylon.rope_scaling_original_max_positions"] = std::to_string(rope_scaling.original_max_positions);
  }
  return meta;
}

void ModelConfig::update_from_metadata(const std::map<std::string, std::string>& meta) {
  auto text = [&](const char* key) -> const std::string* {
    auto it = meta.find(key);
    return it == meta.end() ? nullptr : &it->second;
  };
  auto get_int = [&](const char* key, int& field) {
    const std::string* t = text(key);
    if (!t) return;
    try {
      size_t used = 0;
      field = std::stoi(*t, &used);
      PYLON_CHECK(used == t->size(), "");
    } catch (const std::exception&) {
      throw Error(std::string("model metadata ") + key + " is not an integer: '" + *t + "'");
    }
  };
  auto get_bool = [&](const char* key, bool& field) {
    const std::string* t = text(key);
    if (!t) return;
    PYLON_CHECK(*t == "0" || *t == "1", "model metadata ", key, " is not 0 or 1: '", *t, "'");
    field = *t == "1";
  };
  auto get_float = [&](const char* key, float& field) {
    const std::string* t = text(key);
    if (!t) return;
    try {
      size_t used = 0;
      field = std::stof(*t, &used);
      PYLON_CHECK(used == t->size(), "");
    } catch (const std::exception&) {
      throw Error(std::string("model metadata ") + key + " is not a number: '" + *t + "'");
    }
  };
  if (const std::string* p = text("pylon.preset")) set_preset(find_preset(*p));
  get_int("pylon.vocab", vocab);
  get_int("pylon.dim", dim);
  get_int("pylon.layers", layers);
  get_int("pylon.heads", heads);
  get_int("pylon.kv_heads", kv_heads);
  get_int("pylon.head_dim", head_size);
  get_int("pylon.ffn_dim", ffn_dim);
  get_bool("pylon.qkv_bias", qkv_bias);
  get_bool("pylon.out_bias", out_bias);
  get_bool("pylon.tied_head", tied_head);
  get_float("pylon.norm_eps", norm_eps);
  get_float("pylon.rope_theta", rope_theta);
  get_float("pylon.rope_scaling_factor", rope_scaling.factor);
  get_float("pylon.rope_scaling_low_freq_factor", rope_scaling.low_freq_factor);
  get_float("pylon.rope_scaling_high_freq_factor", rope_scaling.high_freq_factor);
  get_int("pylon.rope_scaling_original_max_positions", rope_scaling.original_max_positions);
}

}  // namespace pylon
