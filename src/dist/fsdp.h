// Fully sharded data parallel state and schedule for MiniLLM on one rank: the fp32 parameter,
// gradient and AdamW shards of every unit (ShardLayout), and the UnitHooks that all-gather a
// unit's parameters into its unit buffer just before it runs (and the next unit's while it runs:
// one-ahead prefetch, forward in order, backward in reverse), free them after (reshard after
// forward; off = ZeRO-2), and reduce-scatter its gradient into the gradient shard as soon as its
// backward ends, while the backward of the unit before it goes on. Collectives run in order on a
// worker thread (CollectiveQueue); the step's own collectives follow a drain at its end.
// A world of one gathers nothing: the model reads the shards and writes the gradient shards.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "dist/collective_queue.h"
#include "dist/communicator.h"
#include "dist/shard_layout.h"
#include "io/safetensors.h"
#include "model/minillm.h"
#include "ops/adamw.h"

namespace pylon {

struct FsdpOptions {
  bool reshard_after_forward = true;  // false: ZeRO-2, a unit stays gathered from forward to backward
  bool poison_resharded = false;      // debug: freed parameter slots hold NaN instead of zeros
  // Freed slots' pages go back to the OS (PagedBuffer::release), so a rank's resident memory is
  // its shards plus the units in flight; the price is page faults at the next gather (~12 µs a
  // page on a paravirtualised VM). Off: freed slots stay resident, as the blocks of a caching
  // allocator would (a world of one shards nothing, so freeing would only cost time).
  bool return_memory = true;
  // Gathers the next unit and reduce-scatters on a worker thread while this unit computes;
  // off: every collective blocks the compute thread where the hook calls it.
  bool prefetch = true;
};

// One unit's state on this rank; each vector has ShardUnit::shard elements (padding included).
struct UnitShards {
  std::vector<float> param, grad, m, v;
};

// n floats of anonymous memory whose pages go back to the OS when released: a freed unit's
// slots cost no memory until the next gather writes them (MADV_DONTNEED; they then read as 0).
class PagedBuffer {
 public:
  explicit PagedBuffer(size_t n);
  ~PagedBuffer();
  PagedBuffer(const PagedBuffer&) = delete;
  PagedBuffer& operator=(const PagedBuffer&) = delete;
  float* data() { return data_; }
  const float* data() const { return data_; }
  // Elements [begin, end) become 0; the whole pages among them are returned to the OS.
  void release(size_t begin, size_t end);

 private:
  float* data_ = nullptr;
  size_t n_ = 0, bytes_ = 0;
};

class FsdpModel final : public UnitHooks {
 public:
  FsdpModel(const ShardLayout& layout, Communicator& comm, FsdpOptions options);

  const ShardLayout& layout() const { return layout_; }
  Communicator& comm() { return comm_; }
  // Per-parameter pointers (ParamTable order) handed to MiniLLM::forward/backward: into the unit
  // buffers, valid only between the unit's hooks (at world 1: the shards themselves).
  const std::vector<const float*>& params() const { return param_ptrs_; }
  const std::vector<float*>& grads() const { return grad_ptrs_; }
  // Shards by unit index (root first, as layout().units()).
  std::vector<UnitShards>& shards() { return shards_; }
  const std::vector<UnitShards>& shards() const { return shards_; }

  // Initial parameters of this rank's slices: from the seed, or from a weights file with PyTorch
  // names (each rank reads only its slices). AdamW state starts at zero.
  void init_params(uint64_t seed);
  void load_params(const SafetensorsReader& file);

  // Whether backward reduce-scatters gradients (default) or, for a no-sync micro-step, leaves
  // them accumulating in the flat gradient slots until a micro-step that reduces.
  void set_reduce_grads(bool on) { reduce_grads_ = on; }
  // Forward passes without backward (evaluation) free the root at its after_forward.
  void set_forward_only(bool on) { forward_only_ = on; }

  // Waits for the collectives in flight (the step's end; the optimizer methods below call it).
  void sync();
  void zero_grad();
  double local_grad_sum_of_squares() const;  // over this rank's gradient shards (padding is 0)
  void scale_grads(float s);
  void adamw_step(float lr, const AdamWConfig& c, int64_t t);  // t: 1-based optimizer step

  // Collective: every rank gathers every unit; returns the full flat parameters (table order)
  // on `root` and an empty vector elsewhere.
  std::vector<float> gather_full_params(int root = 0);

  void before_forward(int unit) override;
  void after_forward(int unit) override;
  void before_backward(int unit) override;
  void after_backward(int unit) override;

 private:
  void all_gather_unit(const ShardUnit& u, const float* shard, float* unit);  // (shard) -> (padded)
  void start_gather(int unit);  // queued when prefetching
  void gather(int unit);        // start_gather, then wait for it
  void free_params(int unit);
  void reduce_grads(int unit);  // queued when prefetching
  bool sharded() const { return layout_.world() > 1; }

  const ShardLayout& layout_;
  Communicator& comm_;
  FsdpOptions options_;
  std::vector<UnitShards> shards_;
  // Per unit (padded elements; empty at world 1): gathered parameters, local gradient.
  std::vector<std::unique_ptr<PagedBuffer>> unit_params_, unit_grads_;
  std::vector<const float*> param_ptrs_;
  std::vector<float*> grad_ptrs_;
  std::vector<float> reduced_;  // (largest shard) reduce-scatter result, worker thread only
  std::vector<bool> gathered_;  // gathered or being gathered
  std::vector<CollectiveQueue::Ticket> gather_ticket_;
  std::unique_ptr<CollectiveQueue> queue_;  // null: blocking collectives
  int64_t gathered_floats_ = 0;  // parameters of the gathered units (the profiler's memory track)
  bool reduce_grads_ = true, forward_only_ = false;
};

}  // namespace pylon
