#include "model/edge_model.h"

#include "core/error.h"
#include "io/json_fields.h"
#include "io/safetensors.h"
#include "model/params.h"

namespace pylon {
namespace {

ModelConfig read_config(const EdgeFile& file) {
  const JsonFields h(file.path());
  const nlohmann::json& c = file.config();
  ModelConfig config;
  const std::string preset = h.text(c, "preset", "config");
  try {
    config.set_preset(find_preset(preset));
  } catch (const Error& e) {
    h.fail("config.preset: ", e.what());
  }
  config.vocab = h.positive_int(c, "vocab", "config");
  config.dim = h.positive_int(c, "dim", "config");
  config.layers = h.positive_int(c, "layers", "config");
  config.heads = h.positive_int(c, "heads", "config");
  config.norm_eps = h.positive_number(c, "norm_eps", "config");
  config.rope_theta = h.positive_number(c, "rope_theta", "config");
  // Per-model options (files before them: the preset's defaults, which they had).
  auto opt_int = [&](const char* key, int& field) {
    if (c.contains(key)) field = h.positive_int(c, key, "config");
  };
  auto opt_bool = [&](const char* key, bool& field) {
    if (!c.contains(key)) return;
    if (!c[key].is_boolean()) h.fail("config.", key, " is not true or false");
    field = c[key].get<bool>();
  };
  opt_int("kv_heads", config.kv_heads);
  opt_int("head_dim", config.head_size);
  opt_int("ffn_dim", config.ffn_dim);
  opt_bool("qkv_bias", config.qkv_bias);
  opt_bool("out_bias", config.out_bias);
  opt_bool("tied_head", config.tied_head);
  if (c.contains("rope_scaling")) {  // Llama 3's: {factor, low_freq_factor, high_freq_factor, original_max_positions}
    const nlohmann::json& r = c["rope_scaling"];
    if (!r.is_object()) h.fail("config.rope_scaling is not an object");
    config.rope_scaling.factor = h.number(r, "factor", "config.rope_scaling");
    config.rope_scaling.low_freq_factor = h.number(r, "low_freq_factor", "config.rope_scaling");
    config.rope_scaling.high_freq_factor = h.number(r, "high_freq_factor", "config.rope_scaling");
    config.rope_scaling.original_max_positions = h.positive_int(r, "original_max_positions", "config.rope_scaling");
  }
  try {
    config.validate();
  } catch (const Error& e) {
    h.fail("config: ", e.what());
  }
  return config;
}

// Exactly the tensors of the config's model, with their shapes.
void check_tensors(const EdgeFile& file, const ModelConfig& config) {
  const JsonFields h(file.path());
  const ParamTable table = param_table(config);
  for (const ParamInfo& info : table.params) {
    const EdgeTensor* t = file.find(info.name);
    if (!t) h.fail("tensor ", info.name, " is missing");
    if (t->shape != info.shape)
      h.fail("tensor ", info.name, " has shape ", shape_text(t->shape), ", expected ", shape_text(info.shape));
  }
  if (file.tensors().size() != table.params.size())
    h.fail(file.tensors().size(), " tensors, but the config's model has ", table.params.size());
}

}  // namespace

EdgeModel::EdgeModel(const std::string& path, bool check_data) : file(path), config(read_config(file)) {
  check_tensors(file, config);
  if (check_data) file.verify_tensors();
}

void write_edge_model(const std::string& path, const ModelConfig& config,
                      const std::vector<EdgeTensorToWrite>& tensors, std::string_view tokenizer) {
  nlohmann::json header = {
      {"preset", config.preset.name}, {"vocab", config.vocab},          {"dim", config.dim},
      {"layers", config.layers},      {"heads", config.heads},          {"kv_heads", config.kv_head_count()},
      {"head_dim", config.head_dim()}, {"ffn_dim", config.ffn_hidden()}, {"qkv_bias", config.qkv_bias},
      {"out_bias", config.out_bias},  {"tied_head", config.tied_head}, {"norm_eps", config.norm_eps},
      {"rope_theta", config.rope_theta}};
  if (config.rope_scaling.on())
    header["rope_scaling"] = {{"factor", config.rope_scaling.factor},
                              {"low_freq_factor", config.rope_scaling.low_freq_factor},
                              {"high_freq_factor", config.rope_scaling.high_freq_factor},
                              {"original_max_positions", config.rope_scaling.original_max_positions}};
  write_edge_file(path, header, tensors, tokenizer);
}

}  // namespace pylon
