// The model's forward and backward on the CPU in fp32 (DESIGN §1), every preset as its traits say
// (model/preset.h), reading parameters from and accumulating gradients into flat buffers laid out
// by the parameter table.
#pragma once

#include <cstdint>
#include <vector>

#include "model/config.h"
#include "model/params.h"
#include "model/unit_hooks.h"

namespace pylon {

class MiniLLM {
 public:
  explicit MiniLLM(const ModelConfig& config);

  const ModelConfig& config() const { return config_; }
  const ParamTable& table() const { return table_; }

  // params[i]: parameter i of table() (per-parameter pointers, see param_pointers); inputs,
  // targets: (B, T) token ids. Keeps the activations for backward() and returns the mean
  // cross-entropy over the B*T positions. With targets == nullptr only logits() are computed.
  // A unit's parameters are read only between its hooks' before_forward and after_forward.
  float forward(const std::vector<const float*>& params, const int32_t* inputs,
                const int32_t* targets, int B, int T, UnitHooks* hooks = nullptr);
  // grads[i] += d(loss_scale * Σ_positions loss) / d(parameter i), for the last forward() (which
  // must have had targets). A unit's parameters and gradients are used only between its
  // before_backward and after_backward.
  void backward(const std::vector<const float*>& params, const std::vector<float*>& grads,
                float loss_scale, UnitHooks* hooks = nullptr);
  // The same over flat buffers laid out by table().
  float forward(const float* params, const int32_t* inputs, const int32_t* targets, int B, int T,
                UnitHooks* hooks = nullptr) {
    return forward(param_pointers(table_, params), inputs, targets, B, T, hooks);
  }
  void backward(const float* params, float* grads, float loss_scale, UnitHooks* hooks = nullptr) {
    backward(param_pointers(table_, params), param_pointers(table_, grads), loss_scale, hooks);
  }

  // Bytes a (B, T) batch makes forward() and backward() keep (what resize() allocates), in 64-bit
  // with overflow checked: the memory plan reads it before anything is allocated.
  struct BatchBytes {
    int64_t activations = 0;  // residual stream, per-layer saved tensors, backward scratch
    int64_t logits = 0;       // (B, T, V) logits and (B, T) losses
  };
  static BatchBytes batch_bytes(const ModelConfig& config, int64_t B, int64_t T);

  const float* logits() const { return logits_.data(); }  // (B, T, V) after forward(no targets)
  const float* losses() const { return losses_.data(); }  // (B, T) after forward(targets)

 private:
  struct Layer {  // one block's saved activations; N = B*T rows
    std::vector<float> rstd1, h1, qkv, probs, att, x_mid, rstd2, h2, f1, f1_act;
  };
  // The head's input: the last block's output, or its final norm (x_final, rstd_final).
  const float* head_input() const;
  void resize(int B, int T);

  ModelConfig config_;
  ParamTable table_;
  int B_ = 0, T_ = 0;
  bool has_targets_ = false;
  std::vector<int32_t> inputs_, targets_;
  std::vector<float> x_;  // (L + 1, N, D) residual stream entering each block, then the head
  std::vector<float> x_final_, rstd_final_;  // final norm (N, D), (N): presets with one
  std::vector<Layer> layers_;
  std::vector<float> logits_;  // (N, V); becomes probabilities, then dlogits
  std::vector<float> losses_;  // (N)
  std::vector<float> dx_, dh_, datt_, dqkv_, df_, dact_;  // backward scratch
};

}  // namespace pylon
