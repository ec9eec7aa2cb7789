// pylon eval: mean cross-entropy of a model over the first --steps micro-batches of a token file.
#include <cstdio>

#include <nlohmann/json.hpp>

#include "cli/args.h"
#include "cli/commands.h"
#include "cli/load_model.h"
#include "core/checked.h"
#include "core/error.h"
#include "core/timer.h"
#include "io/token_file.h"
#include "model/minillm.h"
#include "train/evaluate.h"
#include "train/memory_plan.h"
#include "model/edge_model.h"
#include "model/decoder.h"
#if PYLON_HAVE_VULKAN
#include "model/vulkan/vulkan_decoder.h"
#endif

namespace pylon {
namespace {
void print_eval(const EvalResult& r, double seconds, bool json) {
  if (json) {
    std::printf("%s\n", nlohmann::json{{"loss", r.loss}, {"tokens", r.tokens}}.dump().c_str());
  } else {
    std::printf("loss %.6f over %lld tokens (%.0f tokens/s)\n", r.loss,
                static_cast<long long>(r.tokens), static_cast<double>(r.tokens) / seconds);
  }
}
}  // namespace

int run_eval(int argc, char** argv) {
  std::string model_path, data_path, preset = "seed", device = "cpu";
  int heads = 16, batch = 8, seq = 256;
  int64_t steps = 10;
  bool json = false, no_coopmat = false;
  std::string weights_path = "auto";
  ArgParser args("eval", "Mean loss of a model over a token file, in the data order of training.");
  args.add("model", &model_path, "weights: .safetensors, edge file, checkpoint step folder or save directory");
  args.add("data", &data_path, "token file");
  args.add_choice("preset", &preset, preset_names(),
                  "preset of a file without Pylon metadata (PyTorch export)");
  args.add("heads", &heads, Range::at_least(1), "heads of a file without Pylon metadata");
  args.add("device", &device, "compute device: cpu, cuda, vulkan or vulkan:N (edge files)");
  args.add_choice("weights-path", &weights_path, {"auto", "import", "upload"},
                  "vulkan: zero-copy import of the file, upload, or auto (import on unified memory)");
  args.add_switch("no-coopmat", &no_coopmat, "vulkan: the plain kernels (tiled GEMM, fp32 attention) even where coopmat runs");
  args.add("batch", &batch, Range::at_least(1), "rows per micro-batch");
  args.add("seq", &seq, Range::at_least(1), "tokens per row");
  args.add("steps", &steps, Range::at_least(1), "micro-batches to score");
  args.add_switch("json", &json, "print one JSON line {loss, tokens}");
  if (!args.parse(argc, argv)) {
    std::fputs(args.help().c_str(), stdout);
    return 0;
  }
  PYLON_CHECK(!model_path.empty(), "--model is required");
  PYLON_CHECK(!data_path.empty(), "--data is required");
  checked_mul({steps, batch, seq}, "--steps x --batch x --seq tokens");  // the tokens it reports
  if (device.rfind("vulkan", 0) == 0) {
#if PYLON_HAVE_VULKAN
    const VulkanOptions options = vulkan_options_from_flags(device, no_coopmat, weights_path);
    const TokenFile data(data_path);
    VulkanDecoder model(model_path, options, seq);
    data.check_vocab(model.config().vocab);
    std::fprintf(stderr, "%s\n", model.describe().c_str());
    const Stopwatch clock;
    const EvalResult r = evaluate_rows(
        [&model](const int32_t* t, int n, float* logits) { model.score(t, n, logits); }, model.config().vocab, data,
        batch, seq, steps);
    print_eval(r, clock.seconds(), json);
    return 0;
#else
    PYLON_CHECK(false, "--device ", device, ": this build has no Vulkan backend (needs libvulkan-dev and glslc)");
#endif
  }
  PYLON_CHECK(device == "cpu", "--device ", device, ": this build has no ", device,
              " backend yet (use --device cpu)");

  if (is_edge_file(model_path)) {  // read in place, in the file's precision (no fp32 copy)
    const EdgeModel edge(model_path);
    check_fits(cpu_decode_memory(edge.config, seq, true), 1, available_host_bytes(), "--device cpu: --seq " +
               std::to_string(seq));
    const TokenFile data(data_path);
    data.check_vocab(edge.config.vocab);
    Decoder model(edge, seq);
    const Stopwatch clock;
    const EvalResult r = evaluate_rows(
        [&model](const int32_t* t, int n, float* logits) { model.score(t, n, logits); },
        edge.config.vocab, data, batch, seq, steps);
    print_eval(r, clock.seconds(), json);
    return 0;
  }
  ModelConfig fallback;
  fallback.preset = find_preset(preset);
  fallback.heads = heads;
  const LoadedModel m = load_model(model_path, fallback, args.given("preset"), args.given("heads"));
  MemoryPlan plan;  // the weights are read; the batch's activations not yet allocated
  try {
    plan = cpu_forward_memory(m.config, batch, seq);
  } catch (const Error& e) {
    throw Error(std::string("--device cpu: the batch does not fit: ") + e.what());
  }
  check_fits(plan, 1, available_host_bytes(), "--device cpu: a --batch x --seq forward");
  const TokenFile data(data_path);
  data.check_vocab(m.config.vocab);
  MiniLLM model(m.config);
  const Stopwatch clock;
  const EvalResult r = evaluate(model, m.params.data(), data, batch, seq, steps);
  print_eval(r, clock.seconds(), json);
  return 0;
}

}  // namespace pylon
