#include "model/decoder.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "core/error.h"
#include "ops/cpu/ops.h"

namespace pylon {

Decoder::Decoder(const ModelConfig& config, const float* params, int max_tokens)
    : config_(config), table_(param_table(config)), params_(params), max_tokens_(max_tokens),
      full_(config), logits_(static_cast<size_t>(config.vocab)) {
  PYLON_CHECK(max_tokens > 0, "context length must be positive");
  if (config.causal()) {
    const size_t n = static_cast<size_t>(config.layers) * max_tokens * config.dim;
    k_cache_.resize(n), v_cache_.resize(n);
  }
}

const float* Decoder::feed(const int32_t* tokens, int n) {
  PYLON_CHECK(n > 0, "nothing to feed");
  PYLON_CHECK(pos_ + n <= max_tokens_, "context full: ", pos_ + n, " tokens > ", max_tokens_);
  for (int i = 0; i < n; ++i)
    PYLON_CHECK(tokens[i] >= 0 && tokens[i] < config_.vocab, "token id ", tokens[i],
                " is outside the vocab ", config_.vocab);
  if (config_.causal()) return feed_causal(tokens, n);
  history_.insert(history_.end(), tokens, tokens + n);
  pos_ += n;
  full_.forward(params_, history_.data(), nullptr, 1, pos_);
  const float* last = full_.logits() + static_cast<size_t>(pos_ - 1) * config_.vocab;
  std::copy(last, last + config_.vocab, logits_.begin());
  return logits_.data();
}

const float* Decoder::feed_causal(const int32_t* tokens, int n) {
  const int D = config_.dim, H = config_.heads, hd = D / H, V = config_.vocab;
  const float* P = params_;
  const size_t nd = static_cast<size_t>(n) * D;
  std::vector<float> x(nd), h(nd), rstd(n), qkv(nd * 3), att(nd), f1(nd * 4), tmp(nd);
  cpu::embedding_forward(x.data(), tokens, P + table_.params.front().offset, n, D);
  const float scale = 1.f / std::sqrt(static_cast<float>(hd));
  for (int l = 0; l < config_.layers; ++l) {
    const BlockOffsets o = block_offsets(table_, l);
    float* kc = k_cache_.data() + static_cast<size_t>(l) * max_tokens_ * D;
    float* vc = v_cache_.data() + static_cast<size_t>(l) * max_tokens_ * D;
    cpu::rmsnorm_forward(h.data(), rstd.data(), x.data(), P + o.norm1, n, D, config_.norm_eps);
    cpu::linear_forward(qkv.data(), h.data(), P + o.in_proj_w, P + o.in_proj_b, n, D, 3 * D);
    cpu::rope_forward(qkv.data(), 1, n, D, H, config_.rope_theta, pos_);
    for (int i = 0; i < n; ++i) {
      std::memcpy(kc + static_cast<size_t>(pos_ + i) * D, &qkv[static_cast<size_t>(i) * 3 * D + D],
                  sizeof(float) * D);
      std::memcpy(vc + static_cast<size_t>(pos_ + i) * D,
                  &qkv[static_cast<size_t>(i) * 3 * D + 2 * D], sizeof(float) * D);
    }
#pragma omp parallel for collapse(2) schedule(static)
    for (int i = 0; i < n; ++i) {
      for (int hh = 0; hh < H; ++hh) {
        const int keys = pos_ + i + 1;  // causal: itself and everything before
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
    cpu::linear_forward(tmp.data(), att.data(), P + o.out_proj_w, P + o.out_proj_b, n, D, D);
    for (size_t i = 0; i < nd; ++i) x[i] += tmp[i];
    cpu::rmsnorm_forward(h.data(), rstd.data(), x.data(), P + o.norm2, n, D, config_.norm_eps);
    cpu::linear_forward(f1.data(), h.data(), P + o.ffn1, nullptr, n, D, 4 * D);
    cpu::silu_forward(f1.data(), f1.data(), static_cast<int64_t>(f1.size()));
    cpu::linear_forward(tmp.data(), f1.data(), P + o.ffn2, nullptr, n, 4 * D, D);
    for (size_t i = 0; i < nd; ++i) x[i] += tmp[i];
  }
  pos_ += n;
  const float* last = x.data() + static_cast<size_t>(n - 1) * D;
  cpu::linear_forward(logits_.data(), last, P + table_.params.back().offset, nullptr, 1, D, V);
  return logits_.data();
}

}  // namespace pylon
