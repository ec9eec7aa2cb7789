// The step as a story: embed, L pre-norm blocks (attention, then the MLP), [final norm,] head,
// loss; then the same in reverse for the gradients. The preset's traits choose the mask, the
// positions and the MLP; grouped-query heads, biases and a tied head come from the config.
#include "model/minillm.h"

#include <algorithm>
#include <numeric>

#include "core/checked.h"
#include "core/error.h"
#include "ops/cpu/ops.h"
#include "profile/tracer.h"

namespace pylon {

MiniLLM::MiniLLM(const ModelConfig& config) : config_(config), table_(param_table(config)) {
  config_.validate();
}

namespace {
// Element counts of the buffers resize() allocates for N = B*T rows (overflow-checked).
struct BatchSizes {
  int64_t x, final, layer_rstd, layer_d, qkv, probs, att, f1, f1_act, logits, losses, dx, datt, dqkv, df, dact;
};
BatchSizes batch_sizes(const ModelConfig& c, int64_t B, int64_t T) {
  const char* what = "the batch's activation size";
  const int64_t N = checked_mul(B, T, what), D = c.dim, H = c.heads, V = c.vocab, L = c.layers;
  const int64_t Q = c.q_dim(), QKV = c.qkv_dim(), F = c.ffn_hidden();
  const int64_t FIn = c.preset.ffn == Ffn::swiglu ? 2 * F : F;
  BatchSizes s{};
  s.x = checked_mul({L + 1, N, D}, what);
  s.final = c.preset.final_norm ? checked_mul(N, D + 1, what) : 0;
  s.layer_rstd = N, s.layer_d = checked_mul(N, D, what), s.qkv = checked_mul(N, QKV, what);
  s.probs = checked_mul({B, H, T, T}, what), s.att = checked_mul(N, Q, what);
  s.f1 = checked_mul(N, FIn, what), s.f1_act = checked_mul(N, F, what);
  s.logits = checked_mul(N, V, what), s.losses = N;
  s.dx = s.layer_d, s.datt = checked_mul(N, std::max(D, Q), what), s.dqkv = s.qkv, s.df = s.f1, s.dact = s.f1_act;
  return s;
}
}  // namespace

MiniLLM::BatchBytes MiniLLM::batch_bytes(const ModelConfig& c, int64_t B, int64_t T) {
  const char* what = "the batch's activation size";
  const BatchSizes s = batch_sizes(c, B, T);
  // Per layer: rstd1, rstd2; h1, x_mid, h2; qkv; probs; att; f1; f1_act.
  int64_t layer = 2 * s.layer_rstd;
  for (int64_t n : {3 * s.layer_d, s.qkv, s.probs, s.att, s.f1, s.f1_act}) layer = checked_add(layer, n, what);
  int64_t floats = checked_add(s.x, s.final, what);
  floats = checked_add(floats, checked_mul(layer, c.layers, what), what);
  for (int64_t n : {2 * s.dx, s.datt, s.dqkv, s.df, s.dact}) floats = checked_add(floats, n, what);
  const int64_t f = static_cast<int64_t>(sizeof(float));
  return {checked_mul(floats, f, what), checked_mul(checked_add(s.logits, s.losses, what), f, what)};
}

void MiniLLM::resize(int B, int T) {
  if (B == B_ && T == T_) return;
  B_ = B, T_ = T;
  const BatchSizes s = batch_sizes(config_, B, T);
  auto n = [](int64_t count) { return static_cast<size_t>(count); };
  x_.assign(n(s.x), 0.f);
  if (config_.preset.final_norm) x_final_.resize(n(s.layer_d)), rstd_final_.resize(n(s.layer_rstd));
  layers_.assign(static_cast<size_t>(config_.layers), Layer{});
  for (auto& l : layers_) {
    l.rstd1.resize(n(s.layer_rstd)), l.h1.resize(n(s.layer_d)), l.qkv.resize(n(s.qkv));
    l.probs.resize(n(s.probs)), l.att.resize(n(s.att)), l.x_mid.resize(n(s.layer_d));
    l.rstd2.resize(n(s.layer_rstd)), l.h2.resize(n(s.layer_d)), l.f1.resize(n(s.f1)), l.f1_act.resize(n(s.f1_act));
  }
  logits_.resize(n(s.logits)), losses_.resize(n(s.losses));
  dx_.resize(n(s.dx)), dh_.resize(n(s.dx)), datt_.resize(n(s.datt)), dqkv_.resize(n(s.dqkv));
  df_.resize(n(s.df)), dact_.resize(n(s.dact));
}

const float* MiniLLM::head_input() const {
  const size_t N = static_cast<size_t>(B_) * T_;
  return config_.preset.final_norm ? x_final_.data() : x_.data() + static_cast<size_t>(config_.layers) * N * config_.dim;
}

float MiniLLM::forward(const std::vector<const float*>& P, const int32_t* inputs, const int32_t* targets, int B,
                       int T, UnitHooks* hooks) {
  PYLON_ASSERT(B > 0 && T > 0);
  PYLON_RANGE("model", "forward");
  resize(B, T);
  PYLON_ASSERT(P.size() == table_.params.size());
  const int N = B * T, D = config_.dim, V = config_.vocab, Q = config_.q_dim(), QKV = config_.qkv_dim();
  const int F = config_.ffn_hidden(), FIn = config_.preset.ffn == Ffn::swiglu ? 2 * F : F;
  const HeadLayout heads{config_.heads, config_.kv_head_count(), config_.head_dim()};
  const bool causal = config_.preset.mask == Mask::causal;
  const bool rope = config_.preset.positions == Positions::rope;
  inputs_.assign(inputs, inputs + N);
  has_targets_ = targets != nullptr;
  if (has_targets_) targets_.assign(targets, targets + N);

  for (int n = 0; n < N; ++n)
    PYLON_CHECK(inputs[n] >= 0 && inputs[n] < V, "token id ", inputs[n], " is outside the vocab ", V);
  float* x = x_.data();
  if (hooks) hooks->before_forward(-1);
  cpu::embedding_forward(x, inputs, P[table_.embed], N, D);
  for (int l = 0; l < config_.layers; ++l) {
    profile::Range layer_range("layer", "block_forward");
    if (layer_range.on()) layer_range.set_int("layer", l);
    if (hooks) hooks->before_forward(l);
    const auto W = block_params(table_, P, l);
    Layer& a = layers_[l];
    float* x_out = x + static_cast<size_t>(N) * D;
    // h = RMSNorm1(x); qkv = h·W_qkvᵀ [+ b]; [RoPE]; attention; x_mid = x + out(att) [+ b]
    cpu::rmsnorm_forward(a.h1.data(), a.rstd1.data(), x, W[kNorm1], N, D, config_.norm_eps);
    cpu::linear_forward(a.qkv.data(), a.h1.data(), W[kQkv], W[kQkvBias], N, D, QKV);
    if (rope) cpu::rope_forward(a.qkv.data(), B, T, heads, config_.rope_theta, 0, config_.rope_scaling);
    cpu::attention_forward(a.att.data(), a.probs.data(), a.qkv.data(), B, T, heads, causal);
    cpu::linear_forward(a.x_mid.data(), a.att.data(), W[kOut], W[kOutBias], N, Q, D);
    for (size_t i = 0; i < a.x_mid.size(); ++i) a.x_mid[i] += x[i];
    // x_out = x_mid + W_out·act(W_in·RMSNorm2(x_mid)), act SiLU or SwiGLU
    cpu::rmsnorm_forward(a.h2.data(), a.rstd2.data(), a.x_mid.data(), W[kNorm2], N, D, config_.norm_eps);
    cpu::linear_forward(a.f1.data(), a.h2.data(), W[kFfnIn], nullptr, N, D, FIn);
    if (config_.preset.ffn == Ffn::swiglu)
      cpu::swiglu_forward(a.f1_act.data(), a.f1.data(), N, F);
    else
      cpu::silu_forward(a.f1_act.data(), a.f1.data(), static_cast<int64_t>(a.f1.size()));
    cpu::linear_forward(x_out, a.f1_act.data(), W[kFfnOut], nullptr, N, F, D);
    for (size_t i = 0; i < static_cast<size_t>(N) * D; ++i) x_out[i] += a.x_mid[i];
    x = x_out;
    if (hooks) hooks->after_forward(l);
  }
  if (config_.preset.final_norm)
    cpu::rmsnorm_forward(x_final_.data(), rstd_final_.data(), x, P[table_.final_norm], N, D, config_.norm_eps);
  cpu::linear_forward(logits_.data(), head_input(), P[table_.head_or_embed()], nullptr, N, D, V);
  if (hooks) hooks->after_forward(-1);
  if (!has_targets_) return 0.f;
  for (int n = 0; n < N; ++n)
    PYLON_CHECK(targets[n] >= 0 && targets[n] < V, "target id ", targets[n], " is outside the vocab ", V);
  cpu::cross_entropy_forward(losses_.data(), logits_.data(), logits_.data(), targets, N, V);
  double sum = std::accumulate(losses_.begin(), losses_.end(), 0.0);
  return static_cast<float>(sum / N);
}

void MiniLLM::backward(const std::vector<const float*>& P, const std::vector<float*>& G, float loss_scale,
                       UnitHooks* hooks) {
  PYLON_ASSERT(has_targets_, "backward() needs a forward() with targets");
  PYLON_RANGE("model", "backward");
  const int B = B_, T = T_, N = B * T, D = config_.dim, V = config_.vocab, Q = config_.q_dim();
  const int QKV = config_.qkv_dim(), F = config_.ffn_hidden(), FIn = config_.preset.ffn == Ffn::swiglu ? 2 * F : F;
  const HeadLayout heads{config_.heads, config_.kv_head_count(), config_.head_dim()};
  PYLON_ASSERT(P.size() == table_.params.size() && G.size() == P.size());
  // dlogits (N, V) in place of the probabilities; d(head input) = dlogits·W_head, dW_head +=
  // dlogitsᵀ·(head input) (the embedding's gradient when tied); then through the final norm.
  cpu::cross_entropy_backward(logits_.data(), logits_.data(), targets_.data(), N, V, loss_scale);
  const float* x_last = x_.data() + static_cast<size_t>(config_.layers) * N * D;
  if (hooks) hooks->before_backward(-1);
  const int head = table_.head_or_embed();
  if (config_.preset.final_norm) {
    cpu::linear_backward(dh_.data(), G[head], nullptr, logits_.data(), head_input(), P[head], N, D, V);
    cpu::rmsnorm_backward(dx_.data(), G[table_.final_norm], dh_.data(), x_last, P[table_.final_norm],
                          rstd_final_.data(), N, D);
  } else {
    cpu::linear_backward(dx_.data(), G[head], nullptr, logits_.data(), x_last, P[head], N, D, V);
  }
  for (int l = config_.layers - 1; l >= 0; --l) {
    profile::Range layer_range("layer", "block_backward");
    if (layer_range.on()) layer_range.set_int("layer", l);
    if (hooks) hooks->before_backward(l);
    const auto W = block_params(table_, P, l);
    const auto dW = block_params(table_, G, l);
    Layer& a = layers_[l];
    const float* x_in = x_.data() + static_cast<size_t>(l) * N * D;
    // MLP branch: dx flows to x_mid directly and through W_out, the activation, W_in, RMSNorm2.
    cpu::linear_backward(dact_.data(), dW[kFfnOut], nullptr, dx_.data(), a.f1_act.data(), W[kFfnOut], N, F, D);
    if (config_.preset.ffn == Ffn::swiglu)
      cpu::swiglu_backward(df_.data(), dact_.data(), a.f1.data(), N, F);
    else
      cpu::silu_backward(df_.data(), dact_.data(), a.f1.data(), static_cast<int64_t>(df_.size()));
    cpu::linear_backward(dh_.data(), dW[kFfnIn], nullptr, df_.data(), a.h2.data(), W[kFfnIn], N, D, FIn);
    cpu::rmsnorm_backward(datt_.data(), dW[kNorm2], dh_.data(), a.x_mid.data(), W[kNorm2], a.rstd2.data(), N, D);
    for (size_t i = 0; i < dx_.size(); ++i) dx_[i] += datt_[i];  // dx now = d(x_mid)
    // Attention branch: through out, attention, RoPE, qkv, RMSNorm1.
    cpu::linear_backward(datt_.data(), dW[kOut], dW[kOutBias], dx_.data(), a.att.data(), W[kOut], N, Q, D);
    cpu::attention_backward(dqkv_.data(), datt_.data(), a.qkv.data(), a.probs.data(), B, T, heads);
    if (config_.preset.positions == Positions::rope)
      cpu::rope_backward(dqkv_.data(), B, T, heads, config_.rope_theta, 0, config_.rope_scaling);
    cpu::linear_backward(dh_.data(), dW[kQkv], dW[kQkvBias], dqkv_.data(), a.h1.data(), W[kQkv], N, D, QKV);
    cpu::rmsnorm_backward(datt_.data(), dW[kNorm1], dh_.data(), x_in, W[kNorm1], a.rstd1.data(), N, D);
    for (size_t i = 0; i < dx_.size(); ++i) dx_[i] += datt_[i];  // dx now = d(x_in)
    if (hooks) hooks->after_backward(l);
  }
  cpu::embedding_backward(G[table_.embed], dx_.data(), inputs_.data(), N, D);
  if (hooks) hooks->after_backward(-1);
  has_targets_ = false;  // the probabilities became gradients: a second backward would be wrong
}

}  // namespace pylon
