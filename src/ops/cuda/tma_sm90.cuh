// Hopper (sm_90a) plumbing for warp-specialised kernels: mbarriers with transaction counts, TMA tensor
// loads (cp.async.bulk.tensor) that complete on them, setmaxnreg, and named barriers.
// Every address is a shared-window address (mma::smem_addr); an mbarrier is 8 bytes, 8-byte aligned.
//
// mbarrier phases: a barrier starts in phase 0; a phase completes when its pending arrivals reach 0 and
// the bytes announced by arrive_expect_tx have landed, then the next phase begins. wait(bar, parity)
// returns once the phase of that parity has completed, so the n-th completion (0-based) is awaited
// with parity n & 1 (a waiter never falls two phases behind in the protocols here).
#pragma once

#include <cuda.h>

#include <cstdint>

namespace pylon::cuda::tma {

__device__ __forceinline__ void mbar_init(uint32_t bar, uint32_t arrivals) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(arrivals) : "memory");
}
// After mbar_init, before the barrier that publishes the barriers to the block: makes the
// initialised barriers visible to the async proxy (TMA completions).
__device__ __forceinline__ void fence_mbar_init() {
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
}

// One arrival (release semantics: this thread's earlier reads and writes happen before the phase completes).
__device__ __forceinline__ void mbar_arrive(uint32_t bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}
// One arrival that also announces `bytes` more bytes of copies that will complete on this barrier.
__device__ __forceinline__ void mbar_arrive_expect_tx(uint32_t bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes) : "memory");
}
// Spins until the phase of this parity has completed (acquire semantics).
__device__ __forceinline__ void mbar_wait(uint32_t bar, uint32_t parity) {
  uint32_t done = 0;
  do {
    asm volatile(
        "{\n.reg .pred p;\n"
        "mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
        "selp.u32 %0, 1, 0, p;\n}\n"
        : "=r"(done)
        : "r"(bar), "r"(parity)
        : "memory");
  } while (!done);
}

// TMA: the box of `map` at coordinates (c0, c1, c2) (innermost first, in elements) into shared memory
// at `dst` (aligned as the map's swizzle needs: 1024 bytes for 128-byte swizzle); the box's full size in
// bytes completes on `bar`, out-of-bounds elements included (they land as zeros). `map` is a kernel
// parameter (__grid_constant__) or lives in global memory.
__device__ __forceinline__ void load_3d(uint32_t dst, const CUtensorMap* map, int c0, int c1, int c2, uint32_t bar) {
  asm volatile(
      "cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4}], "
      "[%5];\n" ::"r"(dst),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(c0), "r"(c1), "r"(c2), "r"(bar)
      : "memory");
}

// setmaxnreg (sm_90a): every warp of a warpgroup executes the same one. dec gives this warpgroup's
// registers above kRegs back to the block's pool; inc waits until the pool holds enough to raise it to
// kRegs. kRegs a multiple of 8 in [24, 256].
template <int kRegs>
__device__ __forceinline__ void set_max_registers_dec() {
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(kRegs));
}
template <int kRegs>
__device__ __forceinline__ void set_max_registers_inc() {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(kRegs));
}

// Named barriers (ids 1-15; 0 is __syncthreads), `threads` a multiple of 32, whole warps executing.
// sync waits until `threads` threads have synced or arrived; arrive counts this warp and moves on.
__device__ __forceinline__ void named_sync(int id, int threads) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}
__device__ __forceinline__ void named_arrive(int id, int threads) {
  asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}

}  // namespace pylon::cuda::tma
