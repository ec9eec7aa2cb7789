#include "model/preset.h"

#include "core/error.h"

namespace pylon {

const std::vector<Preset>& presets() {
  static const std::vector<Preset> table = {
      {"seed", "the PyTorch FSDP2 benchmark model: bidirectional attention, no positions",
       Mask::bidirectional, Positions::none, Ffn::silu, false, Naming::torch, true},
      {"causal", "causal attention with rotary embeddings: next-token training and generation",
       Mask::causal, Positions::rope, Ffn::silu, false, Naming::torch, true},
      {"llama", "the Llama family as Hugging Face computes it (grouped-query attention, SwiGLU, final norm)",
       Mask::causal, Positions::rope, Ffn::swiglu, true, Naming::hugging_face, false},
  };
  return table;
}

const Preset& find_preset(std::string_view name) {
  for (const Preset& p : presets())
    if (name == p.name) return p;
  std::string known, shown;
  for (const std::string& n : preset_names()) known += (known.empty() ? "" : ", ") + n;
  for (const char ch : name.substr(0, 64)) shown += ch >= 0x20 && ch < 0x7f ? ch : '?';  // one printable line
  throw Error("unknown preset '" + shown + "' (expected " + known + ")");
}

std::vector<std::string> preset_names() {
  std::vector<std::string> out;
  for (const Preset& p : presets()) out.emplace_back(p.name);
  return out;
}

const char* mask_name(Mask m) { return m == Mask::causal ? "causal" : "bidirectional"; }
const char* positions_name(Positions p) { return p == Positions::rope ? "rope" : "none"; }
const char* ffn_name(Ffn f) { return f == Ffn::swiglu ? "swiglu" : "silu"; }

}  // namespace pylon
