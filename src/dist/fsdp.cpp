// FSDP on one rank: gather, free and reduce-scatter per unit around MiniLLM's hooks; the
// optimizer and clipping on shards.
#include "dist/fsdp.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <limits>
#include <set>

#include "core/error.h"
#include "model/weights.h"
#include "ops/cpu/adamw.h"
#include "profile/tracer.h"

namespace pylon {

PagedBuffer::PagedBuffer(size_t n) : n_(n) {
  const size_t page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  bytes_ = std::max<size_t>((n * sizeof(float) + page - 1) / page * page, page);
  void* p = ::mmap(nullptr, bytes_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) throw std::bad_alloc();
  data_ = static_cast<float*>(p);  // zero-filled by the kernel, no memory until touched
}

PagedBuffer::~PagedBuffer() {
  if (data_) ::munmap(data_, bytes_);
}

void PagedBuffer::release(size_t begin, size_t end) {
  PYLON_ASSERT(begin <= end && end <= n_);
  const size_t page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  auto* base = reinterpret_cast<char*>(data_);
  const size_t b = begin * sizeof(float), e = end * sizeof(float);
  const size_t first_page = (b + page - 1) / page * page, last_page = e / page * page;
  if (first_page >= last_page) {
    std::memset(base + b, 0, e - b);
    return;
  }
  std::memset(base + b, 0, first_page - b);
  std::memset(base + last_page, 0, e - last_page);
  PYLON_CHECK(::madvise(base + first_page, last_page - first_page, MADV_DONTNEED) == 0,
              "madvise(MADV_DONTNEED) of ", last_page - first_page, " bytes failed: ", std::strerror(errno));
}

FsdpModel::FsdpModel(const ShardLayout& layout, Communicator& comm, FsdpOptions options)
    : layout_(layout), comm_(comm), options_(options), gathered_(layout.units().size(), false),
      gather_ticket_(layout.units().size(), 0) {
  PYLON_CHECK(comm.world() == layout.world(), "layout for ", layout.world(), " ranks, communicator has ",
              comm.world());
  const ParamTable& table = layout.table();
  param_ptrs_.resize(table.params.size()), grad_ptrs_.resize(table.params.size());
  shards_.resize(layout.units().size());
  int64_t most = 0;
  for (size_t i = 0; i < shards_.size(); ++i) {
    const ShardUnit& u = layout.units()[i];
    const size_t s = static_cast<size_t>(u.shard);
    shards_[i].param.assign(s, 0.f), shards_[i].grad.assign(s, 0.f);
    shards_[i].m.assign(s, 0.f), shards_[i].v.assign(s, 0.f);
    most = std::max(most, u.shard);
    float *params = shards_[i].param.data(), *grads = shards_[i].grad.data();  // world 1: the unit
    if (sharded()) {
      unit_params_.push_back(std::make_unique<PagedBuffer>(static_cast<size_t>(u.padded)));
      unit_grads_.push_back(std::make_unique<PagedBuffer>(static_cast<size_t>(u.padded)));
      params = unit_params_.back()->data(), grads = unit_grads_.back()->data();
    }
    for (const UnitParam& p : u.params) {
      param_ptrs_[static_cast<size_t>(p.param)] = params + p.unit_offset;
      grad_ptrs_[static_cast<size_t>(p.param)] = grads + p.unit_offset;
    }
  }
  if (sharded()) {
    reduced_.resize(static_cast<size_t>(most));
    if (options_.prefetch) queue_ = std::make_unique<CollectiveQueue>();
    if (options_.poison_resharded)
      for (const ShardUnit& u : layout.units()) free_params(u.id);
  }
}

void FsdpModel::init_params(uint64_t seed) {
  for (size_t i = 0; i < shards_.size(); ++i)
    init_shard(layout_, layout_.units()[i], comm_.rank(), seed, shards_[i].param.data());
}

void FsdpModel::load_params(const SafetensorsReader& file) {
  const ParamTable& table = layout_.table();
  check_no_unexpected_tensors(file, table);
  const int r = comm_.rank();
  for (size_t i = 0; i < shards_.size(); ++i) {
    const ShardUnit& u = layout_.units()[i];
    float* out = shards_[i].param.data();
    std::fill(out, out + u.shard, 0.f);
    for_each_piece(u, r, [&](const UnitParam& p, int64_t b, int64_t e, int64_t at) {
      const ParamInfo& info = table.params[static_cast<size_t>(p.param)];
      read_param_range(file, info, b, e, out + at);
    });
  }
}

// One all-gather per parameter: rank r's chunk of each lands after the lower ranks' chunks, so
// every parameter comes out whole and contiguous at its unit_offset.
void FsdpModel::all_gather_unit(const ShardUnit& u, const float* shard, float* unit) {
  for (const UnitParam& p : u.params)
    comm_.all_gather(shard + p.shard_offset, unit + p.unit_offset, static_cast<size_t>(p.chunk));
}

void FsdpModel::start_gather(int unit) {
  const size_t i = static_cast<size_t>(unit + 1);
  if (!sharded() || gathered_[i]) return;
  const ShardUnit& u = layout_.units()[i];
  gathered_[i] = true;
  gathered_floats_ += u.numel;
  profile::record_counter("fsdp_gathered_param_bytes", static_cast<double>(gathered_floats_) * sizeof(float));
  auto task = [this, i, &u] {  // every rank's (shard) -> the (padded) unit buffer
    PYLON_RANGE_SHAPES("collective", "all_gather", {u.shard, comm_.world()});
    all_gather_unit(u, shards_[i].param.data(), unit_params_[i]->data());
  };
  if (queue_)
    gather_ticket_[i] = queue_->submit(task);
  else
    task();
}

void FsdpModel::gather(int unit) {
  start_gather(unit);
  const size_t i = static_cast<size_t>(unit + 1);
  if (queue_ && gather_ticket_[i]) {
    PYLON_RANGE("collective", "wait_all_gather");
    queue_->wait(gather_ticket_[i]);
  }
}

void FsdpModel::free_params(int unit) {
  if (!sharded()) return;  // the unit is the shard
  const size_t i = static_cast<size_t>(unit + 1);
  const ShardUnit& u = layout_.units()[i];
  if (queue_ && gather_ticket_[i]) queue_->wait(gather_ticket_[i]);  // no gather may still write it
  if (gathered_[i]) {
    gathered_floats_ -= u.numel;
    profile::record_counter("fsdp_gathered_param_bytes", static_cast<double>(gathered_floats_) * sizeof(float));
  }
  float* buffer = unit_params_[i]->data();
  if (options_.poison_resharded)
    std::fill(buffer, buffer + u.padded, std::numeric_limits<float>::quiet_NaN());
  else if (options_.return_memory)
    unit_params_[i]->release(0, static_cast<size_t>(u.padded));
  gathered_[i] = false;
}

void FsdpModel::reduce_grads(int unit) {
  // World 1: the model wrote the gradient shard. No-sync micro-step: keep accumulating locally.
  if (!sharded() || !reduce_grads_) return;
  const size_t i = static_cast<size_t>(unit + 1);
  const ShardUnit& u = layout_.units()[i];
  // Σ over ranks of my slice of the (padded, zero padding) unit gradient -> (shard); += shard;
  // the unit buffer starts the next backward at zero.
  auto task = [this, i, &u] {
    {
      PYLON_RANGE_SHAPES("collective", "reduce_scatter", {u.padded});
      for (const UnitParam& p : u.params)  // each parameter's dim-0 chunks
        comm_.reduce_scatter_sum(unit_grads_[i]->data() + p.unit_offset, reduced_.data() + p.shard_offset,
                                 static_cast<size_t>(p.chunk));
    }
    float* g = shards_[i].grad.data();
    for (int64_t k = 0; k < u.shard; ++k) g[k] += reduced_[static_cast<size_t>(k)];
    if (options_.return_memory)
      unit_grads_[i]->release(0, static_cast<size_t>(u.padded));
    else
      std::fill(unit_grads_[i]->data(), unit_grads_[i]->data() + u.padded, 0.f);
  };
  if (queue_)
    queue_->submit(task);
  else
    task();
}

// Unit order: forward −1, 0 .. L−1 (the root stays for backward); backward −1, L−1 .. 0. Each
// hook that gathers a unit also starts the next one's gather, which then runs on the worker
// while this unit computes.
void FsdpModel::before_forward(int unit) {
  gather(unit);
  const int blocks = static_cast<int>(layout_.units().size()) - 1;
  if (unit + 1 < blocks) start_gather(unit + 1);
}

void FsdpModel::after_forward(int unit) {
  // The root (embedding, head) stays gathered for backward, which starts with the head.
  if (unit < 0 ? forward_only_ : options_.reshard_after_forward) free_params(unit);
}

void FsdpModel::before_backward(int unit) {
  gather(unit);
  const int blocks = static_cast<int>(layout_.units().size()) - 1;
  const int next = unit < 0 ? blocks - 1 : unit - 1;
  if (next >= 0) start_gather(next);
}

void FsdpModel::after_backward(int unit) {
  reduce_grads(unit);
  free_params(unit);  // the optimizer step changes the shards: the next pass gathers afresh
  if (unit < 0) sync();  // the step's last unit: its collectives end with the backward
}

void FsdpModel::sync() {
  if (queue_) {
    PYLON_RANGE("collective", "wait_reduce_scatter");
    queue_->drain();
  }
}

void FsdpModel::zero_grad() {
  sync();
  for (auto& s : shards_) std::fill(s.grad.begin(), s.grad.end(), 0.f);
}

double FsdpModel::local_grad_sum_of_squares() const {
  double total = 0;
  for (const auto& s : shards_) total += cpu::sum_of_squares(s.grad.data(), static_cast<int64_t>(s.grad.size()));
  return total;
}

void FsdpModel::scale_grads(float s) {
  sync();
  for (auto& sh : shards_) cpu::scale_in_place(sh.grad.data(), static_cast<int64_t>(sh.grad.size()), s);
}

void FsdpModel::adamw_step(float lr, const AdamWConfig& c, int64_t t) {
  sync();
  for (auto& s : shards_)
    cpu::adamw_update(s.param.data(), s.grad.data(), s.m.data(), s.v.data(),
                 static_cast<int64_t>(s.param.size()), lr, c, t);
}

std::vector<float> FsdpModel::gather_full_params(int root) {
  sync();
  std::vector<float> full, unit;
  if (comm_.rank() == root) full.resize(static_cast<size_t>(layout_.table().total));
  for (size_t i = 0; i < shards_.size(); ++i) {
    const ShardUnit& u = layout_.units()[i];
    unit.resize(static_cast<size_t>(u.padded));
    {
      PYLON_RANGE_SHAPES("collective", "all_gather", {u.shard, comm_.world()});
      all_gather_unit(u, shards_[i].param.data(), unit.data());
    }
    if (full.empty()) continue;
    for (const UnitParam& p : u.params)
      std::memcpy(full.data() + p.flat_offset, unit.data() + p.unit_offset,
                  static_cast<size_t>(p.numel) * sizeof(float));
  }
  return full;
}

}  // namespace pylon
