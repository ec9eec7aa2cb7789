// What FSDP on a GPU (dist/cuda/fsdp_cuda.h) allocates: its options, and the bytes of each device
// buffer as a function of the shard layout's root unit, one block unit (every block is alike),
// the block count and the world. CUDA-free and in checked 64-bit arithmetic, so the memory plan
// (train/memory_plan.h) sizes a run with the very computation FsdpCuda allocates by, before
// anything is allocated (and without the layout of every layer, which a huge --layers would not fit).
#pragma once

#include <cstddef>
#include <cstdint>

#include "dist/shard_layout.h"

namespace pylon {

struct FsdpCudaOptions {
  bool reshard_after_forward = true;
  // Gradients are reduced only at the last micro-step; until then every unit keeps a full
  // gradient buffer (the memory of unsharded gradients, as in PyTorch's no_sync).
  bool no_sync = false;
  // AdamW runs on each unit's shard right after its reduce-scatter, so no gradient shard is kept.
  // Needs no clipping (the global norm is known only at the end) and one reduction per step.
  bool fused_optimizer = false;
  // Timing events around every collective and wait (FsdpCuda::overlap()); costs a few µs a unit.
  bool measure_overlap = false;
  // Reduce-scatter in bf16: each parameter's gradient is cast to bf16, reduced in bf16 and widened back
  // into the fp32 shard (half the bytes; each rank's part and the sum are rounded to bf16).
  bool reduce_bf16 = false;
  // The head (and a final norm) reduced, and with the per-unit optimizer updated and gathered, as
  // its backward ends (FsdpCuda's header); off: the whole root together at the end of backward.
  // Only for a root with a head of its own (untied).
  bool split_root = true;
  // Parameters in fp32 (params_f32()) rather than bf16 (params()): the --dtype fp32 model.
  bool fp32_params = false;
  // A world of one keeps every unit's weights gathered for good: a bf16 copy of the whole model that
  // AdamW writes (fp32: the master shards themselves). Off, it gathers (casts) them into rotating
  // slots as several GPUs do, resharding after forward as they do: less memory, a cast per block
  // and pass more.
  bool persistent_at_one = true;
};

// What FsdpCuda allocated, by use (bytes on this rank's GPU).
struct DeviceMemory {
  size_t weights = 0;        // fp32 master shards; at a world of one also the bf16 copy the model reads
  size_t gradients = 0;      // gradient slots (unsharded, per unit) and the fp32 gradient shards
  size_t optimizer = 0;      // AdamW's m and v shards
  size_t workspace = 0;      // reduction scratch, step scalars and constants
  size_t communication = 0;  // all-gather destinations (gathered bf16 weights) and the bf16 reduce buffer
};

// Bytes of each device buffer of FsdpCuda.
struct FsdpCudaBuffers {
  int param_slots = 0, grad_slots = 0;  // blocks gathered at once (world > 1); blocks' gradient slots
  int64_t shard = 0;   // elements of this rank's shards of every unit, back to back
  int64_t summed = 0;  // elements of the longest sum of squares (the scratch is sized from it)
  int64_t master = 0, m = 0, v = 0;  // fp32 shards
  int64_t grad = 0;                  // fp32 gradient shard; 0 with the fused optimizer
  int64_t weights = 0;               // world 1 in bf16: the weights' bf16 copy (fp32 reads the master)
  int64_t root_param = 0, block_params = 0;  // world > 1: the gathered root and param_slots blocks
  int64_t reduce_bf16 = 0;           // reduce_bf16 at world > 1: one parameter's gradient in bf16
  int64_t root_grad = 0, block_grads = 0;    // gradient slots: the root's, grad_slots blocks'
  int64_t scratch = 0;               // step scalars, AdamW's constants, reduction scratch
  DeviceMemory by_use() const;
  int64_t total() const;
};

// Scratch bytes FsdpCuda needs besides its buffers when its longest sum of squares spans `summed`
// elements (CUDA's to say: FsdpCuda::scratch_bytes); null: none counted.
using FsdpScratchBytes = size_t (*)(int64_t summed);

// The buffers of FsdpCuda over a layout whose root unit is `root`, with `layers` blocks like
// `block`, at `world` ranks. Throws pylon::Error when a size overflows 64 bits.
FsdpCudaBuffers fsdp_cuda_buffers(const ShardUnit& root, const ShardUnit& block, int layers, int world,
                                  const FsdpCudaOptions& options, FsdpScratchBytes scratch = nullptr);

}  // namespace pylon
