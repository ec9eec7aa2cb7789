// FSDP on one GPU rank: the unit runtime behind MiniLLMCuda's UnitHooks. Per unit it keeps only
// this rank's fp32 shards of the master parameters, AdamW m and v, and, when the optimizer step
// needs the whole gradient first (clipping, accumulation), of the gradients: ShardLayout's shards,
// each parameter's dim-0 chunk back to back, the same on the device as on the host.
// Parameters are gathered in bf16 into a few rotating slots just in time, one unit ahead, on a
// gather stream and communicator (one all-gather per parameter, grouped, so every parameter lands
// whole); gradients are reduce-scattered (fp32, or bf16 on request) per parameter on a reduce
// stream and communicator as each unit's backward ends. The streams meet only through events: the
// host never waits inside a step.
//
// Per micro-step the units are used in the order root, 0..L−1 (forward), L−1..0 (backward); the
// root (embedding and head, its own slot) stays gathered from the start of forward to the end of
// backward. With reshard_after_forward a block is freed after its forward (the last block is kept:
// backward starts with it) and gathered again for backward; without it (ZeRO-2) every block keeps
// its own slot from forward to backward. A world of one keeps every unit's bf16 weights in place
// (AdamW writes them); nothing is gathered or reduced there. Without persistent_at_one it gathers
// (casts, no collective) into slots as above. With fp32_params (--dtype fp32) the
// weights are gathered in fp32 instead, and a world of one reads the fp32 master shards themselves.
//
// The split root (FsdpCudaOptions::split_root): the gradients of the head and of a final norm are
// final once backward reaches the last block (their backward comes first), so they are
// reduce-scattered then, and with the per-unit optimizer their AdamW and the gather of their next
// weights follow on the reduce stream during the blocks' backward. Only the embedding is left for
// the end of the step and the start of the next; its gradient and theirs share one buffer.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <deque>
#include <vector>

#include "dist/fsdp.h"
#include "dist/fsdp_cuda_buffers.h"
#include "dist/shard_layout.h"
#include "model/unit_hooks.h"
#include "ops/cuda/adamw.h"
#include "ops/cuda/runtime.h"

namespace pylon::cuda {

class NcclComm;

using pylon::DeviceMemory;
using pylon::FsdpCudaBuffers;
using pylon::FsdpCudaOptions;

struct AdamWStep {
  float lr, beta1, beta2, eps, weight_decay;
  int64_t t;  // 1-based optimizer step
};

// Collective time and how much of it the compute stream waited for, over one optimizer step.
struct OverlapStats {
  double gather_ms = 0, reduce_ms = 0;  // Σ durations of the all-gathers (with their casts), reduce-scatters
  double exposed_wait_ms = 0;  // compute stream stalled on a gather or a gradient slot
  double tail_ms = 0;          // reduce stream still busy after compute's last kernel: last
                               // reduce-scatters, norm all-reduce and the optimizer's tail
};

class FsdpCuda final : public UnitHooks {
 public:
  // gather/reduce: null for a world of one (gathers are casts, reductions nothing).
  FsdpCuda(const ShardLayout& layout, cudaStream_t compute, NcclComm* gather, NcclComm* reduce,
           FsdpCudaOptions options);

  // The buffers the constructor allocates over a layout whose root unit is `root`, with `layers`
  // blocks like `block`, computed without allocating (dist/fsdp_cuda_buffers.h); their total is
  // that object's device_bytes().
  static FsdpCudaBuffers buffers(const ShardUnit& root, const ShardUnit& block, int layers, int world,
                                 const FsdpCudaOptions& options);
  // Bytes of the step scalars, AdamW's constants and the reduction scratch for sums over `summed`
  // elements.
  static size_t scratch_bytes(int64_t summed);

  const ShardLayout& layout() const { return layout_; }
  bool split_root() const { return split_; }  // the options' split_root, where the root has a head of its own
  // Per parameter (table order): bf16 weights / fp32 gradients, valid between the unit's hooks.
  const std::vector<const __nv_bfloat16*>& params() const { return params_; }
  const std::vector<const float*>& params_f32() const { return params_f32_; }  // with fp32_params
  const std::vector<float*>& grads() const { return grads_; }
  float* loss_sum() const { return scalars_.as<float>(); }  // the model adds each micro-step's mean loss
  size_t device_bytes() const { return device_bytes_; }   // everything this object allocated
  const DeviceMemory& memory() const { return memory_; }  // the same, by use

  // Host copies of the parameter and AdamW shards (UnitShards::grad is not touched); synchronise.
  void upload(const std::vector<UnitShards>& host);
  void download(std::vector<UnitShards>& host);

  // The step: begin_step, then per micro-step begin_micro_step + model forward/backward with these
  // hooks, then end_step, which enqueues the norm, clipping and AdamW (unless fused) and copies
  // {Σ micro-step losses, global grad norm²} (all ranks) into host_scalars (pinned, 2 floats).
  void begin_step(const AdamWStep& adam, float grad_clip);
  // The host half of begin_step: AdamW's constants for step adam.t into the pinned buffer of its
  // parity, which the step's copy reads. For a captured step replayed as a graph; the caller makes
  // sure step adam.t − 2 has finished.
  void write_step_constants(const AdamWStep& adam);
  // Whether backward must accumulate into the gradient slots (no-sync micro-steps after the first).
  bool begin_micro_step(int micro, int count);
  // Between steps (validation): set_forward_only(true) before each model forward that has no
  // backward, set_forward_only(false) after the last; both free what a forward left gathered.
  // These gathers are not counted in overlap().
  void set_forward_only(bool on);
  void end_step(float* host_scalars);
  // Step t (1-based, as in AdamWStep) has finished on every stream: a timing event. Kept for two
  // steps, so the host can read step t while step t + 1 runs.
  const Event& step_done(int64_t t) const { return step_done_[t % 2]; }
  cudaStream_t reduce_stream() const { return reduce_stream_.get(); }  // where a step ends
  // With measure_overlap (else zeros), of step t once step_done(t) has completed.
  OverlapStats overlap(int64_t t) const;

  void before_forward(int unit) override;
  void after_forward(int unit) override;
  void before_backward(int unit) override;
  void after_backward(int unit) override;

 private:
  struct Slot {
    char* data = nullptr;  // param_bytes_ per element
    int unit = -2;  // occupant; −2: free
    Event released;  // compute finished with the previous occupant
  };
  struct GradSlot {
    float* data = nullptr;
    Event released;  // the reduce stream finished with the previous occupant
  };
  // Timing pairs for OverlapStats: a duration (from, to) or a wait (consumer ready, producer done).
  struct Probe {
    Event from{true}, to{true};
    bool wait = false;
    bool gather = false;
  };

  static size_t index(int unit) { return static_cast<size_t>(unit + 1); }
  int64_t offset(int unit) const { return shard_offset_[index(unit)]; }
  const std::vector<UnitParam>& params(int unit) const { return layout_.units()[index(unit)].params; }
  GradSlot& grad_slot(int unit);
  int64_t grad_at(const UnitParam& q) const;  // parameter q's first element in its gradient slot
  // Parameter b of the unit: this rank's fp32 chunk cast to bf16 (copied, with fp32_params) into the
  // slot, then all-gathered.
  void gather_param(int unit, size_t b, char* slot, NcclComm* comm, cudaStream_t stream);
  void gather(int unit);
  void release(int unit);  // compute is done with the unit's gathered parameters
  void prefetch();         // gathers ahead in use order while a slot is free
  // Reduce-scatter the unit's parameters [first, last); then AdamW or keep the gradient shard.
  void reduce(int unit, size_t first, size_t last);
  void group_start(NcclComm* comm);  // NCCL calls until group_end launch together (world > 1)
  void group_end(NcclComm* comm);
  Probe& probe(bool wait, bool gather);
  void wait_for(const Event& producer, cudaStream_t consumer, bool gather_wait);
  // Points the unit's entries of params_ (or params_f32_) into its gathered weights at `base`, or
  // clears them (base null).
  void point_params(int unit, const char* base);
  __nv_bfloat16* persistent_bf16(int64_t offset) const;
  const AdamWConstants* constants() const;  // this step's, on the device  // AdamW's bf16 copy at a world of one, or null

  const ShardLayout& layout_;
  cudaStream_t compute_;
  NcclComm *gather_comm_, *reduce_comm_;
  FsdpCudaOptions options_;
  int rank_, world_, layers_;
  Stream gather_stream_, reduce_stream_;

  bool split_ = false;                  // the head is reduced early (split_root)
  std::vector<int64_t> shard_offset_;   // per unit, into the flat shard buffers
  DeviceBuffer master_, m_, v_, grad_;  // (Σ shard) fp32; grad_ only without fused_optimizer
  DeviceBuffer scalars_;                // loss sum, grad norm², clip coefficient
  DeviceBuffer constants_;              // AdamWConstants per step parity, copied from host_constants_
  PinnedArray<AdamWConstants> host_constants_{2};
  DeviceBuffer reduce_ws_;
  DeviceBuffer reduce_bf16_;            // reduce_bf16: one parameter's gradient in bf16
  DeviceBuffer root_param_, block_params_, root_grad_, block_grads_;
  std::vector<Slot> slots_;           // [0]: the root's; then the blocks'
  std::vector<GradSlot> grad_slots_;  // [0]: the root's; then the blocks' (fixed by unit % count)
  std::vector<int> slot_of_;          // per unit: its slot, −1 when not gathered
  std::vector<Event> gathered_, shard_ready_, grads_done_;
  std::vector<const __nv_bfloat16*> params_;
  std::vector<const float*> params_f32_;
  size_t param_bytes_ = 2;  // bf16, or 4 with fp32_params
  std::vector<float*> grads_;
  std::vector<int> order_;  // this micro-step's uses, in order
  size_t cursor_ = 0;       // next entry of order_ to gather
  bool persistent_ = false;  // world of one: weights stay gathered, AdamW writes their bf16 copy
  bool reduce_now_ = true, first_reduce_ = true;
  bool forward_only_ = false;
  bool head_reduced_ = false;    // this micro-step's head gradient is reduced (split root)
  // Split root reduced every micro-step: the head's and the embedding's gradients take turns in
  // one buffer (the embedding's is written only after the last block's backward, unit_hooks.h).
  bool shared_root_grad_ = false;
  Event head_released_{};        // the reduce stream is done with the head's gradient
  bool head_gathered_ = false;   // the next step's head weights are gathered (split root, per-unit AdamW)
  Event head_grads_done_, head_ready_;  // compute finished the head's backward; its next weights gathered
  float grad_clip_ = 0;
  Event step_done_[2] = {Event(true), Event(true)}, compute_end_[2] = {Event(true), Event(true)};
  Event step_begun_, gathers_done_;  // side streams fork from compute at begin_step, join at end_step
  std::deque<Probe> probes_[2];  // by step parity; a deque keeps references stable as it grows
  size_t probes_used_[2] = {0, 0};
  int parity_ = 0;
  size_t device_bytes_ = 0;
  DeviceMemory memory_;
};

}  // namespace pylon::cuda
