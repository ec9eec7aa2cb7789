// The MiniLLM step as a story: embed, L pre-norm blocks (attention, then SiLU MLP), head, loss;
// then the same in reverse for the gradients.
#include "model/minillm.h"

#include <algorithm>
#include <numeric>

#include "core/error.h"
#include "ops/cpu/ops.h"
#include "profile/tracer.h"

namespace pylon {

MiniLLM::MiniLLM(const ModelConfig& config) : config_(config), table_(param_table(config)) {
  config_.validate();
}

void MiniLLM::resize(int B, int T) {
  if (B == B_ && T == T_) return;
  B_ = B, T_ = T;
  const size_t N = static_cast<size_t>(B) * T, D = config_.dim, H = config_.heads;
  const size_t V = config_.vocab, L = config_.layers;
  x_.assign((L + 1) * N * D, 0.f);
  layers_.assign(L, Layer{});
  for (auto& l : layers_) {
    l.rstd1.resize(N), l.h1.resize(N * D), l.qkv.resize(N * 3 * D);
    l.probs.resize(B * H * T * T), l.att.resize(N * D), l.x_mid.resize(N * D);
    l.rstd2.resize(N), l.h2.resize(N * D), l.f1.resize(N * 4 * D), l.f1_act.resize(N * 4 * D);
  }
  logits_.resize(N * V), losses_.resize(N);
  dx_.resize(N * D), dh_.resize(N * D), datt_.resize(N * D), dqkv_.resize(N * 3 * D);
  df_.resize(N * 4 * D);
}

float MiniLLM::forward(const std::vector<const float*>& P, const int32_t* inputs,
                       const int32_t* targets, int B, int T, UnitHooks* hooks) {
  PYLON_ASSERT(B > 0 && T > 0);
  PYLON_RANGE("model", "forward");
  resize(B, T);
  PYLON_ASSERT(P.size() == table_.params.size());
  const int N = B * T, D = config_.dim, H = config_.heads, V = config_.vocab;
  const bool causal = config_.preset.mask == Mask::causal;
  const bool rope = config_.preset.positions == Positions::rope;
  inputs_.assign(inputs, inputs + N);
  has_targets_ = targets != nullptr;
  if (has_targets_) targets_.assign(targets, targets + N);

  for (int n = 0; n < N; ++n)
    PYLON_CHECK(inputs[n] >= 0 && inputs[n] < V, "token id ", inputs[n], " is outside the vocab ",
                V);
  float* x = x_.data();
  if (hooks) hooks->before_forward(-1);
  cpu::embedding_forward(x, inputs, P.front(), N, D);
  for (int l = 0; l < config_.layers; ++l) {
    profile::Range layer_range("layer", "block_forward");
    if (layer_range.on()) layer_range.set_int("layer", l);
    if (hooks) hooks->before_forward(l);
    const float* const* W = P.data() + block_first_param(l);
    Layer& a = layers_[l];
    float* x_out = x + static_cast<size_t>(N) * D;
    // h = RMSNorm1(x); qkv = h·W_inᵀ + b_in; [RoPE]; attention; x_mid = x + out_proj(att)
    cpu::rmsnorm_forward(a.h1.data(), a.rstd1.data(), x, W[kNorm1], N, D, config_.norm_eps);
    cpu::linear_forward(a.qkv.data(), a.h1.data(), W[kInProjW], W[kInProjB], N, D, 3 * D);
    if (rope) cpu::rope_forward(a.qkv.data(), B, T, D, H, config_.rope_theta);
    cpu::attention_forward(a.att.data(), a.probs.data(), a.qkv.data(), B, T, D, H, causal);
    cpu::linear_forward(a.x_mid.data(), a.att.data(), W[kOutProjW], W[kOutProjB], N, D, D);
    for (size_t i = 0; i < a.x_mid.size(); ++i) a.x_mid[i] += x[i];
    // x_out = x_mid + W2·SiLU(W1·RMSNorm2(x_mid))
    cpu::rmsnorm_forward(a.h2.data(), a.rstd2.data(), a.x_mid.data(), W[kNorm2], N, D,
                         config_.norm_eps);
    cpu::linear_forward(a.f1.data(), a.h2.data(), W[kFfn1], nullptr, N, D, 4 * D);
    cpu::silu_forward(a.f1_act.data(), a.f1.data(), static_cast<int64_t>(a.f1.size()));
    cpu::linear_forward(x_out, a.f1_act.data(), W[kFfn2], nullptr, N, 4 * D, D);
    for (size_t i = 0; i < static_cast<size_t>(N) * D; ++i) x_out[i] += a.x_mid[i];
    x = x_out;
    if (hooks) hooks->after_forward(l);
  }
  cpu::linear_forward(logits_.data(), x, P.back(), nullptr, N, D, V);
  if (hooks) hooks->after_forward(-1);
  if (!has_targets_) return 0.f;
  for (int n = 0; n < N; ++n)
    PYLON_CHECK(targets[n] >= 0 && targets[n] < V, "target id ", targets[n], " is outside the vocab ",
                V);
  cpu::cross_entropy_forward(losses_.data(), logits_.data(), logits_.data(), targets, N, V);
  double sum = std::accumulate(losses_.begin(), losses_.end(), 0.0);
  return static_cast<float>(sum / N);
}

void MiniLLM::backward(const std::vector<const float*>& P, const std::vector<float*>& G,
                       float loss_scale, UnitHooks* hooks) {
  PYLON_ASSERT(has_targets_, "backward() needs a forward() with targets");
  PYLON_RANGE("model", "backward");
  const int B = B_, T = T_, N = B * T, D = config_.dim, H = config_.heads, V = config_.vocab;
  PYLON_ASSERT(P.size() == table_.params.size() && G.size() == P.size());
  // dlogits (N, V) in place of the probabilities; dx = dlogits·W_head, dW_head += dlogitsᵀ·x_L.
  cpu::cross_entropy_backward(logits_.data(), logits_.data(), targets_.data(), N, V, loss_scale);
  const float* x_last = x_.data() + static_cast<size_t>(config_.layers) * N * D;
  if (hooks) hooks->before_backward(-1);
  cpu::linear_backward(dx_.data(), G.back(), nullptr, logits_.data(), x_last, P.back(), N, D, V);
  for (int l = config_.layers - 1; l >= 0; --l) {
    profile::Range layer_range("layer", "block_backward");
    if (layer_range.on()) layer_range.set_int("layer", l);
    if (hooks) hooks->before_backward(l);
    const float* const* W = P.data() + block_first_param(l);
    float* const* dW = G.data() + block_first_param(l);
    Layer& a = layers_[l];
    const float* x_in = x_.data() + static_cast<size_t>(l) * N * D;
    // MLP branch: dx flows to x_mid directly and through W2, SiLU, W1, RMSNorm2.
    cpu::linear_backward(df_.data(), dW[kFfn2], nullptr, dx_.data(), a.f1_act.data(),
                         W[kFfn2], N, 4 * D, D);
    cpu::silu_backward(df_.data(), df_.data(), a.f1.data(), static_cast<int64_t>(df_.size()));
    cpu::linear_backward(dh_.data(), dW[kFfn1], nullptr, df_.data(), a.h2.data(), W[kFfn1],
                         N, D, 4 * D);
    cpu::rmsnorm_backward(datt_.data(), dW[kNorm2], dh_.data(), a.x_mid.data(), W[kNorm2],
                          a.rstd2.data(), N, D);
    for (size_t i = 0; i < dx_.size(); ++i) dx_[i] += datt_[i];  // dx now = d(x_mid)
    // Attention branch: through out_proj, attention, RoPE, in_proj, RMSNorm1.
    cpu::linear_backward(datt_.data(), dW[kOutProjW], dW[kOutProjB], dx_.data(),
                         a.att.data(), W[kOutProjW], N, D, D);
    cpu::attention_backward(dqkv_.data(), datt_.data(), a.qkv.data(), a.probs.data(), B, T, D, H);
    if (config_.preset.positions == Positions::rope)
      cpu::rope_backward(dqkv_.data(), B, T, D, H, config_.rope_theta);
    cpu::linear_backward(dh_.data(), dW[kInProjW], dW[kInProjB], dqkv_.data(),
                         a.h1.data(), W[kInProjW], N, D, 3 * D);
    cpu::rmsnorm_backward(datt_.data(), dW[kNorm1], dh_.data(), x_in, W[kNorm1],
                          a.rstd1.data(), N, D);
    for (size_t i = 0; i < dx_.size(); ++i) dx_[i] += datt_[i];  // dx now = d(x_in)
    if (hooks) hooks->after_backward(l);
  }
  cpu::embedding_backward(G.front(), dx_.data(), inputs_.data(), N, D);
  if (hooks) hooks->after_backward(-1);
  has_targets_ = false;  // the probabilities became gradients: a second backward would be wrong
}

}  // namespace pylon
