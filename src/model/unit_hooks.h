// The contract between a model's forward/backward and whoever owns its parameters (FSDP).
#pragma once

namespace pylon {

// Called by MiniLLM (CPU) and MiniLLMCuda around each unit's use of its parameters: unit −1 is the
// root (embedding and head), 0..L−1 the blocks. forward: before/after_forward(−1) enclose the whole
// pass (the root is used first by the embedding, last by the head), blocks in order in between.
// backward: before_backward(−1) first (the head; MiniLLMCuda's training step runs the head's forward
// there too, chunk by chunk with its backward), blocks L−1..0, after_backward(−1) last (the
// embedding), so a unit's gradient slots are final when its after_backward runs. FSDP gathers
// parameters in before_*, frees them and reduce-scatters gradients in after_*; a null hooks pointer
// does nothing.
// On CUDA the calls happen while work is being enqueued, not when it runs: a hook orders its own
// streams against the compute stream with events and never waits on the host. A block's fused
// "residual add + next RMSNorm" reads block l+1's norm weight at the end of block l, so MiniLLMCuda
// calls before_forward(l+1) before after_forward(l). The head's and a final norm's gradients are final
// when before_backward(L−1) is called; the embedding's gradient of an untied head is written (zeroed,
// then accumulated) only after after_backward(0), so FSDP may let the two share memory.
class UnitHooks {
 public:
  virtual ~UnitHooks() = default;
  virtual void before_forward(int unit) = 0;
  virtual void after_forward(int unit) = 0;
  virtual void before_backward(int unit) = 0;
  virtual void after_backward(int unit) = 0;
};

}  // namespace pylon
