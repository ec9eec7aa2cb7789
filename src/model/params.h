// The parameter table: every MiniLLM parameter with its PyTorch state_dict name, shape, place in
// one flat fp32 buffer, owning FSDP unit and initialisation. Order: embed, layers.0 .. L-1, head.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "model/config.h"

namespace pylon {

enum class Init {
  normal,          // N(0, 1): nn.Embedding
  kaiming_linear,  // U(-1/sqrt(fan_in), 1/sqrt(fan_in)): nn.Linear's default
  xavier_uniform,  // U(-a, a), a = sqrt(6 / (fan_in + fan_out)): MHA in_proj_weight
  zeros,
  ones,
};

struct ParamInfo {
  std::string name;
  std::vector<int64_t> shape;  // PyTorch shape: (out, in) for weights
  int64_t offset = 0;          // into the flat buffer, in elements
  int64_t numel = 0;
  int unit = -1;               // -1: root unit (embed, head); i: layers.i
  Init init = Init::zeros;
};

struct ParamTable {
  std::vector<ParamInfo> params;
  int64_t total = 0;
  const ParamInfo* find(const std::string& name) const;
};

// A block's parameters in table order, the slots every path reads them by (`W[kInProjW]` with
// W = params + block_first_param(l)), with their shapes:
//   kNorm1 (D), kInProjW (3D, D) = [W_q; W_k; W_v], kInProjB (3D), kOutProjW (D, D), kOutProjB (D),
//   kNorm2 (D), kFfn1 (4D, D), kFfn2 (D, 4D).
enum BlockParam { kNorm1, kInProjW, kInProjB, kOutProjW, kOutProjB, kNorm2, kFfn1, kFfn2, kBlockParams };
constexpr size_t kEmbedParam = 0;  // (V, D); the head (V, D) is the table's last parameter
inline size_t block_first_param(int layer) { return 1 + static_cast<size_t>(layer) * kBlockParams; }

// Per-parameter pointers into a flat buffer, in table order: the form in which models read
// weights and write gradients, so that they need not lie in one buffer (FSDP's units).
template <typename T>
std::vector<T*> param_pointers(const ParamTable& t, T* flat) {
  std::vector<T*> out;
  out.reserve(t.params.size());
  for (const auto& p : t.params) out.push_back(flat + p.offset);
  return out;
}

ParamTable param_table(const ModelConfig& c);

// Fills elements [begin, end) of parameter p (flat index inside p) deterministically from seed.
void init_param_range(const ParamInfo& p, uint64_t seed, int64_t begin, int64_t end, float* out);
// Fills the whole flat buffer (size t.total).
void init_params(const ParamTable& t, uint64_t seed, float* flat);

}  // namespace pylon
