// Where the CUDA model (model/cuda/minillm_cuda.h) keeps its activations: the byte offset of every
// activation, gradient-of-activation and scratch buffer it carves from one allocation for
// micro-batches of (B, T), and the allocation's size. CUDA-free and in checked 64-bit arithmetic,
// and closed-form in the layer count, so the memory plan (train/memory_plan.h) sizes a run with
// the very computation the model allocates by, before anything is allocated.
#pragma once

#include <cstdint>

#include "model/config.h"
#include "model/recompute.h"

namespace pylon {

struct ActivationArena {
  static constexpr int64_t kNone = -1;  // a buffer this model or policy does not keep
  // What backward reads of a block besides its input x. N = B·T rows; Act is 2 or 4 bytes.
  struct Saved {
    int64_t qkv = kNone;                 // (N, Q + 2KV) Act
    int64_t att = kNone;                 // (N, Q) Act
    int64_t x_mid = kNone;               // (N, D) Act
    int64_t f1 = kNone;                  // (N, F) or (N, 2F) for SwiGLU, Act
    int64_t rstd1 = kNone, rstd2 = kNone;  // (N) fp32
    int64_t lse = kNone;                 // (B, H, T) fp32
    int64_t h1 = kNone, h2 = kNone;      // (N, D) Act, recompute none only
    int64_t act = kNone;                 // (N, F) Act, recompute none and not SwiGLU
  };

  // Block l's input x (N, D) and, unless recompute is full, its saved buffers are at
  // first_block + l·block_stride plus block_x / block_saved. With full, every block shares `shared`.
  int64_t first_block = 0, block_stride = 0;
  int64_t block_x = 0;
  Saved block_saved, shared;
  // The head's input and the step's scratch: x_L (N, D), x_final and rstd_final where the preset
  // has a final norm, h (N, D), wide (N, F) or, between the blocks' forward and backward, the
  // logits of head_rows rows (head_rows, V), tmp (N, D), dx, dx_mid, dh (N, D), datt (N, Q), dqkv
  // (N, Q + 2KV) in Act; losses, rstd_tmp (N), loss_tmp (1) fp32; the kernels' workspace. The head
  // and the loss run over chunks of head_rows rows (the last may be shorter), so the logits of every
  // row, the step's largest buffer at a large vocabulary, are never held at once.
  static constexpr int64_t kMinHeadRows = 256;  // narrower chunks would starve the head's GEMMs
  int64_t head_rows = 0;
  int64_t x_last = 0, x_final = kNone, rstd_final = kNone, h = 0, wide = 0, tmp = 0;
  int64_t dx = 0, dx_mid = 0, dh = 0, datt = 0, dqkv = 0, losses = 0, rstd_tmp = 0, loss_tmp = 0, workspace = 0;
  int64_t bytes = 0;  // the whole allocation

  int64_t x_of(int l) const { return first_block + l * block_stride + block_x; }
  Saved saved_of(int l) const;  // absolute offsets of block l's saved buffers
};

// act_bytes: 2 (bf16) or 4 (fp32); workspace_bytes: the kernels' scratch (sized by CUDA code:
// MiniLLMCuda::workspace_bytes). Every buffer starts on a 256-byte boundary. Throws pylon::Error
// when a size overflows 64 bits.
ActivationArena activation_arena(const ModelConfig& config, int64_t B, int64_t T, Recompute recompute, int act_bytes,
                                 int64_t workspace_bytes);

}  // namespace pylon
