// The compiled tile shapes of the attention kernels: one list per kernel family and pass. The launchers
// (attention_*.cu) instantiate and dispatch exactly these shapes, and compiled_attention_tiles
// (attention.cu) enumerates them for the tile sweep and the tests, so a shape is added here, in one
// line, and nowhere else. Which shape runs by default is default_attention_tiles' choice (attention.cu);
// every default shape must be listed here.
//
// Each list is an X-macro: PYLON_ATTENTION_..._TILES(X) expands to X(head_dim, a, b) (or X(head_dim, a))
// once per shape, in the order compiled_attention_tiles lists them. Every head dim listed in one pass
// of a family must be listed in each pass of that family (attention.cu checks this at compile time).
// Plain macros, no includes: this header is read by host and device code alike.
#pragma once

// mma.sync kernels (attention_forward.cu, attention_backward.cu; any sm_80+ GPU), 16 rows per warp.
// Forward: X(head_dim, fwd_warps, fwd_block_n), fwd_block_n keys per shared-memory tile.
#define PYLON_ATTENTION_MMA_FORWARD_TILES(X) \
  X(64, 4, 64)                               \
  X(64, 4, 128)                              \
  X(64, 8, 64)                               \
  X(128, 4, 64)                              \
  X(128, 4, 32)                              \
  X(128, 8, 64)                              \
  X(128, 8, 32)
// Backward dk/dv pass: X(head_dim, dkdv_warps, dkdv_block_m), dkdv_block_m queries per tile.
#define PYLON_ATTENTION_MMA_DKDV_TILES(X) \
  X(64, 4, 64)                            \
  X(64, 8, 64)                            \
  X(128, 4, 64)                           \
  X(128, 4, 32)                           \
  X(128, 8, 64)                           \
  X(128, 8, 32)
// Backward dq pass: X(head_dim, dq_warps, dq_block_n), dq_block_n keys per tile.
#define PYLON_ATTENTION_MMA_DQ_TILES(X) \
  X(64, 4, 64)                          \
  X(64, 8, 64)                          \
  X(128, 4, 64)                         \
  X(128, 4, 32)                         \
  X(128, 8, 64)                         \
  X(128, 8, 32)

// wgmma kernels (attention_forward_wgmma.cu, attention_backward_wgmma.cu; sm_90a), warps a multiple of 4
// (one warpgroup per 4 warps, 64 rows each).
// Forward: X(head_dim, fwd_warps, fwd_block_n), fwd_block_n in {64, 128}.
#define PYLON_ATTENTION_WGMMA_FORWARD_TILES(X) \
  X(64, 4, 64)                                 \
  X(64, 4, 128)                                \
  X(64, 8, 64)                                 \
  X(64, 8, 128)                                \
  X(128, 4, 64)                                \
  X(128, 4, 128)                               \
  X(128, 8, 64)                                \
  X(128, 8, 128)
// Backward dk/dv pass: X(head_dim, dkdv_warps, dkdv_block_m), dkdv_block_m = attention_bwd::kTile (64).
#define PYLON_ATTENTION_WGMMA_DKDV_TILES(X) \
  X(64, 4, 64)                              \
  X(64, 8, 64)                              \
  X(128, 4, 64)                             \
  X(128, 8, 64)
// Backward dq pass: X(head_dim, dq_warps, dq_block_n), dq_block_n = attention_bwd::kTile (64).
#define PYLON_ATTENTION_WGMMA_DQ_TILES(X) \
  X(64, 4, 64)                            \
  X(64, 8, 64)                            \
  X(128, 4, 64)                           \
  X(128, 8, 64)

// Warp-specialised kernels (attention_forward_ws.cu, attention_backward_ws.cu; sm_90a): 128 rows per
// block in two consumer warpgroups, and a producer.
// Forward: X(head_dim, fwd_block_n, fwd_stages), fwd_block_n keys per stage of the ring.
#define PYLON_ATTENTION_WS_FORWARD_TILES(X) \
  X(64, 64, 3)                              \
  X(64, 128, 2)                             \
  X(64, 128, 3)                             \
  X(128, 64, 3)                             \
  X(128, 128, 2)                            \
  X(128, 128, 3)
// Backward, both passes (bwd_ws: dk/dv, dq_ws: dq; they share AttentionTiles::bwd_stages): X(head_dim,
// bwd_stages), query tiles (dk/dv) or key tiles (dq) of 64 in a ring of bwd_stages stages.
#define PYLON_ATTENTION_WS_BACKWARD_TILES(X) \
  X(64, 2)                                   \
  X(64, 3)                                   \
  X(128, 2)                                  \
  X(128, 3)
