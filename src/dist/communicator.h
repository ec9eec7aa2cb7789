// The collectives FSDP needs, behind one interface: Gloo over TCP on CPU ranks now, NCCL on GPUs
// later. Every call is blocking and collective (all ranks call it in the same order with the same
// sizes) and bounded in time: a peer that died or hangs makes it throw pylon::Error naming this
// rank, the collective and the timeout, never wait forever.
#pragma once

#include <cstddef>
#include <memory>

namespace pylon {

class Communicator {
 public:
  virtual ~Communicator() = default;

  virtual int rank() const = 0;
  virtual int world() const = 0;

  // out (world·n) = concatenation over ranks of in (n): rank r's in lands at out[r·n, (r+1)·n).
  virtual void all_gather(const float* in, float* out, size_t n) = 0;
  // out (n) = Σ over ranks of their in[rank()·n, (rank()+1)·n); in has world·n elements and is
  // left unchanged. Deterministic: a fixed summation order per world size, so reruns (and resumed
  // runs) get the same bits.
  virtual void reduce_scatter_sum(const float* in, float* out, size_t n) = 0;
  // data (n) = Σ over ranks of data, in place; identical bits on every rank.
  virtual void all_reduce_sum(float* data, size_t n) = 0;
  virtual void all_reduce_sum(double* data, size_t n) = 0;
  // bytes of data from root to every rank.
  virtual void broadcast(void* data, size_t bytes, int root) = 0;
  virtual void barrier() = 0;
  // Gives up on the peers: every later call throws at once. For error paths that must not wait.
  virtual void abort() = 0;
};

// The world of one: every collective is a copy. The single-process trainer runs through it.
std::unique_ptr<Communicator> make_single_rank_communicator();

}  // namespace pylon
