// Writes the valid seeds of fuzz/corpus/<target>/ with Pylon's own writers (run by hand when a
// format changes: build-fuzz/fuzz/fuzz_make_seeds fuzz/corpus). The tricky seeds and the ones
// taken from tests/ data are committed beside them.
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <tuple>
#include <vector>

#include "dist/shard_layout.h"
#include "io/atomic_file.h"
#include "io/edge_format.h"
#include "io/safetensors.h"
#include "io/token_file.h"
#include "model/hf_config.h"
#include "model/params.h"
#include "model/weights.h"

namespace fs = std::filesystem;
using namespace pylon;

namespace {

ModelConfig small_model(const char* preset) {
  ModelConfig c = ModelConfig::with_preset(preset);
  c.vocab = 29, c.dim = 12, c.heads = 2, c.layers = 2;
  if (c.preset.name == std::string("llama")) c.kv_heads = 1, c.ffn_dim = 20;
  return c;
}

void write_text(const fs::path& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary);
  out << text;
}

std::string read_text(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

void safetensors_seeds(const fs::path& dir) {
  for (const char* preset : {"seed", "llama"}) {
    const ModelConfig c = small_model(preset);
    const ParamTable table = param_table(c);
    std::vector<float> flat(static_cast<size_t>(table.total));
    for (size_t i = 0; i < flat.size(); ++i) flat[i] = static_cast<float>(i % 7) * 0.25f - 0.5f;
    write_safetensors((dir / (std::string(preset) + "_pylon.safetensors")).string(),
                      weight_tensors(table, flat.data()), c.to_metadata());
    if (std::string(preset) == "seed")  // a PyTorch state dict: no pylon.* metadata
      write_safetensors((dir / "seed_state_dict.safetensors").string(), weight_tensors(table, flat.data()));
  }
  const std::vector<uint16_t> half(6, 0x3c00);
  write_safetensors((dir / "f16_bf16.safetensors").string(),
                    {{"a", DType::f16, {2, 3}, half.data()}, {"b", DType::bf16, {3, 2}, half.data()}});
}

void edge_seeds(const fs::path& dir) {
  const nlohmann::json config = {{"preset", "causal"}, {"vocab", 29}, {"dim", 12}, {"layers", 2}, {"heads", 2}};
  auto tensor = [](const char* name, EdgeDType d, std::vector<int64_t> shape, int group, EdgeDType scale) {
    EdgeTensorToWrite t;
    t.info.name = name, t.info.dtype = d, t.info.shape = std::move(shape), t.info.group_size = group;
    t.info.scale_dtype = scale;
    t.values.assign(edge_value_bytes(t.info), std::byte{0x11});
    t.scales.assign(edge_scale_bytes(t.info), std::byte{0});
    return t;
  };
  write_edge_file((dir / "f32.pylon").string(), config, {tensor("embed.weight", EdgeDType::f32, {4, 3}, 0, EdgeDType::f32)}, "");
  write_edge_file((dir / "quantized.pylon").string(), config,
                  {tensor("w8", EdgeDType::int8, {4, 8}, 0, EdgeDType::f32),
                   tensor("w4", EdgeDType::int4, {2, 8}, 4, EdgeDType::f16),
                   tensor("h", EdgeDType::f16, {3}, 0, EdgeDType::f32)},
                  "{\"model\": {\"type\": \"BPE\"}}");
}

void token_seeds(const fs::path& dir) {
  // The first byte picks the name and width (token_file_fuzz.cpp): 0 automatic .bin, 1 automatic .u32.
  const fs::path tmp = dir / "tmp.bin";
  const std::vector<uint32_t> small = {1, 2, 3, 500, 65535, 0, 7};
  for (auto [name, width, pick] : {std::tuple{"u16", TokenWidth::u16, 0}, {"u32_header", TokenWidth::u32, 0},
                                   {"u32_named", TokenWidth::u32, 1}}) {
    write_token_file(tmp.string(), small, width);
    write_text(dir / name, std::string(1, static_cast<char>(pick)) + read_text(tmp));
  }
  fs::remove(tmp);
}

void checkpoint_seeds(const fs::path& dir) {
  // layout.json, NUL, trainer.json (checkpoint_fuzz.cpp), as save_checkpoint writes them.
  ModelConfig c;
  c.vocab = 29, c.dim = 12, c.heads = 2, c.layers = 2;
  for (int world = 1; world <= 3; ++world) {
    nlohmann::json l = ShardLayout(param_table(c), world).to_json();
    l["model"] = c.to_metadata();
    const nlohmann::json trainer = {{"step", 1}, {"world", world}, {"lr", 3e-4}};
    write_text(dir / ("world" + std::to_string(world)), l.dump(1) + "\n" + std::string(1, '\0') + trainer.dump(2) + "\n");
  }
}

void hf_config_seeds(const fs::path& dir) {
  ModelConfig c = small_model("llama");
  write_text(dir / "llama.json", hf_config_json(c).dump(2));
  c.tied_head = true, c.kv_heads = 2;
  write_text(dir / "llama_tied.json", hf_config_json(c).dump(2));
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: fuzz_make_seeds CORPUS_DIR\n");
    return 2;
  }
  const fs::path out = argv[1];
  for (const char* t : {"safetensors", "edge_header", "token_file", "checkpoint", "hf_config"})
    fs::create_directories(out / t);
  safetensors_seeds(out / "safetensors");
  edge_seeds(out / "edge_header");
  token_seeds(out / "token_file");
  checkpoint_seeds(out / "checkpoint");
  hf_config_seeds(out / "hf_config");
  return 0;
}
