// Activation recomputation policy of the GPU step (--recompute): what backward recomputes instead of
// keeping it from forward, trading activation memory for work.
#pragma once

#include <string>

#include "core/error.h"

namespace pylon {

// none: keep every activation backward reads (the norms' outputs and SiLU(f1) too);
// selective: recompute the norms' outputs and SiLU(f1) (elementwise passes; 12·N·D bytes a block
// fewer than none);
// full: keep only each block's input and redo the block's forward up to f1 in backward (one more pass
// of the qkv, attention, out-projection and W1 GEMMs per block but the last).
enum class Recompute { none, selective, full };

inline const char* recompute_name(Recompute r) {
  return r == Recompute::none ? "none" : r == Recompute::selective ? "selective" : "full";
}

inline Recompute parse_recompute(const std::string& name) {
  for (Recompute r : {Recompute::none, Recompute::selective, Recompute::full})
    if (name == recompute_name(r)) return r;
  PYLON_CHECK(false, "unknown recompute policy '", name, "' (none, selective, full)");
  return Recompute::selective;
}

}  // namespace pylon
