#include "model/preset.h"

#include "core/error.h"

namespace pylon {

const std::vector<Preset>& presets() {
  static const std::vector<Preset> table = {
      {"seed", "the PyTorch FSDP2 benchmark model: bidirectional attention, no positions",
       Mask::bidirectional, Positions::none},
      {"causal", "causal attention with rotary embeddings: next-token training and generation",
       Mask::causal, Positions::rope},
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

}  // namespace pylon
