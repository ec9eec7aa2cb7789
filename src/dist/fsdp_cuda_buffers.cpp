#include "dist/fsdp_cuda_buffers.h"

#include <algorithm>

#include "core/checked.h"
#include "core/error.h"

namespace pylon {
namespace {

constexpr const char* kWhat = "the GPU shards' size";

}  // namespace

DeviceMemory FsdpCudaBuffers::by_use() const {
  auto n = [](int64_t bytes) { return static_cast<size_t>(bytes); };
  DeviceMemory d;
  d.weights = n(master + weights);
  d.gradients = n(grad + root_grad + block_grads);
  d.optimizer = n(m + v);
  d.workspace = n(scratch);
  d.communication = n(root_param + block_params + reduce_bf16);
  return d;
}

int64_t FsdpCudaBuffers::total() const {
  int64_t t = 0;
  for (int64_t b : {master, m, v, grad, weights, root_param, block_params, reduce_bf16, root_grad, block_grads, scratch})
    t = checked_add(t, b, kWhat);
  return t;
}

FsdpCudaBuffers fsdp_cuda_buffers(const ShardUnit& root, const ShardUnit& block, int layers, int world,
                                  const FsdpCudaOptions& options, FsdpScratchBytes scratch) {
  PYLON_CHECK(layers >= 1, "FSDP needs at least one block");
  const int L = layers;
  // A world of one shards nothing: the weights stay in place (FsdpCuda's header), unless asked not to.
  const bool persistent = world == 1 && options.persistent_at_one;
  const int64_t f = sizeof(float), h = options.fp32_params ? sizeof(float) : 2;
  FsdpCudaBuffers b;
  b.param_slots = options.reshard_after_forward && !persistent ? std::min(2, L) : L;
  b.grad_slots = options.no_sync ? L : std::min(2, L);
  b.shard = checked_add(root.shard, checked_mul(block.shard, L, kWhat), kWhat);
  b.summed = options.fused_optimizer ? std::max(root.shard, block.shard) : b.shard;
  const int64_t shard_bytes = checked_mul(b.shard, f, kWhat);
  b.master = b.m = b.v = shard_bytes;
  if (!options.fused_optimizer) b.grad = shard_bytes;
  int64_t widest = 0;  // the longest gathered parameter
  for (const ShardUnit* u : {&root, &block})
    for (const UnitParam& q : u->params) widest = std::max(widest, checked_mul(world, q.chunk, kWhat));
  if (options.reduce_bf16 && world > 1) b.reduce_bf16 = checked_mul(widest, h, kWhat);
  if (persistent) {
    if (!options.fp32_params) b.weights = checked_mul(b.shard, h, kWhat);  // the shard layout, in bf16
  } else {  // all-gather destinations
    b.root_param = checked_mul(root.padded, h, kWhat);
    b.block_params = checked_mul({b.param_slots, block.padded, h}, kWhat);
  }
  // The split root reduced every micro-step: the embedding's gradient and the others' (the head's, a
  // final norm's) take turns in one buffer of the larger of the two.
  const bool split = options.split_root && root.params.size() >= 2;
  int64_t root_grad_numel = root.padded;
  if (split && !options.no_sync) {
    const int64_t embedding = checked_mul(world, root.params[0].chunk, kWhat);
    root_grad_numel = std::max(embedding, root.padded - embedding);
  }
  b.root_grad = checked_mul(root_grad_numel, f, kWhat);
  b.block_grads = checked_mul({b.grad_slots, block.padded, f}, kWhat);
  if (scratch) b.scratch = static_cast<int64_t>(scratch(b.summed));
  return b;
}

}  // namespace pylon
