#include "model/decoder.h"

#include "core/error.h"
#include "model/edge_weights.h"
#include "model/params.h"
#include "model/recipe.h"
#include "ops/cpu/inference.h"

namespace pylon {

Decoder::Decoder(const ModelConfig& config, std::unique_ptr<InferenceOps> ops, int max_tokens)
    : config_(config), spec_(inference_spec(config, max_tokens)), ops_(std::move(ops)), max_tokens_(max_tokens) {
  PYLON_CHECK(max_tokens > 0, "context length must be positive");
  logits_.resize(static_cast<size_t>(config_.vocab));
}

Decoder::Decoder(const ModelConfig& config, const float* params, int max_tokens)
    : config_(config), spec_(inference_spec(config, max_tokens)), max_tokens_(max_tokens) {
  PYLON_CHECK(max_tokens > 0, "context length must be positive");
  std::vector<WeightView> w;
  for (const ParamInfo& p : param_table(config).params)
    w.push_back(p.shape.size() == 2 ? f32_view(params + p.offset, p.shape[0], p.shape[1])
                                    : f32_view(params + p.offset, 1, p.numel));
  ops_ = std::make_unique<cpu::CpuInference>(spec_, std::move(w));
  logits_.resize(static_cast<size_t>(config_.vocab));
}

Decoder::Decoder(const EdgeModel& model, int max_tokens)
    : config_(model.config), spec_(inference_spec(model.config, max_tokens)), max_tokens_(max_tokens) {
  PYLON_CHECK(max_tokens > 0, "context length must be positive");
  const ParamTable table = param_table(config_);
  int64_t small = 0;
  for (const ParamInfo& p : table.params)
    if (p.shape.size() != 2) small += p.numel;
  small_.resize(static_cast<size_t>(small));
  float* next = small_.data();
  std::vector<WeightView> w;
  for (const ParamInfo& p : table.params) {
    const EdgeTensor* t = model.file.find(p.name);
    PYLON_CHECK(t && t->shape == p.shape, model.file.path(), ": tensor ", p.name, " does not fit the model");
    if (p.shape.size() == 2) {
      w.push_back(edge_weight_view(model.file, *t));
    } else {
      decode_edge_tensor(model.file, *t, next);
      w.push_back(f32_view(next, 1, p.numel));
      next += p.numel;
    }
  }
  ops_ = std::make_unique<cpu::CpuInference>(spec_, std::move(w));
  logits_.resize(static_cast<size_t>(config_.vocab));
}

Decoder::~Decoder() = default;

void Decoder::check_tokens(const int32_t* tokens, int n) const {
  for (int i = 0; i < n; ++i)
    PYLON_CHECK(tokens[i] >= 0 && tokens[i] < config_.vocab, "token id ", tokens[i], " is outside the vocab ",
                config_.vocab);
}

void Decoder::reset() {
  pos_ = 0;
  history_.clear();
}

void Decoder::forward(const int32_t* tokens, int n, int pos0, int first, int rows, float* out) {
  // A backend whose fused path gives up runs the plain one from then on: a second pass suffices.
  for (int attempt = 0; attempt < 2; ++attempt) {
    if (ops_->begin(tokens, n, pos0)) forward_blocks(*ops_, spec_, n);
    if (ops_->finish(first, rows, out)) return;
  }
  throw Error("the decoder's backend failed the same forward twice");
}

const float* Decoder::feed(const int32_t* tokens, int n) {
  PYLON_CHECK(n > 0, "nothing to feed");
  PYLON_CHECK(pos_ + n <= max_tokens_, "context full: ", pos_ + n, " tokens > ", max_tokens_);
  check_tokens(tokens, n);
  if (cached()) {
    forward(tokens, n, pos_, n - 1, 1, logits_.data());
    pos_ += n;
  } else {
    history_.insert(history_.end(), tokens, tokens + n);
    const int all = static_cast<int>(history_.size());
    forward(history_.data(), all, 0, all - 1, 1, logits_.data());
    pos_ = all;
  }
  return logits_.data();
}

void Decoder::score(const int32_t* tokens, int n, float* logits) {
  PYLON_CHECK(n > 0 && n <= max_tokens_, "row of ", n, " tokens for a context of ", max_tokens_);
  check_tokens(tokens, n);
  reset();
  forward(tokens, n, 0, 0, n, logits);
}

void Decoder::prepare(int prompt_tokens) {
  PYLON_CHECK(prompt_tokens > 0 && prompt_tokens <= max_tokens_, "prepare: a prompt of ", prompt_tokens,
              " tokens for a context of ", max_tokens_);
  auto dry = [&](int n) {
    if (ops_->begin(nullptr, n, 0, true)) forward_blocks(*ops_, spec_, n);
    ops_->finish(n - 1, 1, nullptr);
  };
  if (prompt_tokens > 1 || !cached()) dry(prompt_tokens);
  if (cached()) dry(1);  // the decode step
}

}  // namespace pylon
