#include "model/weights.h"

#include <algorithm>
#include <set>

#include "core/error.h"
#include "model/hf_config.h"

namespace pylon {

std::vector<int64_t> piece_shape(const ParamInfo& p, const ParamPiece& piece) {
  if (p.shape.size() == 1) return {piece.rows};
  return {piece.rows, p.numel / p.shape[0]};
}

void read_param_range(const SafetensorsReader& file, const ParamInfo& p, int64_t begin, int64_t end, float* out) {
  const int64_t cols = p.numel / p.shape[0];
  int64_t first = 0;  // the piece's first element in p
  for (const ParamPiece& piece : p.pieces) {
    const int64_t count = piece.rows * cols;
    const int64_t b = std::max(begin, first), e = std::min(end, first + count);
    if (b < e || begin == end)
      file.read_f32_range(piece.name, piece_shape(p, piece), b < e ? b - first : 0, b < e ? e - first : 0,
                          b < e ? out + (b - begin) : nullptr);
    first += count;
  }
  PYLON_ASSERT(first == p.numel, p.name, ": pieces of ", first, " elements for ", p.numel);
}

void check_no_unexpected_tensors(const SafetensorsReader& file, const ParamTable& table) {
  std::set<std::string> expected;
  for (const auto& p : table.params)
    for (const auto& piece : p.pieces) expected.insert(piece.name);
  for (const auto& t : file.tensors())
    PYLON_CHECK(expected.count(t.name), file.path(), ": unexpected tensor ", t.name, " (not a parameter of this model)");
}

void load_weights(const SafetensorsReader& file, const ParamTable& table, float* flat) {
  for (const auto& p : table.params) read_param_range(file, p, 0, p.numel, flat + p.offset);
  check_no_unexpected_tensors(file, table);
}

std::vector<TensorToWrite> weight_tensors(const ParamTable& table, const float* flat, const std::string& prefix) {
  std::vector<TensorToWrite> out;
  for (const auto& p : table.params) {
    const float* at = flat + p.offset;
    for (const auto& piece : p.pieces) {
      const std::vector<int64_t> shape = piece_shape(p, piece);
      out.push_back({prefix + piece.name, DType::f32, shape, at});
      at += piece.rows * (p.numel / p.shape[0]);
    }
  }
  return out;
}

ModelConfig config_from_weights(const SafetensorsReader& file, const ModelConfig& fallback, bool preset_given,
                                bool heads_given) {
  const auto& meta = file.metadata();
  // Pylon writes pylon.preset with every other pylon.* key: without it the metadata is corrupted,
  // and reading the file as a PyTorch state dict would silently take --preset's default.
  const auto pylon_key = std::find_if(meta.begin(), meta.end(), [](const auto& kv) { return kv.first.rfind("pylon.", 0) == 0; });
  PYLON_CHECK(meta.count("pylon.preset") || pylon_key == meta.end(), file.path(), ": has Pylon metadata (",
              pylon_key->first, ") but no pylon.preset key: corrupted metadata, refusing to guess the model");
  if (meta.count("pylon.preset")) {  // written by Pylon: the whole configuration is there
    ModelConfig c = fallback;
    try {
      c.update_from_metadata(meta);
    } catch (const Error& e) {
      throw Error(file.path() + ": " + e.what());
    }
    PYLON_CHECK(!preset_given || c.preset == fallback.preset, file.path(), ": was trained as preset ", c.preset.name,
                ", but --preset ", fallback.preset.name, " was given");
    PYLON_CHECK(!heads_given || !meta.count("pylon.heads") || c.heads == fallback.heads, file.path(), ": has ",
                c.heads, " heads, but --heads ", fallback.heads, " was given");
    if (!meta.count("pylon.heads")) c.heads = fallback.heads;
    try {
      c.validate();
    } catch (const Error& e) {
      throw Error(file.path() + ": " + e.what());
    }
    return c;
  }
  if (has_hf_config(file.path())) {  // a Hugging Face folder: its config.json
    const ModelConfig c = read_hf_config(file.path());
    PYLON_CHECK(!preset_given || c.preset == fallback.preset, file.path(), ": a Hugging Face ", c.preset.name,
                " model, but --preset ", fallback.preset.name, " was given");
    PYLON_CHECK(!heads_given || c.heads == fallback.heads, file.path(), ": has ", c.heads, " heads, but --heads ",
                fallback.heads, " was given");
    return c;
  }
  // A PyTorch state dict of the nn.MultiheadAttention model: the sizes from the tensor shapes, the
  // preset and heads from the command line.
  ModelConfig c = fallback;
  PYLON_CHECK(c.preset.naming == Naming::torch, file.path(), ": no Pylon metadata, and the ", c.preset.name,
              " preset's weights come in a Hugging Face folder (config.json) or a Pylon checkpoint");
  const TensorView* embed = file.find("embed.weight");
  PYLON_CHECK(embed && embed->shape.size() == 2, file.path(),
              ": no 2-d tensor embed.weight: not a MiniLLM weights file");
  c.vocab = static_cast<int>(embed->shape[0]);
  c.dim = static_cast<int>(embed->shape[1]);
  int layers = 0;
  while (file.find("layers." + std::to_string(layers) + ".norm1.weight")) ++layers;
  c.layers = layers;
  PYLON_CHECK(c.heads > 0, file.path(), ": --heads must be positive, got ", c.heads);
  PYLON_CHECK(c.dim % c.heads == 0, file.path(), ": dim ", c.dim, " is not divisible by ", c.heads,
              " heads (pass --heads)");
  c.validate();
  return c;
}

}  // namespace pylon
