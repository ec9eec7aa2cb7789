#include "model/config.h"

#include "core/error.h"
#include "model/params.h"

namespace pylon {

ModelConfig ModelConfig::with_preset(std::string_view name) {
  ModelConfig c;
  c.preset = find_preset(name);
  return c;
}

int64_t ModelConfig::num_params() const { return param_table(*this).total; }

void ModelConfig::validate() const {
  PYLON_CHECK(vocab > 0, "vocab must be positive, got ", vocab);
  PYLON_CHECK(dim > 0, "dim must be positive, got ", dim);
  PYLON_CHECK(layers >= 0, "layers must be non-negative, got ", layers);
  PYLON_CHECK(heads > 0, "heads must be positive, got ", heads);
  PYLON_CHECK(dim % heads == 0, "dim ", dim, " is not divisible by heads ", heads);
  PYLON_CHECK(preset.positions != Positions::rope || head_dim() % 2 == 0,
              "rotary embeddings need an even head size, got dim/heads = ", head_dim());
  PYLON_CHECK(norm_eps > 0, "norm eps must be positive");
}

std::string ModelConfig::describe() const {
  return detail::concat(preset.name, " V=", vocab, " D=", dim, " L=", layers, " H=", heads);
}

std::map<std::string, std::string> ModelConfig::to_metadata() const {
  return {{"pylon.preset", preset.name}, {"pylon.vocab", std::to_string(vocab)},
          {"pylon.dim", std::to_string(dim)},     {"pylon.layers", std::to_string(layers)},
          {"pylon.heads", std::to_string(heads)}};
}

void ModelConfig::update_from_metadata(const std::map<std::string, std::string>& meta) {
  auto get_int = [&](const char* key, int& field) {
    auto it = meta.find(key);
    if (it == meta.end()) return;
    try {
      size_t used = 0;
      field = std::stoi(it->second, &used);
      PYLON_CHECK(used == it->second.size(), "");
    } catch (const std::exception&) {
      throw Error(std::string("model metadata ") + key + " is not an integer: '" + it->second + "'");
    }
  };
  if (auto it = meta.find("pylon.preset"); it != meta.end()) preset = find_preset(it->second);
  get_int("pylon.vocab", vocab);
  get_int("pylon.dim", dim);
  get_int("pylon.layers", layers);
  get_int("pylon.heads", heads);
}

}  // namespace pylon
