// pylon generate: continue a prompt, streaming text as it is sampled, then report prefill and
// decode speed.
#include <cstdio>
#include <functional>
#include <memory>
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
#include "model/edge_model.h"
#include "train/memory_plan.h"
#if PYLON_HAVE_VULKAN
#include "model/vulkan/vulkan_decoder.h"
#endif

namespace pylon {

int run_generate(int argc, char** argv) {
  std::string model_path, prompt, tokenizer_path, preset = "causal", device = "cpu";
  int heads = 16, max_new = 100, context = 1024;
  int64_t seed = 0;
  SamplerOptions s;
  std::string weights_path = "auto", vulkan_decode = "auto";
  bool no_coopmat = false;
  ArgParser args("generate", "Continue a prompt with a trained model (KV cache for the causal preset).");
  args.add("model", &model_path, "weights: checkpoint directory, step folder, .safetensors or edge file");
  args.add("prompt", &prompt, "text to continue");
  args.add("tokenizer", &tokenizer_path,
           "SentencePiece .model, tokenizer.json or a folder with either (default: the checkpoint's or edge file's)");
  args.add_choice("preset", &preset, preset_names(), "preset of a file without Pylon metadata");
  args.add("heads", &heads, Range::at_least(1), "heads of a file without Pylon metadata");
  args.add("device", &device, "compute device: cpu, vulkan or vulkan:N (edge files)");
  args.add_choice("weights-path", &weights_path, {"auto", "import", "upload"},
                  "vulkan: zero-copy import of the file, upload, or auto (import on unified memory)");
  args.add_switch("no-coopmat", &no_coopmat, "vulkan: the plain kernels (tiled GEMM, fp32 attention) even where coopmat runs");
  args.add_choice("vulkan-decode", &vulkan_decode, {"auto", "persistent", "ops"},
                  "vulkan: a causal token's blocks in one persistent dispatch (persistent), op by op, or auto "
                  "(persistent on GPUs that report their SM count: NVIDIA's)");
  args.add("max-new-tokens", &max_new, Range::at_least(0), "tokens to generate");
  args.add("context", &context, Range::at_least(1), "maximum context length (prompt + generated)");
  args.add("temperature", &s.temperature, Range::at_least(0), "sampling temperature; 0 = greedy");
  args.add("top-k", &s.top_k, Range::at_least(0), "sample among the k most likely tokens (0 = all)");
  args.add("top-p", &s.top_p, Range::open_closed(0, 1), "then among the smallest set with this probability mass");
  args.add("seed", &seed, Range::at_least(0), "sampling seed");
  if (!args.parse(argc, argv)) {
    std::fputs(args.help().c_str(), stdout);
    return 0;
  }
  PYLON_CHECK(!model_path.empty(), "--model is required");
  PYLON_CHECK(max_new < context, "--max-new-tokens ", max_new, " leaves no room in --context ", context,
              " for the prompt (at least one token)");

  // The model behind one interface: feed(tokens, n) -> logits after the last token.
  ModelConfig config;
  std::string tokenizer_model;
  std::function<const float*(const int32_t*, int)> feed;
  std::function<int()> gave_up = [] { return -1; };  // Vulkan: where the persistent kernel gave up
  std::function<void(int)> prepare;                   // Vulkan: the pipelines built before the clocks
  std::unique_ptr<Decoder> cpu;
  LoadedModel m;                  // checkpoints and safetensors: fp32 weights
  std::unique_ptr<EdgeModel> edge;  // edge files: mapped, read in their stored precision
  const bool vulkan = device.rfind("vulkan", 0) == 0;
  if (vulkan) {
#if PYLON_HAVE_VULKAN
    VulkanOptions options = vulkan_options_from_flags(device, no_coopmat, weights_path);
    options.decode = vulkan_decode;
    auto gpu = std::make_shared<VulkanDecoder>(model_path, options, context);
    std::fprintf(stderr, "%s\n", gpu->describe().c_str());
    config = gpu->config();
    tokenizer_model = gpu->tokenizer_model();
    feed = [gpu](const int32_t* t, int n) { return gpu->feed(t, n); };
    gave_up = [gpu] { return gpu->persistent_gave_up_at(); };
    prepare = [gpu](int prompt_tokens) { gpu->prepare(prompt_tokens); };
#else
    PYLON_CHECK(false, "--device ", device, ": this build has no Vulkan backend (needs libvulkan-dev and glslc)");
#endif
  } else {
    PYLON_CHECK(device == "cpu", "--device ", device, ": expected cpu, vulkan or vulkan:N");
    const std::string context_who = "--device cpu: --context " + std::to_string(context);
    if (is_edge_file(model_path)) {
      edge = std::make_unique<EdgeModel>(model_path);
      config = edge->config;
      tokenizer_model = std::string(edge->file.tokenizer());
      check_fits(cpu_decode_memory(config, context, false), 1, available_host_bytes(), context_who);
      cpu = std::make_unique<Decoder>(*edge, context);
    } else {
      ModelConfig fallback;
      fallback.preset = find_preset(preset);
      fallback.heads = heads;
      m = load_model(model_path, fallback, args.given("preset"), args.given("heads"));
      config = m.config;
      if (tokenizer_path.empty()) tokenizer_path = m.tokenizer;
      check_fits(cpu_decode_memory(config, context, false), 1, available_host_bytes(), context_who);
      cpu = std::make_unique<Decoder>(m.config, m.params.data(), context);
    }
    feed = [&cpu](const int32_t* t, int n) { return cpu->feed(t, n); };
  }
  PYLON_CHECK(!tokenizer_path.empty() || !tokenizer_model.empty(), model_path,
              " carries no tokenizer: pass --tokenizer FILE (a .model, a tokenizer.json or a folder)");
  const Tokenizer tok = tokenizer_path.empty() ? Tokenizer::from_bytes(tokenizer_model, model_path)
                                               : Tokenizer::load(tokenizer_path);
  PYLON_CHECK(tok.vocab_size() <= config.vocab, "tokenizer vocab ", tok.vocab_size(),
              " exceeds the model's ", config.vocab);

  // Training text has no BOS markers, so the prompt is encoded as plain text; an empty prompt
  // starts from a newline, which separates documents in the default data.
  std::vector<int> ids = tok.encode(prompt.empty() ? std::string("\n") : prompt);
  PYLON_CHECK(!ids.empty(), "the prompt encodes to no tokens");
  PYLON_CHECK(static_cast<int64_t>(ids.size()) + max_new <= context, "prompt (", ids.size(),
              " tokens) + --max-new-tokens exceeds --context ", context);
  Rng rng(static_cast<uint64_t>(seed));

  std::vector<int32_t> prompt_ids(ids.begin(), ids.end());
  if (prepare) {  // so that the rates below are the model's, not a cold driver's compiles
    const Stopwatch prepare_clock;
    prepare(static_cast<int>(prompt_ids.size()));
    std::fprintf(stderr, "vulkan: pipelines ready in %.2f s\n", prepare_clock.seconds());
  }
  const Stopwatch prefill_clock;
  const float* logits = feed(prompt_ids.data(), static_cast<int>(prompt_ids.size()));
  const double prefill_s = prefill_clock.seconds();
  std::printf("%s", prompt.c_str());
  std::fflush(stdout);
  // The text so far, less a character whose last bytes are still to come (decoded as U+FFFD):
  // byte-level tokens often split a character.
  auto settled_text = [&tok](const std::vector<int>& v) {
    std::string t = tok.decode(v);
    while (t.size() >= 3 && t.compare(t.size() - 3, 3, "\xEF\xBF\xBD") == 0) t.resize(t.size() - 3);
    return t;
  };
  auto print_new = [](const std::string& text, const std::string& shown) {
    if (text.size() > shown.size() && text.compare(0, shown.size(), shown) == 0) {
      std::fputs(text.c_str() + shown.size(), stdout);
      std::fflush(stdout);
    }
  };
  std::string shown = settled_text(ids);
  const Stopwatch decode_clock;
  int generated = 0;
  for (; generated < max_new; ++generated) {
    // Only ids the tokenizer can decode: a model's vocab may be padded past the tokenizer's.
    const int next = sample_token(logits, tok.vocab_size(), s, rng);
    if (next == tok.eos_id()) break;
    ids.push_back(next);
    std::string text = settled_text(ids);  // print what the new token added
    print_new(text, shown);
    shown = std::move(text);
    if (generated + 1 < max_new) {
      const int32_t t = next;
      logits = feed(&t, 1);
    }
  }
  const double decode_s = decode_clock.seconds();
  print_new(tok.decode(ids), shown);  // an incomplete character at the very end
  std::printf("\n");
  std::fflush(stdout);
  if (gave_up() >= 0)
    std::fprintf(stderr, "vulkan: the persistent decode kernel's grid wait timed out at position %d; "
                         "decoded op by op from there\n", gave_up());
  std::fprintf(stderr, "prefill %zu tokens at %.0f tokens/s; decode %d tokens at %.1f tokens/s (%s)\n",
               prompt_ids.size(), static_cast<double>(prompt_ids.size()) / prefill_s, generated,
               generated ? generated / decode_s : 0.0, vulkan ? "vulkan" : "cpu");
  return 0;
}

}  // namespace pylon
