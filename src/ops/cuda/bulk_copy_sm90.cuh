// Hopper bulk copies from shared to global memory (the copy engine, non-tensor form): one thread issues a
// copy or an fp32 add of a contiguous run of bytes, then commits and waits on its own bulk group.
// Shared memory written by ordinary stores needs fence.proxy.async.shared::cta in each writing thread and
// a barrier before the issuing thread hands it to the copy engine.
#pragma once

#include <cstdint>

namespace pylon::cuda::bulk {

// global[dst .. dst + bytes) = shared[src ..]; bytes a multiple of 16, both addresses 16-byte aligned.
__device__ __forceinline__ void store(void* dst, uint32_t src, uint32_t bytes) {
  asm volatile("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;\n" ::"l"(dst), "r"(src), "r"(bytes)
               : "memory");
}
// global[dst ..] += shared[src ..] as fp32, each element added atomically (in no fixed order against
// other adds to it); bytes a multiple of 16, both addresses 16-byte aligned.
__device__ __forceinline__ void reduce_add_f32(float* dst, uint32_t src, uint32_t bytes) {
  asm volatile("cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f32 [%0], [%1], %2;\n" ::"l"(dst), "r"(src),
               "r"(bytes)
               : "memory");
}
__device__ __forceinline__ void commit() { asm volatile("cp.async.bulk.commit_group;\n" ::: "memory"); }
// This thread's committed groups have finished reading shared memory (the source may be overwritten).
__device__ __forceinline__ void wait_read() { asm volatile("cp.async.bulk.wait_group.read 0;\n" ::: "memory"); }
// This thread's committed groups are complete, their writes visible.
__device__ __forceinline__ void wait_all() { asm volatile("cp.async.bulk.wait_group 0;\n" ::: "memory"); }

}  // namespace pylon::cuda::bulk
