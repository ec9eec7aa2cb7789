// The inference op interface: what a decoder's forward asks of a backend (embedding, RMSNorm,
// projections over weights in any stored encoding, rotary embeddings, the KV cache, attention, the
// head), implemented by the CPU (ops/cpu/inference.h) and Vulkan (ops/vulkan/inference.h). The
// block recipe is written once over it (model/recipe.h).
//
// A forward: begin() with the tokens and their first position, the ops (run at once on the CPU,
// recorded on Vulkan), then finish() computes the head over some rows and delivers the logits.
// Activations are fp32 rows of the backend's own buffers (Act), each holding up to max_tokens rows;
// weights are named by their index in the model's parameter table (the backend was given them in
// that order). Every op here has a plain form; the fused forms (norm_linear, attention_inputs,
// decode_blocks) compose the plain ones unless the backend fuses them (try_*), and
// set_fusion(false) makes every backend run the plain forms: the fused paths' test oracle.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/rope_scaling.h"

namespace pylon {

using Weight = size_t;  // a parameter's index in the table order the backend was given
constexpr Weight kNoWeight = static_cast<Weight>(-1);

// One block's weights (Q = heads·head_dim, KV = kv_heads·head_dim, F = the MLP's width): norms
// (D), qkv (Q + 2KV, D) = [W_q; W_k; W_v] and its bias (Q + 2KV; kNoWeight: none), out (D, Q) and
// its bias (D; kNoWeight: none), the MLP's up (F, D), or [gate; up] (2F, D) for SwiGLU, and down
// (D, F) projections.
struct BlockWeights {
  Weight norm1, qkv, qkv_bias, out, out_bias, norm2, ffn_up, ffn_down;
};

// What a backend needs to know of the model: its sizes, traits and where its weights are.
struct InferenceSpec {
  int vocab = 0, dim = 0, heads = 0, layers = 0;
  int kv_heads = 0, head_size = 0, ffn_dim = 0;  // key/value heads, head size, the MLP's width
  int max_tokens = 0;  // context length: rows of every activation and of the KV cache
  float norm_eps = 0, rope_theta = 0;
  RopeScaling rope_scaling;  // of the rotation's frequencies (core/rope_scaling.h)
  bool kv_cache = false;  // a causal model: decoding appends to a KV cache
  bool rotary = false;    // q and k are rotated (rope)
  bool swiglu = false;    // the MLP is SwiGLU (its up projection is [gate; up]), else SiLU
  Weight embed = kNoWeight, head = kNoWeight;  // the head may be the embedding (tied)
  Weight final_norm = kNoWeight;               // an RMSNorm before the head (then into Act::h)
  std::vector<BlockWeights> blocks;  // (layers)
  int head_dim() const { return head_size; }
  int q_dim() const { return heads * head_size; }
  int kv_dim() const { return kv_heads * head_size; }
  int qkv_dim() const { return q_dim() + 2 * kv_dim(); }
};

// The activation buffers, (max_tokens, width) each: x the residual stream (D), h a normalised copy
// (D; the head's input where the model has a final norm), qkv the attention's inputs [q | k | v]
// (Q + 2KV), att its output (Q), ffn the MLP's hidden (F).
enum class Act { x, h, qkv, att, ffn };

// What a projection does with its result: y = act(x·Wᵀ + b), added into y when accumulating; act
// SiLU, or SwiGLU: y (n, rows/2) = SiLU(gate)·up of the result's halves [gate | up].
struct Epilogue {
  bool accumulate = false;
  bool silu = false;
  bool swiglu = false;
};

class InferenceOps {
 public:
  virtual ~InferenceOps() = default;

  // Starts a forward over n tokens at positions pos0 .. pos0 + n - 1. Returns false when the
  // backend replays a recording of this forward, so the ops need not be issued again. dry: only
  // record (pipelines built, nothing run; tokens may be null).
  virtual bool begin(const int32_t* tokens, int n, int pos0, bool dry = false) = 0;
  // The head over rows [first, first + rows) of its input (x, or h after a final norm) into out
  // (rows, vocab), after running everything begun. Returns false when a fused path gave up and the forward must be issued again (the backend
  // then runs the plain forms). dry: records the head (one row), runs nothing, out unused.
  virtual bool finish(int first, int rows, float* out) = 0;

  // --- the plain ops; n rows of each activation, from row 0
  // x = embed[tokens]
  virtual void embedding(int n, Weight table) = 0;
  // y = x / sqrt(mean(x²) + eps) · norm, per row
  virtual void rmsnorm(Act y, Act x, int n, Weight norm) = 0;
  // y (n, w.rows) = act(x (n, w.cols) · wᵀ [+ bias]) [+ y]
  virtual void linear(Act y, Act x, int n, Weight w, Weight bias, Epilogue e) = 0;
  // q and k of qkv rotated at their positions (rotate-half, theta = rope_theta)
  virtual void rope(int n) = 0;
  // k and v of qkv to rows pos0 .. of the layer's KV cache, (max_tokens, KV) each
  virtual void kv_append(int layer, int n) = 0;
  // att = softmax(q·kᵀ / sqrt(hd)) · v per head; causal: query i against the cache's keys
  // 0 .. pos0 + i; else against the n keys of qkv.
  virtual void attention(int layer, int n, bool causal) = 0;

  // --- the fused forms
  // y = act(rmsnorm(x) · norm · wᵀ [+ bias]) (the norm into h when run plain)
  void norm_linear(Act y, Act x, int n, Weight norm, Weight w, Weight bias, Epilogue e) {
    if (fusion_ && try_norm_linear(y, x, n, norm, w, bias, e)) return;
    rmsnorm(Act::h, x, n, norm);
    linear(y, Act::h, n, w, bias, e);
  }
  // qkv = rmsnorm(x) · norm · wᵀ + bias, then [rope], then [the KV append of layer]
  void attention_inputs(int layer, int n, Weight norm, Weight w, Weight bias, bool rotate, bool append) {
    if (fusion_ && try_attention_inputs(layer, n, norm, w, bias, rotate, append)) return;
    norm_linear(Act::qkv, Act::x, n, norm, w, bias, {});
    if (rotate) rope(n);
    if (append) kv_append(layer, n);
  }
  // The embedding and every block of a one-token causal forward in the backend's own kernel (x
  // then holds the last block's output); false: the recipe issues them.
  bool decode_blocks(int n) { return fusion_ && try_decode_blocks(n); }

  void set_fusion(bool on) { fusion_ = on; }
  bool fusion() const { return fusion_; }

 protected:
  // A backend's fused kernels: true when it did the work, false to fall back on the plain forms.
  virtual bool try_norm_linear(Act, Act, int, Weight, Weight, Weight, Epilogue) { return false; }
  virtual bool try_attention_inputs(int, int, Weight, Weight, Weight, bool, bool) { return false; }
  virtual bool try_decode_blocks(int) { return false; }

 private:
  bool fusion_ = true;
};

}  // namespace pylon
