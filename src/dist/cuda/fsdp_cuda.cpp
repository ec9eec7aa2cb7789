// The GPU FSDP unit runtime: gathers into rotating slots with one-unit prefetch, reduce-scatters as
// each unit's backward ends (the split root's head as the head's ends), and the optimizer on
// shards; three streams ordered by events.
#include "dist/cuda/fsdp_cuda.h"

#include <algorithm>
#include <utility>

#include "core/error.h"
#include "dist/cuda/shard_ops.h"
#include "ops/cuda/adamw.h"
#include "ops/cuda/cast.h"
#include "ops/cuda/reduce.h"
#ifdef PYLON_HAVE_NCCL
#include "dist/cuda/nccl_communicator.h"
#endif

namespace pylon::cuda {

using bf16 = __nv_bfloat16;

namespace {

// Scratch of the gradient's sum of squares over `summed` elements (a reduction or AdamW's fold).
size_t reduce_scratch_bytes(int64_t summed) {
  return std::max(reduce_workspace_bytes(summed), grad_sumsq_workspace_bytes(summed));
}

}  // namespace

FsdpCuda::FsdpCuda(const ShardLayout& layout, cudaStream_t compute, NcclComm* gather, NcclComm* reduce,
                   FsdpCudaOptions options)
    : layout_(layout),
      compute_(compute),
      gather_comm_(gather),
      reduce_comm_(reduce),
      options_(options),
      rank_(0),
      world_(layout.world()),
      layers_(static_cast<int>(layout.units().size()) - 1) {
#ifdef PYLON_HAVE_NCCL
  PYLON_CHECK(world_ == 1 || (gather && reduce), "FSDP over ", world_, " GPUs needs NCCL communicators");
  if (gather) rank_ = gather->rank();
#else
  PYLON_CHECK(world_ == 1, "FSDP over ", world_, " GPUs needs NCCL: this build has none (apt install libnccl-dev)");
#endif
  const std::vector<ShardUnit>& units = layout.units();
  // The root's parameters: the embedding first (ShardLayout's order), then a final norm and the head.
  split_ = options.split_root && units[0].params.size() >= 2;
  PYLON_CHECK(!split_ || layout.table().head >= 0,
              "the split root needs a head of its own: a tied head's gradient is final only at the end of backward");
  const int L = layers_;
  PYLON_CHECK(L >= 1, "FSDP needs at least one block");
  int64_t total = 0;
  for (const ShardUnit& u : units) {
    shard_offset_.push_back(total);
    total += u.shard;
    PYLON_ASSERT(u.id < 0 || (u.shard == units[1].shard && u.padded == units[1].padded), "FSDP's blocks differ");
  }
  // A world of one shards nothing: the bf16 weights stay in place and AdamW writes them (fp32: the
  // model reads the master shards); unless persistent_at_one is off, when it gathers without NCCL.
  persistent_ = world_ == 1 && options.persistent_at_one;
  param_bytes_ = options.fp32_params ? sizeof(float) : sizeof(bf16);
  const FsdpCudaBuffers sizes = buffers(units[0], units[1], L, world_, options);
  PYLON_ASSERT(sizes.shard == total);
  const int param_slots = sizes.param_slots, grad_slots = sizes.grad_slots;
  const int64_t block_padded = units[1].padded;
  auto alloc = [&](DeviceBuffer& b, int64_t bytes) {
    b = DeviceBuffer(static_cast<size_t>(bytes));
    device_bytes_ += b.bytes();
    if (bytes) PYLON_CUDA_CHECK(cudaMemset(b.get(), 0, b.bytes()));  // padding stays zero from here on
  };
  alloc(master_, sizes.master);
  alloc(m_, sizes.m), alloc(v_, sizes.v);
  alloc(grad_, sizes.grad);  // none with the fused optimizer
  alloc(scalars_, 4 * sizeof(float));
  alloc(constants_, 2 * sizeof(AdamWConstants));
  alloc(reduce_ws_, static_cast<int64_t>(reduce_scratch_bytes(sizes.summed)));
  alloc(reduce_bf16_, sizes.reduce_bf16);
  shared_root_grad_ = split_ && !options.no_sync;
  alloc(block_params_, persistent_ ? sizes.weights : sizes.block_params);  // bf16 copy (world 1) or gathered blocks
  alloc(root_param_, sizes.root_param);
  alloc(root_grad_, sizes.root_grad);
  alloc(block_grads_, sizes.block_grads);
  PYLON_ASSERT(device_bytes_ == static_cast<size_t>(sizes.total()), "FSDP allocated ", device_bytes_, " bytes, planned ",
               sizes.total());
  memory_ = sizes.by_use();

  slots_.resize(static_cast<size_t>(1 + param_slots));
  const auto elem = static_cast<int64_t>(param_bytes_);
  char* persistent_base = options.fp32_params ? master_.as<char>() : block_params_.as<char>();
  for (size_t k = 0; k < slots_.size(); ++k)  // persistent: slot k holds unit k − 1
    slots_[k].data = persistent_ ? persistent_base + shard_offset_[k] * elem
                     : k == 0    ? root_param_.as<char>()
                                 : block_params_.as<char>() + static_cast<int64_t>(k - 1) * block_padded * elem;
  grad_slots_.resize(static_cast<size_t>(1 + grad_slots));
  grad_slots_[0].data = root_grad_.as<float>();
  for (int s = 0; s < grad_slots; ++s) grad_slots_[static_cast<size_t>(1 + s)].data = block_grads_.as<float>() + s * block_padded;
  for (Slot& s : slots_) s.released.record(compute_);
  for (GradSlot& g : grad_slots_) g.released.record(compute_);
  slot_of_.assign(units.size(), -1);
  gathered_.resize(units.size()), shard_ready_.resize(units.size()), grads_done_.resize(units.size());
  for (Event& e : shard_ready_) e.record(compute_);
  head_grads_done_.record(compute_), head_ready_.record(compute_), head_released_.record(compute_);
  params_.assign(layout.table().params.size(), nullptr);
  params_f32_.assign(layout.table().params.size(), nullptr);
  grads_.assign(layout.table().params.size(), nullptr);
  // cudaMemset runs on the legacy stream, which does not order our non-blocking streams.
  PYLON_CUDA_CHECK(cudaDeviceSynchronize());
}

FsdpCudaBuffers FsdpCuda::buffers(const ShardUnit& root, const ShardUnit& block, int layers, int world,
                                  const FsdpCudaOptions& options) {
  return fsdp_cuda_buffers(root, block, layers, world, options, &scratch_bytes);
}

size_t FsdpCuda::scratch_bytes(int64_t summed) {
  // Step scalars (loss sum, grad norm², clip coefficient), AdamW's constants per step parity, and
  // the scratch of the longest sum of squares.
  return 4 * sizeof(float) + 2 * sizeof(AdamWConstants) + reduce_scratch_bytes(summed);
}

void FsdpCuda::upload(const std::vector<UnitShards>& host) {
  PYLON_ASSERT(host.size() == layout_.units().size());
  head_gathered_ = false;
  for (size_t i = 0; i < host.size(); ++i) {
    const size_t off = static_cast<size_t>(shard_offset_[i]), n = static_cast<size_t>(layout_.units()[i].shard);
    const UnitShards& s = host[i];
    PYLON_ASSERT(s.param.size() == n && s.m.size() == n && s.v.size() == n);
    PYLON_CUDA_CHECK(cudaMemcpy(master_.as<float>() + off, s.param.data(), n * sizeof(float), cudaMemcpyHostToDevice));
    PYLON_CUDA_CHECK(cudaMemcpy(m_.as<float>() + off, s.m.data(), n * sizeof(float), cudaMemcpyHostToDevice));
    PYLON_CUDA_CHECK(cudaMemcpy(v_.as<float>() + off, s.v.data(), n * sizeof(float), cudaMemcpyHostToDevice));
  }
  if (persistent_) {  // every unit "gathered" for good: one cast (none in fp32)
    if (!options_.fp32_params)
      cast_f32_to_bf16(block_params_.as<bf16>(), master_.as<float>(),
                       static_cast<int64_t>(master_.bytes() / sizeof(float)), compute_);
    for (size_t i = 0; i < slots_.size(); ++i) {
      slots_[i].unit = static_cast<int>(i) - 1;
      slot_of_[i] = static_cast<int>(i);
      point_params(static_cast<int>(i) - 1, slots_[i].data);
      shard_ready_[i].record(compute_);
    }
  }
  PYLON_CUDA_CHECK(cudaDeviceSynchronize());  // pageable copies may still be in flight on return
}

void FsdpCuda::download(std::vector<UnitShards>& host) {
  PYLON_CUDA_CHECK(cudaStreamSynchronize(compute_));  // explicit: a checkpoint is outside the step
  gather_stream_.synchronize(), reduce_stream_.synchronize();
  host.resize(layout_.units().size());
  for (size_t i = 0; i < host.size(); ++i) {
    const size_t off = static_cast<size_t>(shard_offset_[i]), n = static_cast<size_t>(layout_.units()[i].shard);
    UnitShards& s = host[i];
    s.param.resize(n), s.m.resize(n), s.v.resize(n);
    PYLON_CUDA_CHECK(cudaMemcpy(s.param.data(), master_.as<float>() + off, n * sizeof(float), cudaMemcpyDeviceToHost));
    PYLON_CUDA_CHECK(cudaMemcpy(s.m.data(), m_.as<float>() + off, n * sizeof(float), cudaMemcpyDeviceToHost));
    PYLON_CUDA_CHECK(cudaMemcpy(s.v.data(), v_.as<float>() + off, n * sizeof(float), cudaMemcpyDeviceToHost));
  }
}

FsdpCuda::Probe& FsdpCuda::probe(bool wait, bool gather) {
  std::deque<Probe>& d = probes_[parity_];
  size_t& used = probes_used_[parity_];
  if (used == d.size()) d.emplace_back();
  Probe& p = d[used++];
  p.wait = wait, p.gather = gather;
  return p;
}

// The consumer stream waits for the producer's event; with measure_overlap, timing events just
// before and after the wait bracket the stall (no work lies between them).
void FsdpCuda::wait_for(const Event& producer, cudaStream_t consumer, bool gather_wait) {
  if (!options_.measure_overlap || forward_only_) return producer.wait_on(consumer);
  Probe& p = probe(true, gather_wait);
  p.from.record(consumer);
  producer.wait_on(consumer);
  p.to.record(consumer);
}

void FsdpCuda::write_step_constants(const AdamWStep& adam) {
  host_constants_.data()[adam.t % 2] =
      adamw_constants(adam.lr, adam.beta1, adam.beta2, adam.eps, adam.weight_decay, adam.t);
}

const AdamWConstants* FsdpCuda::constants() const { return constants_.as<AdamWConstants>() + parity_; }

void FsdpCuda::begin_step(const AdamWStep& adam, float grad_clip) {
  PYLON_CHECK(!options_.fused_optimizer || grad_clip <= 0, "the fused optimizer step cannot clip gradients");
  grad_clip_ = grad_clip;
  parity_ = static_cast<int>(adam.t % 2);
  probes_used_[parity_] = 0;
  write_step_constants(adam);
  PYLON_CUDA_CHECK(cudaMemcpyAsync(const_cast<AdamWConstants*>(constants()), host_constants_.data() + parity_,
                                   sizeof(AdamWConstants), cudaMemcpyHostToDevice, compute_));
  PYLON_CUDA_CHECK(cudaMemsetAsync(scalars_.as<float>(), 0, 2 * sizeof(float), compute_));  // loss, norm²
  // The side streams start from here (in a capture: fork from the compute stream).
  step_begun_.record(compute_);
  step_begun_.wait_on(gather_stream_.get());
  step_begun_.wait_on(reduce_stream_.get());
}

bool FsdpCuda::begin_micro_step(int micro, int count) {
  PYLON_CHECK(!options_.fused_optimizer || options_.no_sync || count == 1,
              "the fused optimizer step needs one gradient reduction per step (--no-sync or no accumulation)");
  reduce_now_ = !options_.no_sync || micro + 1 == count;
  first_reduce_ = options_.no_sync || micro == 0;
  // Gathers in use order: the root, blocks forward, then the blocks backward needs gathered again.
  order_.assign(1, -1);
  if (persistent_) order_.clear();
  for (int l = 0; l < layers_ && !persistent_; ++l) order_.push_back(l);
  if (options_.reshard_after_forward && !persistent_)
    for (int l = layers_ - 2; l >= 0; --l) order_.push_back(l);  // layers_ − 1 is kept
  cursor_ = 0;
  return options_.no_sync && micro > 0;
}

void FsdpCuda::set_forward_only(bool on) {
  forward_only_ = on;
  order_.clear();
  cursor_ = 0;
  if (persistent_) return;
  for (int unit = -1; unit < layers_; ++unit)  // what the previous forward left gathered
    if (slot_of_[index(unit)] >= 0) release(unit);
  if (on)  // the forward's uses: the root, then the blocks
    for (int unit = -1; unit < layers_; ++unit) order_.push_back(unit);
}

void FsdpCuda::gather(int unit) {
  const size_t i = index(unit);
  PYLON_ASSERT(!persistent_, "a world of one never gathers");
  PYLON_ASSERT(slot_of_[i] < 0, "unit ", unit, " gathered twice");
  size_t slot = 0;
  if (unit >= 0) {
    slot = 1;
    while (slot < slots_.size() && slots_[slot].unit != -2) ++slot;
    PYLON_ASSERT(slot < slots_.size(), "no free parameter slot for unit ", unit);
  }
  Slot& s = slots_[slot];
  s.unit = unit;
  slot_of_[i] = static_cast<int>(slot);
  const cudaStream_t g = gather_stream_.get();
  s.released.wait_on(g);    // compute is done with the previous occupant
  shard_ready_[i].wait_on(g);  // the optimizer has written this unit's shard
  // The split root's parameters after the embedding may have been gathered during the previous
  // step's backward.
  const bool head_done = unit < 0 && head_gathered_;
  if (head_done) head_ready_.wait_on(g);
  head_gathered_ = head_gathered_ && !head_done;
  Probe* p = options_.measure_overlap && !forward_only_ ? &probe(false, true) : nullptr;
  if (p) p->from.record(g);
  // One all-gather per parameter (its dim-0 chunks), launched together.
  group_start(gather_comm_);
  for (size_t b = 0; b < params(unit).size(); ++b)
    if (!(head_done && b >= 1)) gather_param(unit, b, s.data, gather_comm_, g);
  group_end(gather_comm_);
  if (p) p->to.record(g);
  gathered_[i].record(g);
  point_params(unit, s.data);
}

void FsdpCuda::gather_param(int unit, size_t b, char* slot, NcclComm* comm, cudaStream_t stream) {
  const UnitParam& k = params(unit)[b];
  const auto elem = static_cast<int64_t>(param_bytes_);
  char* mine = slot + (k.unit_offset + rank_ * k.chunk) * elem;
  const float* master = master_.as<float>() + offset(unit) + k.shard_offset;
  if (options_.fp32_params)
    PYLON_CUDA_CHECK(cudaMemcpyAsync(mine, master, static_cast<size_t>(k.chunk) * sizeof(float),
                                     cudaMemcpyDeviceToDevice, stream));
  else
    cast_f32_to_bf16(reinterpret_cast<bf16*>(mine), master, k.chunk, stream);
#ifdef PYLON_HAVE_NCCL
  if (world_ > 1)
    comm->all_gather(mine, slot + k.unit_offset * elem, static_cast<size_t>(k.chunk),
                     options_.fp32_params ? ncclFloat32 : ncclBfloat16, stream);
#else
  (void)comm;
#endif
}

void FsdpCuda::group_start(NcclComm* comm) {
#ifdef PYLON_HAVE_NCCL
  if (world_ > 1) comm->group_start();
#else
  (void)comm;
#endif
}

void FsdpCuda::group_end(NcclComm* comm) {
#ifdef PYLON_HAVE_NCCL
  if (world_ > 1) comm->group_end();
#else
  (void)comm;
#endif
}

void FsdpCuda::point_params(int unit, const char* base) {
  for (const UnitParam& q : layout_.units()[index(unit)].params) {
    const size_t i = static_cast<size_t>(q.param);
    const char* p = base ? base + q.unit_offset * static_cast<int64_t>(param_bytes_) : nullptr;
    if (options_.fp32_params)
      params_f32_[i] = reinterpret_cast<const float*>(p);
    else
      params_[i] = reinterpret_cast<const bf16*>(p);
  }
}

bf16* FsdpCuda::persistent_bf16(int64_t offset) const {
  return persistent_ && !options_.fp32_params ? block_params_.as<bf16>() + offset : nullptr;
}

void FsdpCuda::release(int unit) {
  const size_t i = index(unit);
  PYLON_ASSERT(slot_of_[i] >= 0, "unit ", unit, " released but not gathered");
  Slot& s = slots_[static_cast<size_t>(slot_of_[i])];
  s.released.record(compute_);
  s.unit = -2;
  slot_of_[i] = -1;
  point_params(unit, nullptr);
}

void FsdpCuda::prefetch() {
  while (cursor_ < order_.size()) {
    const int u = order_[cursor_];
    if (slot_of_[index(u)] >= 0) break;  // still gathered from its previous use: wait for release
    if (u >= 0 && std::none_of(slots_.begin() + 1, slots_.end(), [](const Slot& s) { return s.unit == -2; }))
      break;
    gather(u);
    ++cursor_;
  }
}

void FsdpCuda::before_forward(int unit) {
  if (slot_of_[index(unit)] < 0) {  // not prefetched: it must be the next use
    PYLON_ASSERT(cursor_ < order_.size() && order_[cursor_] == unit, "unit ", unit, " out of order");
    gather(unit);
    ++cursor_;
  }
  // Persistent weights are written by AdamW itself: wait for that instead of a gather.
  wait_for(persistent_ ? shard_ready_[index(unit)] : gathered_[index(unit)], compute_, true);
  prefetch();
}

void FsdpCuda::after_forward(int unit) {
  if (unit >= 0 && options_.reshard_after_forward && unit + 1 < layers_ && !persistent_) release(unit);
  prefetch();
}

FsdpCuda::GradSlot& FsdpCuda::grad_slot(int unit) {
  return grad_slots_[unit < 0 ? 0 : 1 + static_cast<size_t>(unit) % (grad_slots_.size() - 1)];
}

void FsdpCuda::before_backward(int unit) {
  before_forward(unit);  // gathered (the root and the last block still are)
  if (split_ && unit == layers_ - 1 && reduce_now_) {
    // Backward has passed the head and any final norm (the root's first use in backward): every root
    // gradient but the embedding's is final.
    head_grads_done_.record(compute_);
    head_grads_done_.wait_on(reduce_stream_.get());
    const size_t n = params(-1).size();
    reduce(-1, 1, n);
    head_reduced_ = true;
    if (options_.fused_optimizer && !persistent_) {
      // Their AdamW is done and compute reads those bf16 weights no more this step: gather the next
      // step's now, on the reduce stream (the gather stream serves the blocks meanwhile). (A world
      // of one has them already: AdamW wrote them.)
      const cudaStream_t r = reduce_stream_.get();
      Probe* p = options_.measure_overlap ? &probe(false, true) : nullptr;
      if (p) p->from.record(r);
      group_start(reduce_comm_);
      for (size_t b = 1; b < n; ++b) gather_param(-1, b, slots_[0].data, reduce_comm_, r);
      group_end(reduce_comm_);
      if (p) p->to.record(r);
      head_ready_.record(r);
      head_gathered_ = true;
    }
  }
  GradSlot& g = grad_slot(unit);
  wait_for(g.released, compute_, false);
  for (const UnitParam& q : layout_.units()[index(unit)].params)
    grads_[static_cast<size_t>(q.param)] = g.data + grad_at(q);
}

int64_t FsdpCuda::grad_at(const UnitParam& q) const {
  if (!shared_root_grad_ || layout_.table().params[static_cast<size_t>(q.param)].unit >= 0)
    return q.unit_offset;
  // The embedding's gradient, and the rest of the root's back to back, each start the shared buffer.
  const std::vector<UnitParam>& root = params(-1);
  return q.param == root[0].param ? 0 : q.unit_offset - root[1].unit_offset;
}

void FsdpCuda::after_backward(int unit) {
  const size_t i = index(unit);
  grads_done_[i].record(compute_);
  // Next, backward writes the embedding's gradient, where the head's was: wait for its reduction.
  if (unit == 0 && shared_root_grad_) wait_for(head_released_, compute_, false);
  if (!persistent_) release(unit);
  prefetch();
  if (!reduce_now_) return;
  grads_done_[i].wait_on(reduce_stream_.get());
  reduce(unit, 0, unit < 0 && head_reduced_ ? 1 : params(unit).size());  // the head's may be done
  if (unit < 0) head_reduced_ = false;
}

void FsdpCuda::reduce(int unit, size_t first, size_t last) {
  const size_t i = index(unit);
  const std::vector<UnitParam>& ps = params(unit);
  const cudaStream_t r = reduce_stream_.get();
  GradSlot& slot = grad_slot(unit);
  // Parameter b's gradient (W·chunk) in the slot, and this rank's chunk of it (in place).
  auto full = [&](size_t b) { return slot.data + grad_at(ps[b]); };
  auto mine = [&](size_t b) { return full(b) + rank_ * ps[b].chunk; };
  Probe* p = options_.measure_overlap ? &probe(false, false) : nullptr;
  if (p) p->from.record(r);
#ifdef PYLON_HAVE_NCCL
  if (world_ > 1 && options_.reduce_bf16) {  // cast, reduce in bf16, widen into the fp32 chunk
    for (size_t b = first; b < last; ++b) {    // one bf16 buffer, so one parameter at a time
      const int64_t n = ps[b].chunk;
      bf16* narrow = reduce_bf16_.as<bf16>();
      cast_f32_to_bf16(narrow, full(b), world_ * n, r);
      reduce_comm_->reduce_scatter(narrow, narrow + rank_ * n, static_cast<size_t>(n), ncclBfloat16, r);
      cast_bf16_to_f32(mine(b), narrow + rank_ * n, n, r);
    }
  } else if (world_ > 1) {  // one reduce-scatter per parameter, launched together
    reduce_comm_->group_start();
    for (size_t b = first; b < last; ++b)
      reduce_comm_->reduce_scatter(full(b), mine(b), static_cast<size_t>(ps[b].chunk), ncclFloat32, r);
    reduce_comm_->group_end();
  }
#endif
  if (p) p->to.record(r);
  // Then per run of parameters whose chunks lie back to back both in the slot and in the shard
  // (all of a unit's at a world of one; one at a time otherwise): AdamW, or keep the gradient.
  for (size_t b = first; b < last;) {
    size_t e = b + 1;
    while (e < last && mine(e) == mine(e - 1) + ps[e - 1].chunk) ++e;
    const int64_t at = offset(unit) + ps[b].shard_offset;  // into the flat shard buffers
    const int64_t n = ps[e - 1].shard_offset + ps[e - 1].chunk - ps[b].shard_offset;
    if (options_.fused_optimizer) {
      const GradSumOfSquares norm{scalars_.as<float>() + 1, reduce_ws_.get()};  // AdamW adds Σ g²
      adamw_update(master_.as<float>() + at, m_.as<float>() + at, v_.as<float>() + at, mine(b), persistent_bf16(at),
                   n, constants(), nullptr, r, &norm);
    } else if (first_reduce_) {
      PYLON_CUDA_CHECK(cudaMemcpyAsync(grad_.as<float>() + at, mine(b), static_cast<size_t>(n) * sizeof(float),
                                       cudaMemcpyDeviceToDevice, r));
    } else {
      accumulate_f32(grad_.as<float>() + at, mine(b), n, r);
    }
    b = e;
  }
  const bool head = unit < 0 && split_ && first == 1;
  if (options_.fused_optimizer && !head) shard_ready_[i].record(r);  // the head has head_ready_
  slot.released.record(r);
  if (head) head_released_.record(r);
}

void FsdpCuda::end_step(float* host_scalars) {
  const cudaStream_t r = reduce_stream_.get();
  float* loss_sum = scalars_.as<float>();
  float* norm_sq = loss_sum + 1;
  float* clip = loss_sum + 2;
  compute_end_[parity_].record(compute_);
  compute_end_[parity_].wait_on(r);  // the losses are summed; every reduction is enqueued
  const int64_t total = static_cast<int64_t>(master_.bytes() / sizeof(float));
  auto all_reduce_scalars = [&] {  // Σ losses and Σ g² over the ranks
#ifdef PYLON_HAVE_NCCL
    if (world_ > 1) reduce_comm_->all_reduce(loss_sum, loss_sum, 2, ncclFloat32, ncclSum, r);
#endif
  };
  auto adamw = [&](const float* grad_scale, const GradSumOfSquares* norm) {
    adamw_update(master_.as<float>(), m_.as<float>(), v_.as<float>(), grad_.as<float>(),
                 persistent_bf16(0), total, constants(), grad_scale, r, norm);
    for (Event& e : shard_ready_) e.record(r);
  };
  if (options_.fused_optimizer) {  // AdamW and Σ g² ran per unit
    all_reduce_scalars();
  } else if (grad_clip_ > 0) {  // the norm is needed before the update
    sum_of_squares(norm_sq, grad_.as<float>(), total, reduce_ws_.get(), r);
    all_reduce_scalars();
    clip_coefficient(clip, norm_sq, grad_clip_, r);
    adamw(clip, nullptr);
  } else {  // no clipping: AdamW sums the squares as it reads the gradient
    const GradSumOfSquares norm{norm_sq, reduce_ws_.get()};
    adamw(nullptr, &norm);
    all_reduce_scalars();
  }
  PYLON_CUDA_CHECK(cudaMemcpyAsync(host_scalars, loss_sum, 2 * sizeof(float), cudaMemcpyDeviceToHost, r));
  step_done_[parity_].record(r);
  // The compute stream joins the side streams: the next step starts once this one has ended (its
  // scalars have reached the host before they are zeroed), and a capture ends on one stream. (The
  // gather stream's work was all waited for by compute; in a capture it must still join.)
  step_done_[parity_].wait_on(compute_);
  gathers_done_.record(gather_stream_.get());
  gathers_done_.wait_on(compute_);
}

OverlapStats FsdpCuda::overlap(int64_t t) const {
  if (!options_.measure_overlap) return {};
  const int p = static_cast<int>(t % 2);
  OverlapStats s;
  for (size_t k = 0; k < probes_used_[p]; ++k) {
    const Probe& q = probes_[p][k];
    const double ms = q.to.elapsed_since(q.from);
    if (q.wait)
      s.exposed_wait_ms += ms;
    else
      (q.gather ? s.gather_ms : s.reduce_ms) += ms;
  }
  s.tail_ms = step_done_[p].elapsed_since(compute_end_[p]);
  return s;
}

}  // namespace pylon::cuda
