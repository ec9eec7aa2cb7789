#include "model/params.h"

#include <cmath>

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
  const int64_t V = c.vocab, D = c.dim;
  auto add = [&](std::string name, std::vector<int64_t> shape, int unit, Init init) {
    ParamInfo p;
    p.name = std::move(name);
    p.shape = std::move(shape);
    p.numel = 1;
    for (auto s : p.shape) p.numel *= s;
    p.offset = t.total;
    p.unit = unit;
    p.init = init;
    t.total += p.numel;
    t.params.push_back(std::move(p));
  };
  add("embed.weight", {V, D}, -1, Init::normal);
  for (int i = 0; i < c.layers; ++i) {
    const std::string l = "layers." + std::to_string(i) + ".";
    add(l + "norm1.weight", {D}, i, Init::ones);
    add(l + "attn.in_proj_weight", {3 * D, D}, i, Init::xavier_uniform);
    add(l + "attn.in_proj_bias", {3 * D}, i, Init::zeros);
    add(l + "attn.out_proj.weight", {D, D}, i, Init::kaiming_linear);
    add(l + "attn.out_proj.bias", {D}, i, Init::zeros);
    add(l + "norm2.weight", {D}, i, Init::ones);
    add(l + "ffn.0.weight", {4 * D, D}, i, Init::kaiming_linear);
    add(l + "ffn.2.weight", {D, 4 * D}, i, Init::kaiming_linear);
    PYLON_ASSERT(t.params.size() == block_first_param(i) + kBlockParams, "block slots out of order");
  }
  add("head.weight", {V, D}, -1, Init::kaiming_linear);
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
