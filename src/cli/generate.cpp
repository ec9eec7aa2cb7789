// pylon generate: continue a prompt, streaming text as it is sampled, then report prefill and
// decode speed.
#include <cstdio>
#include <vector>

#include "cli/args.h"
#include "cli/commands.h"
#include "cli/load_model.h"
#include "core/error.h"
#include "core/rng.h"
#include "core/timer.h"
#include "io/tokenizer.h"
#include "model/decoder.h"
#include "model/sampler.h"

namespace pylon {

int run_generate(int argc, char** argv) {
  std::string model_path, prompt, tokenizer_path, preset = "causal", device = "cpu";
  int heads = 16, max_new = 100, context = 1024;
  int64_t seed = 0;
  SamplerOptions s;
  ArgParser args("generate", "Continue a prompt with a trained model (KV cache for the causal preset).");
  args.add("model", &model_path, "weights: checkpoint directory, step folder, .safetensors or edge file");
  args.add("prompt", &prompt, "text to continue");
  args.add("tokenizer", &tokenizer_path, "SentencePiece model (default: the checkpoint's or edge file's)");
  args.add_choice("preset", &preset, {"seed", "causal"}, "preset of a file without Pylon metadata");
  args.add("heads", &heads, "heads of a file without Pylon metadata");
  args.add_choice("device", &device, {"cpu", "vulkan"}, "compute device");
  args.add("max-new-tokens", &max_new, "tokens to generate");
  args.add("context", &context, "maximum context length (prompt + generated)");
  args.add("temperature", &s.temperature, "sampling temperature; 0 = greedy");
  args.add("top-k", &s.top_k, "sample among the k most likely tokens (0 = all)");
  args.add("top-p", &s.top_p, "then among the smallest set with this probability mass");
  args.add("seed", &seed, "sampling seed");
  if (!args.parse(argc, argv)) {
    std::fputs(args.help().c_str(), stdout);
    return 0;
  }
  PYLON_CHECK(!model_path.empty(), "--model is required");
  PYLON_CHECK(device == "cpu", "--device ", device, ": this build has no ", device, " backend yet");
  PYLON_CHECK(max_new >= 0, "--max-new-tokens must be >= 0");

  ModelConfig fallback;
  fallback.preset = parse_preset(preset);
  fallback.heads = heads;
  const LoadedModel m = load_model(model_path, fallback, args.given("preset"), args.given("heads"));
  if (tokenizer_path.empty()) tokenizer_path = m.tokenizer;
  PYLON_CHECK(!tokenizer_path.empty() || !m.tokenizer_model.empty(), model_path,
              " carries no tokenizer: pass --tokenizer FILE.model");
  const Tokenizer tok = tokenizer_path.empty() ? Tokenizer::from_bytes(m.tokenizer_model, model_path)
                                               : Tokenizer::load(tokenizer_path);
  PYLON_CHECK(tok.vocab_size() <= m.config.vocab, "tokenizer vocab ", tok.vocab_size(),
              " exceeds the model's ", m.config.vocab);

  // Training text has no BOS markers, so the prompt is encoded as plain text; an empty prompt
  // starts from a newline, which separates documents in the default data.
  std::vector<int> ids = tok.encode(prompt.empty() ? std::string("\n") : prompt);
  PYLON_CHECK(!ids.empty(), "the prompt encodes to no tokens");
  PYLON_CHECK(static_cast<int>(ids.size()) + max_new <= context, "prompt (", ids.size(),
              " tokens) + --max-new-tokens exceeds --context ", context);
  Decoder decoder(m.config, m.params.data(), context);
  Rng rng(static_cast<uint64_t>(seed));

  std::vector<int32_t> prompt_ids(ids.begin(), ids.end());
  const Stopwatch prefill_clock;
  const float* logits = decoder.feed(prompt_ids.data(), static_cast<int>(prompt_ids.size()));
  const double prefill_s = prefill_clock.seconds();
  std::printf("%s", prompt.c_str());
  std::fflush(stdout);
  std::string shown = tok.decode(ids);
  const Stopwatch decode_clock;
  int generated = 0;
  for (; generated < max_new; ++generated) {
    const int next = sample_token(logits, m.config.vocab, s, rng);
    if (next == tok.eos_id()) break;
    ids.push_back(next);
    const std::string text = tok.decode(ids);  // print what the new token added
    if (text.size() > shown.size() && text.compare(0, shown.size(), shown) == 0) {
      std::fputs(text.c_str() + shown.size(), stdout);
      std::fflush(stdout);
    }
    shown = text;
    if (generated + 1 < max_new) {
      const int32_t t = next;
      logits = decoder.feed(&t, 1);
    }
  }
  const double decode_s = decode_clock.seconds();
  std::printf("\n");
  std::fflush(stdout);
  std::fprintf(stderr, "prefill %zu tokens at %.0f tokens/s; decode %d tokens at %.1f tokens/s (cpu)\n",
               prompt_ids.size(), static_cast<double>(prompt_ids.size()) / prefill_s, generated,
               generated ? generated / decode_s : 0.0);
  return 0;
}

}  // namespace pylon
