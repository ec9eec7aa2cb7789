// The CUDA model's activation arena, laid out in the order MiniLLMCuda has always carved it: the
// shared block (full recompute), the blocks, then the head's buffers and the scratch.
#include "model/activation_arena.h"

#include <algorithm>

#include "core/checked.h"

namespace pylon {
namespace {

constexpr const char* kWhat = "the GPU activations' size";

// Hands out 256-byte-aligned offsets from 0 up.
class Carver {
 public:
  int64_t take(int64_t count, int64_t elem_bytes) {
    align();
    const int64_t at = offset_;
    offset_ = checked_add(offset_, checked_mul(count, elem_bytes, kWhat), kWhat);
    return at;
  }
  void align() { offset_ = checked_add(offset_, 255, kWhat) & ~int64_t{255}; }
  void skip(int64_t bytes) { offset_ = checked_add(offset_, bytes, kWhat); }
  int64_t used() const { return offset_; }

 private:
  int64_t offset_ = 0;
};

}  // namespace

ActivationArena::Saved ActivationArena::saved_of(int l) const {
  if (block_saved.qkv == kNone) return shared;  // full: one set for every block
  const int64_t base = first_block + l * block_stride;
  auto at = [&](int64_t offset) { return offset == kNone ? kNone : base + offset; };
  Saved s;
  s.qkv = at(block_saved.qkv), s.att = at(block_saved.att), s.x_mid = at(block_saved.x_mid);
  s.f1 = at(block_saved.f1), s.rstd1 = at(block_saved.rstd1), s.rstd2 = at(block_saved.rstd2);
  s.lse = at(block_saved.lse), s.h1 = at(block_saved.h1), s.h2 = at(block_saved.h2), s.act = at(block_saved.act);
  return s;
}

ActivationArena activation_arena(const ModelConfig& config, int64_t B, int64_t T, Recompute recompute, int act_bytes,
                                 int64_t workspace_bytes) {
  const bool swiglu = config.preset.ffn == Ffn::swiglu;
  const int64_t A = act_bytes, f = 4;
  const int64_t N = checked_mul(B, T, kWhat), D = config.dim, V = config.vocab, H = config.heads;
  const int64_t Q = config.q_dim(), QKV = config.qkv_dim(), F = config.ffn_hidden(), FIn = swiglu ? 2 * F : F;
  auto take_saved = [&](Carver& c, ActivationArena::Saved& s) {
    s.qkv = c.take(checked_mul(N, QKV, kWhat), A), s.att = c.take(checked_mul(N, Q, kWhat), A);
    s.x_mid = c.take(checked_mul(N, D, kWhat), A), s.f1 = c.take(checked_mul(N, FIn, kWhat), A);
    s.rstd1 = c.take(N, f), s.rstd2 = c.take(N, f), s.lse = c.take(checked_mul({B, H, T}, kWhat), f);
    if (recompute == Recompute::none) {
      s.h1 = c.take(checked_mul(N, D, kWhat), A), s.h2 = c.take(checked_mul(N, D, kWhat), A);
      if (!swiglu) s.act = c.take(checked_mul(N, F, kWhat), A);
    }
  };
  ActivationArena a;
  Carver c;
  if (recompute == Recompute::full) take_saved(c, a.shared);
  // One block, from a 256-byte boundary: every block is alike, so block l starts l strides on.
  Carver block;
  a.block_x = block.take(checked_mul(N, D, kWhat), A);
  if (recompute != Recompute::full) take_saved(block, a.block_saved);
  block.align();
  a.block_stride = block.used();
  c.align();
  a.first_block = c.used();
  c.skip(checked_mul(a.block_stride, config.layers, kWhat));
  a.x_last = c.take(checked_mul(N, D, kWhat), A);
  if (config.preset.final_norm) a.x_final = c.take(checked_mul(N, D, kWhat), A), a.rstd_final = c.take(N, f);
  // The head's row chunks: as many rows as fit their logits into wide's (N, F), a multiple of 8,
  // at least kMinHeadRows, then evened out over the chunks that takes.
  const int64_t fit = checked_mul(N, F, kWhat) / V / 8 * 8;
  const int64_t most = std::min(N, std::max(fit, ActivationArena::kMinHeadRows));
  const int64_t chunks = (N + most - 1) / most;
  a.head_rows = std::min(most, ((N + chunks - 1) / chunks + 7) / 8 * 8);
  a.h = c.take(checked_mul(N, D, kWhat), A);
  a.wide = c.take(std::max(checked_mul(N, F, kWhat), checked_mul(a.head_rows, V, kWhat)), A);
  a.tmp = c.take(checked_mul(N, D, kWhat), A);
  a.dx = c.take(checked_mul(N, D, kWhat), A), a.dx_mid = c.take(checked_mul(N, D, kWhat), A);
  a.dh = c.take(checked_mul(N, D, kWhat), A);
  a.datt = c.take(checked_mul(N, Q, kWhat), A), a.dqkv = c.take(checked_mul(N, QKV, kWhat), A);
  a.losses = c.take(N, f), a.rstd_tmp = c.take(N, f), a.loss_tmp = c.take(1, f);
  a.workspace = c.take(workspace_bytes, 1);
  a.bytes = c.used();
  return a;
}

}  // namespace pylon
