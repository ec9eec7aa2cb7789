#include "model/hf_config.h"

#include <filesystem>
#include <fstream>

#include "core/error.h"
#include "io/atomic_file.h"
#include "io/json_fields.h"

namespace pylon {

namespace fs = std::filesystem;

bool has_hf_config(const std::string& dir) {
  std::error_code ec;
  // Any config.json, so that one that is not a regular file is refused by name where it is read.
  return fs::is_directory(dir, ec) && fs::exists(fs::path(dir) / "config.json", ec);
}

ModelConfig read_hf_config(const std::string& dir) {
  const std::string path = (fs::path(dir) / "config.json").string();
  const JsonFields f(path);
  nlohmann::json c;
  try {
    c = nlohmann::json::parse(read_text_file(path));
  } catch (const nlohmann::json::exception& e) {
    f.fail("not valid JSON: ", e.what());
  }
  if (!c.is_object()) f.fail("not a JSON object");
  const std::string type = f.text(c, "model_type", "config");
  if (type != "llama" && type != "qwen2" && type != "mistral")
    f.fail("model_type \"", type, "\" is not one Pylon runs (llama, qwen2, mistral)");
  auto opt_int = [&](const char* key, int fallback) {
    return c.contains(key) && !c[key].is_null() ? f.positive_int(c, key, "config") : fallback;
  };
  auto opt_bool = [&](const char* key, bool fallback) {
    if (!c.contains(key) || c[key].is_null()) return fallback;
    if (!c[key].is_boolean()) f.fail("config.", key, " is not true or false");
    return c[key].get<bool>();
  };
  ModelConfig m = ModelConfig::with_preset("llama");
  m.vocab = f.positive_int(c, "vocab_size", "config");
  m.dim = f.positive_int(c, "hidden_size", "config");
  m.layers = f.positive_int(c, "num_hidden_layers", "config");
  m.heads = f.positive_int(c, "num_attention_heads", "config");
  m.kv_heads = opt_int("num_key_value_heads", m.heads);
  m.head_size = opt_int("head_dim", 0);
  m.ffn_dim = f.positive_int(c, "intermediate_size", "config");
  m.norm_eps = c.contains("rms_norm_eps") ? f.number(c, "rms_norm_eps", "config") : 1e-6f;
  m.rope_theta = c.contains("rope_theta") ? f.number(c, "rope_theta", "config") : 10000.0f;
  m.tied_head = opt_bool("tie_word_embeddings", false);
  if (type == "qwen2") {  // Qwen2Attention: q, k, v with biases, o without
    m.qkv_bias = true, m.out_bias = false;
  } else {
    m.qkv_bias = m.out_bias = opt_bool("attention_bias", false);
  }
  if (opt_bool("mlp_bias", false)) f.fail("config.mlp_bias is true: Pylon's MLP has no biases");
  if (c.contains("hidden_act") && !(c["hidden_act"].is_string() && c["hidden_act"] == "silu"))
    f.fail("config.hidden_act is ", c["hidden_act"].dump(), ": Pylon's MLP is SwiGLU (silu)");
  if (c.contains("rope_scaling") && !c["rope_scaling"].is_null()) {  // Llama 3's, or none ("default")
    const nlohmann::json& r = c["rope_scaling"];
    if (!r.is_object()) f.fail("config.rope_scaling is ", r.dump(), ", not an object");
    const char* type_key = r.contains("rope_type") ? "rope_type" : "type";
    const std::string kind = f.text(r, type_key, "config.rope_scaling");
    if (kind == "llama3") {
      m.rope_scaling.factor = f.number(r, "factor", "config.rope_scaling");
      m.rope_scaling.low_freq_factor = f.number(r, "low_freq_factor", "config.rope_scaling");
      m.rope_scaling.high_freq_factor = f.number(r, "high_freq_factor", "config.rope_scaling");
      m.rope_scaling.original_max_positions = f.positive_int(r, "original_max_position_embeddings", "config.rope_scaling");
    } else if (kind != "default") {
      f.fail("config.rope_scaling.", type_key, " \"", kind, "\" is not one Pylon runs (llama3, default)");
    }
  }
  if (c.contains("sliding_window") && !c["sliding_window"].is_null() &&
      (type == "mistral" || opt_bool("use_sliding_window", false)))
    f.fail("config.sliding_window: no sliding-window attention in Pylon");
  try {
    m.validate();
  } catch (const Error& e) {
    f.fail(e.what());
  }
  return m;
}

nlohmann::json hf_config_json(const ModelConfig& m) {
  PYLON_CHECK(m.preset.naming == Naming::hugging_face, "config.json: the ", m.preset.name,
              " preset is no Hugging Face model (the llama preset is)");
  PYLON_CHECK(m.qkv_bias || !m.out_bias, "config.json: a bias on o alone has no Hugging Face model_type");
  const bool qwen2 = m.qkv_bias && !m.out_bias;
  nlohmann::json c = {
      {"architectures", {qwen2 ? "Qwen2ForCausalLM" : "LlamaForCausalLM"}},
      {"model_type", qwen2 ? "qwen2" : "llama"},
      {"vocab_size", m.vocab},
      {"hidden_size", m.dim},
      {"num_hidden_layers", m.layers},
      {"num_attention_heads", m.heads},
      {"num_key_value_heads", m.kv_head_count()},
      {"head_dim", m.head_dim()},
      {"intermediate_size", m.ffn_hidden()},
      {"hidden_act", "silu"},
      {"rms_norm_eps", m.norm_eps},
      {"rope_theta", m.rope_theta},
      {"rope_scaling", nullptr},
      {"tie_word_embeddings", m.tied_head},
      {"torch_dtype", "float32"},
  };
  if (m.rope_scaling.on())
    c["rope_scaling"] = {{"rope_type", "llama3"},
                         {"factor", m.rope_scaling.factor},
                         {"low_freq_factor", m.rope_scaling.low_freq_factor},
                         {"high_freq_factor", m.rope_scaling.high_freq_factor},
                         {"original_max_position_embeddings", m.rope_scaling.original_max_positions}};
  if (!qwen2) c["attention_bias"] = m.qkv_bias, c["mlp_bias"] = false;
  if (qwen2) c["use_sliding_window"] = false;
  return c;
}

void write_hf_config(const std::string& dir, const ModelConfig& m) {
  write_file_atomic((fs::path(dir) / "config.json").string(), hf_config_json(m).dump(2) + "\n");
}

}  // namespace pylon
