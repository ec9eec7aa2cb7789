// pylon inspect: print an edge model's header (config, tokenizer, tensor table, sizes), or with
// --verify read every tensor and check it (checksums of version 2 files, NaN and Inf).
#include <cstdio>
#include <string>
#include <vector>

#include "cli/args.h"
#include "cli/commands.h"
#include "core/error.h"
#include "model/edge_model.h"
#include "io/safetensors.h"
#include "io/tokenizer.h"
#include "model/edge_weights.h"

namespace pylon {

int run_inspect(int argc, char** argv) {
  ArgParser args("inspect", "Print the header of an edge model file: pylon inspect FILE [--verify]");
  std::string path;
  bool verify = false;
  args.add("model", &path, "edge model file (or give it as the only argument)");
  args.add_switch("verify", &verify,
                "read every tensor and check it instead: its checksum (format version 2) and no NaN or Inf in "
                "f32/f16 data; prints 'ok' with the count, or the first bad tensor's name (exit 1)");
  // The file may be given bare, before or after the flags: pylon inspect [--verify] FILE.
  std::vector<char*> rest(argv, argv + argc);
  std::string bare;
  for (int i = 2; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--model") {
      ++i;
    } else if (!arg.empty() && arg[0] != '-') {
      bare = arg;
      rest.erase(rest.begin() + i);
      break;
    }
  }
  if (!args.parse(static_cast<int>(rest.size()), rest.data())) {
    std::fputs(args.help().c_str(), stdout);
    return 0;
  }
  // Both once inspected --model's file and ignored the bare one without a word.
  PYLON_CHECK(bare.empty() || path.empty(), "two files: --model ", path, " and ", bare, " (inspect reads one)");
  if (!bare.empty()) path = bare;
  PYLON_CHECK(!path.empty(), "give the edge model file: pylon inspect FILE");
  const EdgeModel edge(path, /*check_data=*/false);
  const EdgeFile& file = edge.file;
  const ModelConfig& c = edge.config;
  if (verify) {  // a bad tensor throws: one line naming it, exit 1
    const size_t n = file.verify_tensors();
    if (file.has_checksums())
      std::printf("%s: ok, %zu tensors match their checksums, none holds NaN or Inf\n", path.c_str(), n);
    else
      std::printf("%s: ok, %zu tensors hold no NaN or Inf (format version %u has no checksums: re-export for them)\n",
                  path.c_str(), n, file.version());
    return 0;
  }
  std::printf("%s: Pylon edge model, format version %u, JSON header %llu bytes\n", path.c_str(),
              file.version(), static_cast<unsigned long long>(file.header_json_bytes()));
  std::printf("config: preset %s, vocab %d, dim %d, layers %d, heads %d, kv heads %d, head dim %d, ffn %d, "
              "q/k/v bias %s, o bias %s, tied head %s, norm_eps %g, rope_theta %g\n",
              c.preset.name, c.vocab, c.dim, c.layers, c.heads, c.kv_head_count(), c.head_dim(), c.ffn_hidden(),
              c.qkv_bias ? "yes" : "no", c.out_bias ? "yes" : "no", c.tied_head ? "yes" : "no", c.norm_eps,
              c.rope_theta);
  if (c.rope_scaling.on())
    std::printf("rope scaling: llama3, factor %g, low_freq_factor %g, high_freq_factor %g, original positions %d\n",
                c.rope_scaling.factor, c.rope_scaling.low_freq_factor, c.rope_scaling.high_freq_factor,
                c.rope_scaling.original_max_positions);
  const std::string_view tokenizer = file.tokenizer();
  const char* kind = is_tokenizer_json(tokenizer) ? "Hugging Face tokenizer.json" : "SentencePiece model";
  std::printf("tokenizer: %s\n",
              tokenizer.empty() ? "none" : (kind + (", " + std::to_string(tokenizer.size()) + " bytes")).c_str());
  std::printf("%-32s %-5s %-14s %12s %12s %s\n", "tensor", "dtype", "shape", "bytes", "offset", "quant");
  for (const EdgeTensor& t : file.tensors()) {
    std::string quant;
    if (t.quantized())
      quant = std::string(edge_dtype_name(t.scale_dtype)) + " scales " +
              std::to_string(t.scale_length) + " bytes at " + std::to_string(t.scale_offset) +
              (t.group_size ? ", group " + std::to_string(t.group_size) : ", per row");
    std::printf("%-32s %-5s %-14s %12llu %12llu %s\n", t.name.c_str(), edge_dtype_name(t.dtype),
                shape_text(t.shape).c_str(), static_cast<unsigned long long>(t.length),
                static_cast<unsigned long long>(t.offset), quant.c_str());
  }
  std::printf("total %zu bytes; weights read per decoded token %llu bytes\n", file.mapped().size(),
              static_cast<unsigned long long>(edge_bytes_per_token(edge)));
  return 0;
}

}  // namespace pylon
