// Embedding gather (bf16 or fp32 table), and its deterministic backward: a segmented sum over positions sorted by id.
//
// Backward (N = 8192 ids, V = 32000, D = 2048):
// 1. A stable radix sort (CUB) of (id, position) pairs over the bits of V puts the positions of
//    each id next to each other, ascending.
// 2. The sorted list is cut into segments of kSegmentRows entries; one warp per (segment, tile of
//    32·VEC columns) sums the rows of each run of equal ids inside its segment, in order. A run that
//    lies inside one segment is added straight into dtable (one read-modify-write, by one warp).
//    A run that crosses segments leaves its piece in the segment where it starts in `tail[seg]`
//    and its pieces in later segments in `head[seg]`.
// 3. One warp per segment whose last run starts there and continues adds tail + the following
//    heads, in segment order, into dtable.
// Every sum has one fixed order (independent of the launch shape) and no atomics are used. Work is
// spread evenly whatever the id frequencies: a Zipf-frequent id (9% of positions) costs the same
// as uniform ids, and the segment warps all run at once (N/16·D/256 = 4096 warps here).
#include <cub/device/device_radix_sort.cuh>

#include "core/error.h"
#include "ops/cuda/check.h"
#include "ops/cuda/embedding.h"
#include "ops/cuda/kernel_util.cuh"

namespace pylon::cuda {
namespace {

using detail::align_up;
using detail::ceil_div;
constexpr int kThreads = 256;
constexpr int kSegmentRows = 16;
constexpr int kRowsInFlight = 4;
constexpr int kWarpsPerBlock = kThreads / detail::kWarpSize;

template <typename Act, int VEC>
__global__ void embedding_forward_kernel(Act* out, const int32_t* ids, const Act* table, int N, int D) {
  const int64_t vecs_per_row = D / VEC, total = static_cast<int64_t>(N) * vecs_per_row;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t v = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; v < total; v += stride) {
    const int64_t row = v / vecs_per_row, col = (v % vecs_per_row) * VEC;
    const Act* src = table + static_cast<int64_t>(ids[row]) * D + col;
    Act* dst = out + row * D + col;
    if constexpr (VEC == 8) {  // 16 bytes of bf16, 32 of fp32
      constexpr int kWords = static_cast<int>(VEC * sizeof(Act) / sizeof(uint4));
#pragma unroll
      for (int k = 0; k < kWords; ++k) reinterpret_cast<uint4*>(dst)[k] = reinterpret_cast<const uint4*>(src)[k];
    } else {
      *dst = *src;
    }
  }
}

__global__ void iota_kernel(int32_t* out, int N) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < N; i += gridDim.x * blockDim.x) out[i] = i;
}

// dst[0..VEC) += v (fp32).
template <int VEC>
__device__ __forceinline__ void add_into(float* dst, const float (&v)[VEC]) {
  float cur[VEC];
  detail::load_f32<VEC>(cur, dst);
#pragma unroll
  for (int e = 0; e < VEC; ++e) cur[e] += v[e];
  detail::store_f32<VEC>(dst, cur);
}

// Warp per (segment, column tile): grid (segments / warps per block, tiles).
template <typename Act, int VEC>
__global__ void __launch_bounds__(kThreads) embedding_backward_segments_kernel(
    float* dtable, float* head, float* tail, const Act* dout, const int32_t* sorted_ids,
    const int32_t* sorted_pos, int N, int D) {
  const int lane = threadIdx.x % detail::kWarpSize;
  const int seg = blockIdx.x * kWarpsPerBlock + threadIdx.x / detail::kWarpSize;
  const int r0 = seg * kSegmentRows, r1 = min(N, r0 + kSegmentRows);
  if (r0 >= N) return;
  const int col = (blockIdx.y * detail::kWarpSize + lane) * VEC;
  const bool active = col < D;
  int cur = sorted_ids[r0];
  bool piece_is_head = r0 > 0 && sorted_ids[r0 - 1] == cur;  // the first run began earlier
  float acc[VEC] = {};
  for (int j0 = r0; j0 < r1; j0 += kRowsInFlight) {
    float rows[kRowsInFlight][VEC];
#pragma unroll
    for (int u = 0; u < kRowsInFlight; ++u)
      if (j0 + u < r1 && active)
        detail::load_vec<VEC>(rows[u], dout + static_cast<int64_t>(sorted_pos[j0 + u]) * D + col);
#pragma unroll
    for (int u = 0; u < kRowsInFlight; ++u) {
      const int j = j0 + u;
      if (j >= r1) continue;
      if (active)
#pragma unroll
        for (int e = 0; e < VEC; ++e) acc[e] += rows[u][e];
      const int next = j + 1 < N ? sorted_ids[j + 1] : -1;
      if (next == cur && j + 1 < r1) continue;  // the run goes on inside this segment
      if (active) {                              // the piece of run `cur` in this segment ends at j
        const int64_t slot = static_cast<int64_t>(seg) * D + col;
        if (piece_is_head) {
          detail::store_f32<VEC>(head + slot, acc);
        } else if (next == cur) {
          detail::store_f32<VEC>(tail + slot, acc);
        } else {
          add_into<VEC>(dtable + static_cast<int64_t>(cur) * D + col, acc);
        }
      }
#pragma unroll
      for (int e = 0; e < VEC; ++e) acc[e] = 0.f;
      cur = next;
      piece_is_head = false;
    }
  }
}

// Warp per (segment, column tile) whose last run starts in the segment and continues past it:
// dtable[id] += tail[seg] + head[seg + 1] + ... while the run lasts.
template <int VEC>
__global__ void __launch_bounds__(kThreads) embedding_backward_carries_kernel(
    float* dtable, const float* head, const float* tail, const int32_t* sorted_ids, int N, int D) {
  const int lane = threadIdx.x % detail::kWarpSize;
  const int seg = blockIdx.x * kWarpsPerBlock + threadIdx.x / detail::kWarpSize;
  const int segments = static_cast<int>(ceil_div(N, kSegmentRows));
  const int r0 = seg * kSegmentRows, r1 = min(N, r0 + kSegmentRows);
  if (r0 >= N || r1 >= N) return;
  const int id = sorted_ids[r1 - 1];
  if (sorted_ids[r1] != id) return;                                  // the last run ends here
  if (r0 > 0 && sorted_ids[r0 - 1] == id && sorted_ids[r0] == id) return;  // it began earlier
  const int col = (blockIdx.y * detail::kWarpSize + lane) * VEC;
  if (col >= D) return;
  float acc[VEC];
  detail::load_f32<VEC>(acc, tail + static_cast<int64_t>(seg) * D + col);
  for (int k = seg + 1; k < segments && sorted_ids[k * kSegmentRows] == id; k += kRowsInFlight) {
    float pieces[kRowsInFlight][VEC];
    bool in_run[kRowsInFlight];
#pragma unroll
    for (int u = 0; u < kRowsInFlight; ++u) {
      const int kk = k + u;
      in_run[u] = kk < segments && sorted_ids[kk * kSegmentRows] == id;
      if (in_run[u]) detail::load_f32<VEC>(pieces[u], head + static_cast<int64_t>(kk) * D + col);
    }
#pragma unroll
    for (int u = 0; u < kRowsInFlight; ++u)
      if (in_run[u])
#pragma unroll
        for (int e = 0; e < VEC; ++e) acc[e] += pieces[u][e];
  }
  add_into<VEC>(dtable + static_cast<int64_t>(id) * D + col, acc);
}

// Workspace layout: sorted ids, positions, sorted positions (N int32 each), head and tail pieces
// (segments x D fp32 each), then CUB's sort scratch.
struct BackwardWorkspace {
  size_t ids_bytes, pieces_bytes, sort_bytes, total;
  int end_bit;
};

BackwardWorkspace backward_workspace(int N, int D, int V) {
  BackwardWorkspace w{};
  w.ids_bytes = align_up(sizeof(int32_t) * static_cast<size_t>(N));
  w.pieces_bytes = align_up(sizeof(float) * static_cast<size_t>(ceil_div(N, kSegmentRows)) * static_cast<size_t>(D));
  w.end_bit = 1;
  while (w.end_bit < 31 && (int64_t{1} << w.end_bit) < V) ++w.end_bit;
  PYLON_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(
      nullptr, w.sort_bytes, static_cast<const uint32_t*>(nullptr), static_cast<uint32_t*>(nullptr),
      static_cast<const int32_t*>(nullptr), static_cast<int32_t*>(nullptr), N, 0, w.end_bit));
  w.total = 3 * w.ids_bytes + 2 * w.pieces_bytes + align_up(w.sort_bytes);
  return w;
}

template <typename Act>
void launch_embedding_forward(Act* out, const int32_t* ids, const Act* table, int N, int D, cudaStream_t stream) {
  if (N <= 0 || D <= 0) return;
  if (D % 8 == 0 && detail::aligned16(out) && detail::aligned16(table)) {
    const unsigned blocks = detail::grid_size(static_cast<int64_t>(N) * (D / 8), kThreads);
    embedding_forward_kernel<Act, 8><<<blocks, kThreads, 0, stream>>>(out, ids, table, N, D);
  } else {
    const unsigned blocks = detail::grid_size(static_cast<int64_t>(N) * D, kThreads);
    embedding_forward_kernel<Act, 1><<<blocks, kThreads, 0, stream>>>(out, ids, table, N, D);
  }
  PYLON_CUDA_CHECK_LAUNCH();
}

template <typename Act>
void launch_embedding_backward(float* dtable, const Act* dout, const int32_t* ids, int N, int D, int V,
                               void* workspace, cudaStream_t stream) {
  if (N <= 0 || D <= 0) return;
  PYLON_CHECK(V > 0, "embedding_backward: vocab must be positive, got ", V);
  const BackwardWorkspace w = backward_workspace(N, D, V);
  char* ws = static_cast<char*>(workspace);
  auto* sorted_ids = reinterpret_cast<int32_t*>(ws);
  auto* positions = reinterpret_cast<int32_t*>(ws + w.ids_bytes);
  auto* sorted_pos = reinterpret_cast<int32_t*>(ws + 2 * w.ids_bytes);
  auto* head = reinterpret_cast<float*>(ws + 3 * w.ids_bytes);
  auto* tail = reinterpret_cast<float*>(ws + 3 * w.ids_bytes + w.pieces_bytes);
  void* sort_scratch = ws + 3 * w.ids_bytes + 2 * w.pieces_bytes;

  iota_kernel<<<detail::grid_size(N, kThreads), kThreads, 0, stream>>>(positions, N);
  PYLON_CUDA_CHECK_LAUNCH();
  size_t sort_bytes = w.sort_bytes;
  PYLON_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(
      sort_scratch, sort_bytes, reinterpret_cast<const uint32_t*>(ids),
      reinterpret_cast<uint32_t*>(sorted_ids), positions, sorted_pos, N, 0, w.end_bit, stream));

  const bool vec = D % 8 == 0 && detail::aligned16(dout) && detail::aligned16(dtable);
  const int tile = detail::kWarpSize * (vec ? 8 : 1);
  const int segments = static_cast<int>(ceil_div(N, kSegmentRows));
  const dim3 grid(static_cast<unsigned>(ceil_div(segments, kWarpsPerBlock)), static_cast<unsigned>(ceil_div(D, tile)));
  if (vec) {
    embedding_backward_segments_kernel<Act, 8><<<grid, kThreads, 0, stream>>>(dtable, head, tail, dout, sorted_ids,
                                                                          sorted_pos, N, D);
    PYLON_CUDA_CHECK_LAUNCH();
    embedding_backward_carries_kernel<8><<<grid, kThreads, 0, stream>>>(dtable, head, tail, sorted_ids, N, D);
  } else {
    embedding_backward_segments_kernel<Act, 1><<<grid, kThreads, 0, stream>>>(dtable, head, tail, dout, sorted_ids,
                                                                          sorted_pos, N, D);
    PYLON_CUDA_CHECK_LAUNCH();
    embedding_backward_carries_kernel<1><<<grid, kThreads, 0, stream>>>(dtable, head, tail, sorted_ids, N, D);
  }
  PYLON_CUDA_CHECK_LAUNCH();
}

}  // namespace

void embedding_forward(__nv_bfloat16* out, const int32_t* ids, const __nv_bfloat16* table, int N,
                       int D, cudaStream_t stream) {
  launch_embedding_forward(out, ids, table, N, D, stream);
}

void embedding_forward(float* out, const int32_t* ids, const float* table, int N, int D, cudaStream_t stream) {
  launch_embedding_forward(out, ids, table, N, D, stream);
}

size_t embedding_backward_workspace_bytes(int N, int D, int V) {
  return N > 0 && D > 0 ? backward_workspace(N, D, V).total : 0;
}

void embedding_backward(float* dtable, const __nv_bfloat16* dout, const int32_t* ids, int N, int D,
                        int V, void* workspace, cudaStream_t stream) {
  launch_embedding_backward(dtable, dout, ids, N, D, V, workspace, stream);
}

void embedding_backward(float* dtable, const float* dout, const int32_t* ids, int N, int D, int V,
                        void* workspace, cudaStream_t stream) {
  launch_embedding_backward(dtable, dout, ids, N, D, V, workspace, stream);
}

}  // namespace pylon::cuda
