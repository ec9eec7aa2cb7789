#include "model/decoder.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "core/error.h"
#include "model/edge_weights.h"
#include "ops/cpu/ops.h"

namespace pylon {

Decoder::Decoder(const ModelConfig& config, const float* params, int max_tokens)
    : config_(config), table_(param_table(config)) {
  for (const ParamInfo& p : table_.params)
    w_.push_back(p.shape.size() == 2 ? f32_view(params + p.offset, p.shape[0], p.shape[1])
                                     : f32_view(params + p.offset, 1, p.numel));
  init(max_tokens);
}

Decoder::Decoder(const EdgeModel& model, int max_tokens)
    : config_(model.config), table_(param_table(config_)) {
  const EdgeFile& file = model.file;
  int64_t small = 0;
  for (const ParamInfo& p : table_.params)
    if (p.shape.size() != 2) small += p.numel;
  small_.resize(static_cast<size_t>(small));
  float* next = small_.data();
  for (const ParamInfo& p : table_.params) {
    const EdgeTensor* t = file.find(p.name);
    PYLON_CHECK(t && t->shape == p.shape, file.path(), ": tensor ", p.name, " does not fit the model");
    if (p.shape.size() == 2) {
      w_.push_back(edge_weight_view(file, *t));
    } else {
      decode_edge_tensor(file, *t, next);
      w_.push_back(f32_view(next, 1, p.numel));
      next += p.numel;
    }
  }
  init(max_tokens);
}

void Decoder::init(int max_tokens) {
  PYLON_CHECK(max_tokens > 0, "context length must be positive");
  max_tokens_ = max_tokens;
  logits_.resize(static_cast<size_t>(config_.vocab));
  if (config_.preset.mask == Mask::causal) {
    const size_t n = static_cast<size_t>(config_.layers) * max_tokens * config_.dim;
    k_cache_ = std::make_unique_for_overwrite<float[]>(n);
    v_cache_ = std::make_unique_for_overwrite<float[]>(n);
  }
}

void Decoder::check_tokens(const int32_t* tokens, int n) const {
  for (int i = 0; i < n; ++i)
    PYLON_CHECK(tokens[i] >= 0 && tokens[i] < config_.vocab, "token id ", tokens[i],
                " is outside the vocab ", config_.vocab);
}

void Decoder::reset() {
  pos_ = 0;
  history_.clear();
}

void Decoder::embed(const int32_t* tokens, int n, float* x) const {
  const int D = config_.dim;
  for (int i = 0; i < n; ++i) weight_rows(w_.front(), tokens[i], 1, x + static_cast<size_t>(i) * D);
}

const float* Decoder::feed(const int32_t* tokens, int n) {
  PYLON_CHECK(n > 0, "nothing to feed");
  PYLON_CHECK(pos_ + n <= max_tokens_, "context full: ", pos_ + n, " tokens > ", max_tokens_);
  check_tokens(tokens, n);
  const int D = config_.dim;
  std::vector<float> x;
  const bool cached = config_.preset.mask == Mask::causal;
  if (cached) {
    x.resize(static_cast<size_t>(n) * D);
    embed(tokens, n, x.data());
    blocks(x.data(), n, pos_);
  } else {
    history_.insert(history_.end(), tokens, tokens + n);
    n = static_cast<int>(history_.size());
    x.resize(static_cast<size_t>(n) * D);
    embed(history_.data(), n, x.data());
    blocks(x.data(), n, 0);
  }
  pos_ = cached ? pos_ + n : n;
  linear(logits_.data(), x.data() + static_cast<size_t>(n - 1) * D, 1, w_.back(), nullptr);
  return logits_.data();
}

void Decoder::score(const int32_t* tokens, int n, float* logits) {
  PYLON_CHECK(n > 0 && n <= max_tokens_, "row of ", n, " tokens for a context of ", max_tokens_);
  check_tokens(tokens, n);
  reset();
  std::vector<float> x(static_cast<size_t>(n) * config_.dim);
  embed(tokens, n, x.data());
  blocks(x.data(), n, 0);
  linear(logits, x.data(), n, w_.back(), nullptr);
}

void Decoder::blocks(float* x, int n, int pos0) {
  const int D = config_.dim, H = config_.heads, hd = D / H;
  const size_t nd = static_cast<size_t>(n) * D;
  std::vector<float> h(nd), rstd(n), qkv(nd * 3), att(nd), f1(nd * 4), tmp(nd);
  const bool cached = config_.preset.mask == Mask::causal;
  std::vector<float> probs(cached ? 0 : static_cast<size_t>(H) * n * n);  // bidirectional: (H, n, n)
  const float scale = 1.f / std::sqrt(static_cast<float>(hd));
  for (int l = 0; l < config_.layers; ++l) {
    const size_t b = block_first_param(l);
    cpu::rmsnorm_forward(h.data(), rstd.data(), x, vec(b + kNorm1), n, D, config_.norm_eps);
    linear(qkv.data(), h.data(), n, w_[b + kInProjW], vec(b + kInProjB));  // (n, 3*D)
    if (cached) {
      float* kc = k_cache_.get() + static_cast<size_t>(l) * max_tokens_ * D;
      float* vc = v_cache_.get() + static_cast<size_t>(l) * max_tokens_ * D;
      if (config_.preset.positions == Positions::rope)
        cpu::rope_forward(qkv.data(), 1, n, D, H, config_.rope_theta, pos0);
      for (int i = 0; i < n; ++i) {
        std::memcpy(kc + static_cast<size_t>(pos0 + i) * D, &qkv[static_cast<size_t>(i) * 3 * D + D],
                    sizeof(float) * D);
        std::memcpy(vc + static_cast<size_t>(pos0 + i) * D,
                    &qkv[static_cast<size_t>(i) * 3 * D + 2 * D], sizeof(float) * D);
      }
#pragma omp parallel for collapse(2) schedule(static)
      for (int i = 0; i < n; ++i) {
        for (int hh = 0; hh < H; ++hh) {
          const int keys = pos0 + i + 1;  // causal: itself and everything before
          const float* q = &qkv[static_cast<size_t>(i) * 3 * D + static_cast<size_t>(hh) * hd];
          std::vector<float> s(static_cast<size_t>(keys));
          float mx = -std::numeric_limits<float>::infinity();
          for (int j = 0; j < keys; ++j) {
            const float* k = kc + static_cast<size_t>(j) * D + static_cast<size_t>(hh) * hd;
            float dot = 0;
            for (int c = 0; c < hd; ++c) dot += q[c] * k[c];
            s[j] = dot * scale;
            mx = std::max(mx, s[j]);
          }
          float sum = 0;
          for (auto& e : s) sum += (e = std::exp(e - mx));
          float* out = &att[static_cast<size_t>(i) * D + static_cast<size_t>(hh) * hd];
          std::fill(out, out + hd, 0.f);
          for (int j = 0; j < keys; ++j) {
            const float* v = vc + static_cast<size_t>(j) * D + static_cast<size_t>(hh) * hd;
            const float p = s[j] / sum;
            for (int c = 0; c < hd; ++c) out[c] += p * v[c];
          }
        }
      }
    } else {
      if (config_.preset.positions == Positions::rope)
        cpu::rope_forward(qkv.data(), 1, n, D, H, config_.rope_theta, 0);
      cpu::attention_forward(att.data(), probs.data(), qkv.data(), 1, n, D, H, false);
    }
    linear(tmp.data(), att.data(), n, w_[b + kOutProjW], vec(b + kOutProjB));
    for (size_t i = 0; i < nd; ++i) x[i] += tmp[i];
    cpu::rmsnorm_forward(h.data(), rstd.data(), x, vec(b + kNorm2), n, D, config_.norm_eps);
    linear(f1.data(), h.data(), n, w_[b + kFfn1], nullptr);  // (n, 4*D)
    cpu::silu_forward(f1.data(), f1.data(), static_cast<int64_t>(f1.size()));
    linear(tmp.data(), f1.data(), n, w_[b + kFfn2], nullptr);
    for (size_t i = 0; i < nd; ++i) x[i] += tmp[i];
  }
}

}  // namespace pylon
