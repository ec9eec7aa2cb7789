// The parameter table: every parameter of the model with its name, shape, place in one flat fp32
// buffer, owning FSDP unit and initialisation, and the named slots every path reads it by. Order:
// the embedding, each block's parameters, the final norm (where the preset has one), the head
// (unless tied to the embedding). A parameter can be stored in files as several tensors (pieces):
// a Llama block's [W_q; W_k; W_v] is one parameter here, three tensors in Hugging Face's files.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "model/config.h"

namespace pylon {

enum class Init {
  normal,          // N(0, 1): nn.Embedding
  normal_002,      // N(0, 0.02²): Hugging Face's initializer_range for Llama's matrices
  kaiming_linear,  // U(-1/sqrt(fan_in), 1/sqrt(fan_in)): nn.Linear's default
  xavier_uniform,  // U(-a, a), a = sqrt(6 / (fan_in + fan_out)): MHA in_proj_weight
  zeros,
  ones,
};

// A row range of a parameter stored as its own tensor in files.
struct ParamPiece {
  std::string name;
  int64_t rows = 0;  // of the parameter's dim 0, consecutive from the previous piece's end
};

struct ParamInfo {
  std::string name;             // the parameter's own name: checkpoint shards, edge files
  std::vector<int64_t> shape;   // (out, in) for weights
  int64_t offset = 0;           // into the flat buffer, in elements
  int64_t numel = 0;
  int unit = -1;                // -1: root unit (embedding, final norm, head); i: block i
  Init init = Init::zeros;
  std::vector<ParamPiece> pieces;  // its tensors in safetensors files (one: its own name)
};

// A block's parameters, the slots every path reads them by (`W[kQkv]`, W = block_params(...)), with
// their shapes (Q = heads·head_dim, KV = kv_heads·head_dim, F = the MLP's hidden width):
//   kNorm1 (D), kQkv (Q + 2KV, D) = [W_q; W_k; W_v], kQkvBias (Q + 2KV), kOut (D, Q), kOutBias (D),
//   kNorm2 (D), kFfnIn (F, D), or (2F, D) = [gate; up] for SwiGLU, kFfnOut (D, F).
// The bias slots are empty where the model has none.
enum BlockParam { kNorm1, kQkv, kQkvBias, kOut, kOutBias, kNorm2, kFfnIn, kFfnOut, kBlockParams };

struct ParamTable {
  std::vector<ParamInfo> params;
  int64_t total = 0;
  std::vector<std::vector<int>> blocks;  // (layers, kBlockParams): table index per slot, -1 empty
  int embed = 0, final_norm = -1, head = -1;  // table indices; final_norm -1: none; head -1: tied
  int head_or_embed() const { return head >= 0 ? head : embed; }  // the head's weight
  const ParamInfo* find(const std::string& name) const;
};

// Block `layer`'s parameters by slot from per-parameter pointers P (table order); nullptr where
// the slot is empty.
template <typename T>
std::array<T*, kBlockParams> block_params(const ParamTable& t, const std::vector<T*>& P, int layer) {
  std::array<T*, kBlockParams> out{};
  for (size_t s = 0; s < kBlockParams; ++s)
    if (const int i = t.blocks[static_cast<size_t>(layer)][s]; i >= 0) out[s] = P[static_cast<size_t>(i)];
  return out;
}

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
