#include "model/weights.h"

#include <set>

#include "core/error.h"

namespace pylon {

void load_weights(const SafetensorsReader& file, const ParamTable& table, float* flat) {
  std::set<std::string> expected;
  for (const auto& p : table.params) {
    file.read_f32(p.name, p.shape, flat + p.offset);
    expected.insert(p.name);
  }
  for (const auto& t : file.tensors())
    PYLON_CHECK(expected.count(t.name), file.path(), ": unexpected tensor ", t.name,
                " (not a parameter of this MiniLLM)");
}

std::vector<TensorToWrite> weight_tensors(const ParamTable& table, const float* flat,
                                          const std::string& prefix) {
  std::vector<TensorToWrite> out;
  for (const auto& p : table.params) out.push_back({prefix + p.name, DType::f32, p.shape, flat + p.offset});
  return out;
}

ModelConfig config_from_weights(const SafetensorsReader& file, const ModelConfig& fallback,
                                bool preset_given, bool heads_given) {
  ModelConfig c = fallback;
  const TensorView* embed = file.find("embed.weight");
  PYLON_CHECK(embed && embed->shape.size() == 2, file.path(),
              ": no 2-d tensor embed.weight: not a MiniLLM weights file");
  c.vocab = static_cast<int>(embed->shape[0]);
  c.dim = static_cast<int>(embed->shape[1]);
  int layers = 0;
  while (file.find("layers." + std::to_string(layers) + ".norm1.weight")) ++layers;
  c.layers = layers;
  // Metadata written by Pylon wins over defaults, but a flag the user gave must agree with it.
  ModelConfig meta = c;
  meta.update_from_metadata(file.metadata());
  if (file.metadata().count("pylon.preset")) {
    PYLON_CHECK(!preset_given || meta.preset == fallback.preset, file.path(), ": was trained as preset ",
                meta.preset.name, ", but --preset ", fallback.preset.name, " was given");
    c.preset = meta.preset;
  }
  if (file.metadata().count("pylon.heads")) {
    PYLON_CHECK(!heads_given || meta.heads == fallback.heads, file.path(), ": has ", meta.heads,
                " heads, but --heads ", fallback.heads, " was given");
    c.heads = meta.heads;
  }
  PYLON_CHECK(c.dim % c.heads == 0, file.path(), ": dim ", c.dim, " is not divisible by ",
              c.heads, " heads (pass --heads)");
  c.validate();
  return c;
}

}  // namespace pylon
