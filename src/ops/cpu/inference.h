// The inference ops on the CPU (ops/inference.h): each op runs when it is called, over weights read
// in place in their stored encoding (WeightView: fp32 buffers, or f16 / int8 / int4 in a mapped
// edge file) and fp32 activations. The KV cache holds the key/value heads only: (layers,
// max_tokens, KV) for k (after RoPE) and v.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "ops/cpu/ops.h"
#include "ops/cpu/weight_view.h"
#include "ops/inference.h"

namespace pylon::cpu {

class CpuInference final : public InferenceOps {
 public:
  // weights: every parameter in table order (the views outlive this); 1-D ones f32.
  CpuInference(const InferenceSpec& spec, std::vector<WeightView> weights);

  bool begin(const int32_t* tokens, int n, int pos0, bool dry) override;
  bool finish(int first, int rows, float* out) override;
  void embedding(int n, Weight table) override;
  void rmsnorm(Act y, Act x, int n, Weight norm) override;
  void linear(Act y, Act x, int n, Weight w, Weight bias, Epilogue e) override;
  void rope(int n) override;
  void kv_append(int layer, int n) override;
  void attention(int layer, int n, bool causal) override;

 private:
  float* act(Act a);
  HeadLayout heads() const;
  int width(Act a) const;  // floats per row
  const float* f32(Weight w) const;  // a 1-D (fp32) weight's values

  InferenceSpec spec_;
  std::vector<WeightView> w_;
  const int32_t* tokens_ = nullptr;
  int pos0_ = 0;
  bool dry_ = false;
  std::vector<float> x_, h_, qkv_, att_, ffn_, tmp_, rstd_, probs_;
  std::vector<float> ffn_pre_;  // SwiGLU: [gate | up] before the activation (n, 2F)
  // (layers, max_tokens, D) each; left uninitialised, so pages are touched only as positions fill.
  std::unique_ptr<float[]> k_cache_, v_cache_;
};

}  // namespace pylon::cpu
