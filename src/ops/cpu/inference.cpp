#include "ops/cpu/inference.h"

#include <cstring>

#include "core/error.h"
#include "ops/cpu/ops.h"

namespace pylon::cpu {

CpuInference::CpuInference(const InferenceSpec& spec, std::vector<WeightView> weights)
    : spec_(spec), w_(std::move(weights)) {
  PYLON_CHECK(spec.max_tokens > 0, "context length must be positive");
  if (spec.kv_cache) {  // the key/value heads only
    const size_t n = static_cast<size_t>(spec.layers) * spec.max_tokens * spec.kv_dim();
    k_cache_ = std::make_unique_for_overwrite<float[]>(n);
    v_cache_ = std::make_unique_for_overwrite<float[]>(n);
  }
}

int CpuInference::width(Act a) const {
  switch (a) {
    case Act::qkv: return spec_.qkv_dim();
    case Act::att: return spec_.q_dim();
    case Act::ffn: return spec_.ffn_dim;
    default: return spec_.dim;
  }
}

float* CpuInference::act(Act a) {
  switch (a) {
    case Act::x: return x_.data();
    case Act::h: return h_.data();
    case Act::qkv: return qkv_.data();
    case Act::att: return att_.data();
    case Act::ffn: return ffn_.data();
  }
  return nullptr;
}

const float* CpuInference::f32(Weight w) const {
  PYLON_ASSERT(w < w_.size() && w_[w].dtype == EdgeDType::f32, "weight ", w, " is not an fp32 vector");
  return static_cast<const float*>(w_[w].values);
}

bool CpuInference::begin(const int32_t* tokens, int n, int pos0, bool dry) {
  dry_ = dry;
  if (dry) return false;  // nothing to build ahead: the ops run as they are called
  PYLON_ASSERT(n > 0 && pos0 >= 0 && pos0 + n <= spec_.max_tokens);
  tokens_ = tokens, pos0_ = pos0;
  // The activations grow to the largest forward seen (a prompt), not to the context length.
  const size_t rows = static_cast<size_t>(n), D = static_cast<size_t>(spec_.dim);
  if (x_.size() < rows * D) {
    for (auto* v : {&x_, &h_, &tmp_}) v->resize(rows * D);
    att_.resize(rows * spec_.q_dim()), qkv_.resize(rows * spec_.qkv_dim());
    ffn_.resize(rows * spec_.ffn_dim), rstd_.resize(rows);
    if (spec_.swiglu) ffn_pre_.resize(rows * 2 * spec_.ffn_dim);
  }
  return true;
}

bool CpuInference::finish(int first, int rows, float* out) {
  if (dry_) return true;
  const float* in = spec_.final_norm != kNoWeight ? h_.data() : x_.data();  // after a final norm: h
  pylon::linear(out, in + static_cast<size_t>(first) * spec_.dim, rows, w_[spec_.head], nullptr);
  return true;
}

void CpuInference::embedding(int n, Weight table) {
  const size_t D = static_cast<size_t>(spec_.dim);
  for (int i = 0; i < n; ++i) weight_rows(w_[table], tokens_[i], 1, x_.data() + i * D);
}

void CpuInference::rmsnorm(Act y, Act x, int n, Weight norm) {
  rmsnorm_forward(act(y), rstd_.data(), act(x), f32(norm), n, spec_.dim, spec_.norm_eps);
}

void CpuInference::linear(Act y, Act x, int n, Weight w, Weight bias, Epilogue e) {
  const WeightView& W = w_[w];
  const size_t count = static_cast<size_t>(n) * W.rows;
  PYLON_ASSERT(!(e.swiglu && (e.accumulate || e.silu)), "SwiGLU stands alone");
  if (e.swiglu) {  // y (n, F) = SiLU(gate)·up of [gate | up] (n, 2F)
    pylon::linear(ffn_pre_.data(), act(x), n, W, bias == kNoWeight ? nullptr : f32(bias));
    swiglu_forward(act(y), ffn_pre_.data(), n, W.rows / 2);
    return;
  }
  // The residual adds go through tmp (as wide as x): y += x·Wᵀ + b.
  float* out = e.accumulate ? tmp_.data() : act(y);
  PYLON_ASSERT(!e.accumulate || W.rows == spec_.dim, "accumulating projections write D columns");
  pylon::linear(out, act(x), n, W, bias == kNoWeight ? nullptr : f32(bias));
  if (e.silu) silu_forward(out, out, static_cast<int64_t>(count));
  if (e.accumulate) {
    float* target = act(y);
    for (size_t i = 0; i < count; ++i) target[i] += out[i];
  }
}

HeadLayout CpuInference::heads() const { return {spec_.heads, spec_.kv_heads, spec_.head_size}; }

void CpuInference::rope(int n) {
  rope_forward(qkv_.data(), 1, n, heads(), spec_.rope_theta, pos0_, spec_.rope_scaling);
}

void CpuInference::kv_append(int layer, int n) {
  PYLON_ASSERT(k_cache_, "kv_append without a KV cache");
  const size_t KV = static_cast<size_t>(spec_.kv_dim()), T = static_cast<size_t>(spec_.max_tokens);
  const size_t Q = static_cast<size_t>(spec_.q_dim()), row = static_cast<size_t>(spec_.qkv_dim());
  float* kc = k_cache_.get() + layer * T * KV;
  float* vc = v_cache_.get() + layer * T * KV;
  for (int i = 0; i < n; ++i) {
    std::memcpy(kc + (pos0_ + i) * KV, qkv_.data() + i * row + Q, sizeof(float) * KV);
    std::memcpy(vc + (pos0_ + i) * KV, qkv_.data() + i * row + Q + KV, sizeof(float) * KV);
  }
}

void CpuInference::attention(int layer, int n, bool causal) {
  if (causal) {
    PYLON_ASSERT(k_cache_, "causal attention without a KV cache");
    const size_t at = static_cast<size_t>(layer) * spec_.max_tokens * spec_.kv_dim();
    attention_cached(att_.data(), qkv_.data(), k_cache_.get() + at, v_cache_.get() + at, n, pos0_, heads());
    return;
  }
  probs_.resize(static_cast<size_t>(spec_.heads) * n * n);  // (H, n, n)
  attention_forward(att_.data(), probs_.data(), qkv_.data(), 1, n, heads(), false);
}

}  // namespace pylon::cpu
