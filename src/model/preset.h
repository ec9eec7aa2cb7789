// Presets as data: each preset is one row of a table of the traits in which model families differ
// (DESIGN §1). Every path (CPU and CUDA training, the CPU and Vulkan decoders, the file formats)
// reads these traits, never the preset's name, so a new preset is one row here plus its goldens
// (tests/golden/<name>_small, which the golden test requires for every row).
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace pylon {

// Which keys a query attends to.
enum class Mask {
  bidirectional,  // every position of the row (no KV cache can serve incremental decoding)
  causal,         // itself and the positions before it (decoding appends to a KV cache)
};

// How positions enter the model.
enum class Positions {
  none,  // not at all
  rope,  // rotary embeddings on q and k, rotate-half form, theta = ModelConfig::rope_theta
};

// The block's MLP.
enum class Ffn {
  silu,    // W2 · SiLU(W1 · x), hidden ModelConfig::ffn_hidden()
  swiglu,  // down(SiLU(gate · x) ∘ (up · x)), gate and up stored as one matrix [gate; up]
};

// The parameters' names in files (model/params.h).
enum class Naming {
  torch,         // PyTorch's nn.MultiheadAttention model: embed.weight, layers.{i}.attn.in_proj_weight, ...
  hugging_face,  // Hugging Face's LlamaForCausalLM: model.embed_tokens.weight, model.layers.{i}.self_attn.q_proj.weight, ...
};

struct Preset {
  const char* name;     // --preset, and the preset key of checkpoints and edge files
  const char* summary;  // one line for --help and the docs
  Mask mask;
  Positions positions;
  Ffn ffn;
  bool final_norm;      // an RMSNorm before the head
  Naming naming;
  bool attention_bias;  // the default of ModelConfig::qkv_bias and out_bias

  bool operator==(const Preset& o) const { return std::string_view(name) == o.name; }
};

// The table, in the order --help lists it.
const std::vector<Preset>& presets();
// The row called `name`; throws pylon::Error naming the known presets.
const Preset& find_preset(std::string_view name);
// The names, in table order (--preset's choices).
std::vector<std::string> preset_names();

const char* mask_name(Mask m);            // "bidirectional", "causal"
const char* positions_name(Positions p);  // "none", "rope"
const char* ffn_name(Ffn f);              // "silu", "swiglu"

}  // namespace pylon
