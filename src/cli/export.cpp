// pylon export: a checkpoint or safetensors state dict -> the single-file edge model (f32, f16,
// int8 or int4 matrices; the tokenizer inside).
#include <cstdio>
#include <filesystem>

#include "cli/args.h"
#include "cli/commands.h"
#include "cli/load_model.h"
#include "core/error.h"
#include "io/atomic_file.h"
#include "model/edge_model.h"
#include "io/tokenizer.h"
#include "model/edge_weights.h"

namespace pylon {

int run_export(int argc, char** argv) {
  std::string model_path, out_path, tokenizer_path, preset = "seed", quant = "f16";
  int heads = 16, group_size = 32;
  ArgParser args("export", "Write a model as a single-file edge model (tensors aligned to 4096 bytes).");
  args.add("model", &model_path, "weights: .safetensors, checkpoint step folder or save directory");
  args.add_choice("preset", &preset, preset_names(), "preset of a file without Pylon metadata");
  args.add("heads", &heads, Range::at_least(1), "heads of a file without Pylon metadata");
  args.add("out", &out_path, "edge model file to write");
  args.add_choice("quant", &quant, {"f32", "f16", "int8", "int4"},
                  "matrices of the blocks and the head (embedding, norms, biases: f16; f32 with f32)");
  args.add("group-size", &group_size, Range::closed(32, 64), "int4: columns per scale, 32 or 64");
  args.add("tokenizer", &tokenizer_path,
           "tokenizer to embed: SentencePiece .model, tokenizer.json or a folder with either (default: the "
           "checkpoint's)");
  if (!args.parse(argc, argv)) {
    std::fputs(args.help().c_str(), stdout);
    return 0;
  }
  PYLON_CHECK(!model_path.empty(), "--model is required");
  PYLON_CHECK(!out_path.empty(), "--out is required");
  PYLON_CHECK(group_size == 32 || group_size == 64, "--group-size must be 32 or 64, got ", group_size);

  ModelConfig fallback;
  fallback.preset = find_preset(preset);
  fallback.heads = heads;
  const LoadedModel m = load_model(model_path, fallback, args.given("preset"), args.given("heads"));
  if (tokenizer_path.empty()) tokenizer_path = m.tokenizer;
  std::string tokenizer = m.tokenizer_model;  // an edge file's own
  if (!tokenizer_path.empty() || !tokenizer.empty()) {
    // A tokenizer.json goes in with the bos and eos of the tokenizer_config.json beside it.
    const Tokenizer tok = tokenizer_path.empty() ? Tokenizer::from_bytes(tokenizer, model_path)
                                                 : Tokenizer::load(tokenizer_path);
    PYLON_CHECK(tok.vocab_size() <= m.config.vocab, "tokenizer vocab ", tok.vocab_size(),
                " exceeds the model's ", m.config.vocab);
    tokenizer = tok.to_bytes();
  }

  EdgeQuant q;
  for (EdgeDType d : {EdgeDType::f32, EdgeDType::f16, EdgeDType::int8, EdgeDType::int4})
    if (quant == edge_dtype_name(d)) q.matrices = d;
  q.group_size = group_size;
  const ParamTable table = param_table(m.config);
  write_edge_model(out_path, m.config, encode_edge_tensors(table, m.params.data(), q), tokenizer);
  std::printf("wrote %s: %s V=%d D=%d L=%d H=%d KV=%d, matrices %s, %s tokenizer, %llu bytes\n",
              out_path.c_str(), m.config.preset.name, m.config.vocab, m.config.dim,
              m.config.layers, m.config.heads, m.config.kv_head_count(), quant.c_str(), tokenizer.empty() ? "no" : "with",
              static_cast<unsigned long long>(std::filesystem::file_size(out_path)));
  return 0;
}

}  // namespace pylon
