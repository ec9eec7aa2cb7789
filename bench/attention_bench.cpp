// Times the CUDA flash attention (forward, backward) at the seed preset's shape: median of 20 runs
// after warm-up, CUDA events, TFLOP/s against the 790 TFLOP/s bf16 ceiling measured on the H200.
// Then the warp-specialised forward (not the default; bench/attention_notes.md) in every compiled shape,
// forward only. `--sweep` also times every compiled tile shape. `--kv-heads N` times grouped-query
// attention: N key/value heads (N divides 16 and 32, the shapes' query heads; default: as many as the
// query heads). Compare with bench/attention_torch_bench.py.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "core/head_layout.h"
#include "core/rng.h"
#include "ops/cuda/attention.h"
#include "ops/cuda/runtime.h"

namespace {

using pylon::cuda::DeviceBuffer;
using pylon::cuda::Event;
using bf16 = __nv_bfloat16;

constexpr double kCeilingTflops = 790.0;  // cuBLAS 8192^3 bf16 on random data, this H200 (KINDS.md)
constexpr int kWarmup = 5, kRuns = 20;

// Median milliseconds of kRuns launches of `fn`, each between its own pair of events.
double median_ms(const std::function<void()>& fn, cudaStream_t stream) {
  for (int i = 0; i < kWarmup; ++i) fn();
  std::vector<Event> starts, stops;
  for (int i = 0; i < kRuns; ++i) {
    starts.emplace_back(true);
    stops.emplace_back(true);
  }
  for (int i = 0; i < kRuns; ++i) {
    starts[i].record(stream);
    fn();
    stops[i].record(stream);
  }
  PYLON_CUDA_CHECK(cudaStreamSynchronize(stream));
  std::vector<double> ms;
  for (int i = 0; i < kRuns; ++i) ms.push_back(stops[i].elapsed_since(starts[i]));
  std::sort(ms.begin(), ms.end());
  return ms[kRuns / 2];
}

void fill_random(const DeviceBuffer& buf, size_t n, uint64_t stream) {
  std::vector<bf16> host(n);
  for (size_t i = 0; i < n; ++i)
    host[i] = __float2bfloat16(static_cast<float>(2.0 * pylon::random_uniform(7, stream, i) - 1.0));
  PYLON_CUDA_CHECK(cudaMemcpy(buf.get(), host.data(), n * sizeof(bf16), cudaMemcpyHostToDevice));
}

struct Shape {
  int B, T, H, hd;
  int kv_heads;  // 0: H (multi-head)
  pylon::HeadLayout heads() const { return {H, kv_heads > 0 ? kv_heads : H, hd}; }
};

// The tensors of one shape, filled with random bf16 once: qkv and dout read, the rest written.
struct Buffers {
  explicit Buffers(const Shape& s)
      : heads(s.heads()),
        n_qkv(static_cast<size_t>(s.B) * s.T * heads.row()),
        n_out(static_cast<size_t>(s.B) * s.T * heads.q_dim()),
        ws_bytes(pylon::cuda::attention_backward_workspace_bytes(s.B, s.T, heads)),
        qkv(n_qkv * sizeof(bf16)),
        dqkv(n_qkv * sizeof(bf16)),
        out(n_out * sizeof(bf16)),
        dout(n_out * sizeof(bf16)),
        lse(static_cast<size_t>(s.B) * s.H * s.T * sizeof(float)),
        ws(ws_bytes) {
    fill_random(qkv, n_qkv, 1);
    fill_random(dout, n_out, 2);
  }
  pylon::HeadLayout heads;
  size_t n_qkv, n_out, ws_bytes;
  DeviceBuffer qkv, dqkv, out, dout, lse, ws;
};

// Times forward (and backward) at one shape and mask with the given tiles; prints one line for each.
void bench_shape(const Shape& s, Buffers& buf, bool causal, const pylon::cuda::detail::AttentionTiles& tiles,
                 bool print_tiles, bool backward = true) {
  const pylon::HeadLayout& heads = buf.heads;
  pylon::cuda::Stream stream;
  const cudaStream_t st = stream.get();
  DeviceBuffer &qkv = buf.qkv, &dqkv = buf.dqkv, &out = buf.out, &dout = buf.dout, &lse = buf.lse, &ws = buf.ws;
  const size_t ws_bytes = buf.ws_bytes;

  const double fwd_ms = median_ms(
      [&] {
        pylon::cuda::detail::attention_forward_tiled(tiles, out.as<bf16>(), lse.as<float>(), qkv.as<bf16>(), s.B,
                                                     s.T, heads, causal, st);
      },
      st);
  const double bwd_ms = !backward ? 0.0 : median_ms(
      [&] {
        pylon::cuda::detail::attention_backward_tiled(tiles, dqkv.as<bf16>(), dout.as<bf16>(), qkv.as<bf16>(),
                                                      out.as<bf16>(), lse.as<float>(), s.B, s.T, heads, causal,
                                                      ws.get(), ws_bytes, st);
      },
      st);

  // Forward: 2 products of 2·T²·hd each per (b, h); causal does half. Backward: 2.5x the forward.
  const double fwd_flop = 4.0 * s.B * s.H * static_cast<double>(s.T) * s.T * s.hd * (causal ? 0.5 : 1.0);
  char tile_text[96] = "";
  if (print_tiles && tiles.bwd_ws)
    std::snprintf(tile_text, sizeof(tile_text), "  ws dkdv%s %d stages%s (fwd%s: wgmma)", tiles.dq_ws ? " + dq" : "",
                  tiles.bwd_stages, tiles.bwd_pingpong ? " ping-pong" : "", tiles.dq_ws ? "" : ", dq");
  else if (print_tiles && tiles.fwd_ws)
    std::snprintf(tile_text, sizeof(tile_text), "  ws fwd %d keys x %d stages", tiles.fwd_block_n, tiles.fwd_stages);
  else if (print_tiles)
    std::snprintf(tile_text, sizeof(tile_text), "  %s fwd %dw/%d  dkdv %dw/%d  dq %dw/%d", tiles.wgmma ? "wgmma" : "mma", tiles.fwd_warps,
                  tiles.fwd_block_n, tiles.dkdv_warps, tiles.dkdv_block_m, tiles.dq_warps, tiles.dq_block_n);
  for (int pass = 0; pass < (backward ? 2 : 1); ++pass) {
    const double ms = pass == 0 ? fwd_ms : bwd_ms, flop = pass == 0 ? fwd_flop : 2.5 * fwd_flop;
    const double tflops = flop / (ms * 1e-3) / 1e12;
    std::printf("B%d T%d H%-2d KV%-2d hd%-3d  %-6s  %s  %8.3f ms  %6.1f TFLOP/s  %5.1f%%%s\n", s.B, s.T, s.H,
                heads.kv_heads, s.hd, causal ? "causal" : "full", pass == 0 ? "fwd" : "bwd", ms, tflops,
                100.0 * tflops / kCeilingTflops, tile_text);
  }
}

}  // namespace

int main(int argc, char** argv) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);  // each line out at once, also into a pipe that a timeout may cut
  if (pylon::cuda::device_count() == 0) {
    std::fprintf(stderr, "pylon_bench_attention: no CUDA device\n");
    return 1;
  }
  bool sweep = false;
  int kv_heads = 0;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--sweep") == 0) {
      sweep = true;
    } else if (std::strcmp(argv[i], "--kv-heads") == 0 && i + 1 < argc) {
      kv_heads = std::atoi(argv[++i]);
    } else {
      std::fprintf(stderr, "usage: pylon_bench_attention [--sweep] [--kv-heads N]\n");
      return 1;
    }
  }
  if (kv_heads < 0 || (kv_heads > 0 && (16 % kv_heads != 0 || 32 % kv_heads != 0))) {
    std::fprintf(stderr, "pylon_bench_attention: --kv-heads %d does not divide the shapes' 16 and 32 heads\n",
                 kv_heads);
    return 1;
  }
  try {
    const auto tiles128 = pylon::cuda::detail::default_attention_tiles(128);
    const Shape shapes[] = {{8, 1024, 16, 128, kv_heads}, {8, 1024, 32, 64, kv_heads}};  // D = 2048: the seed preset
    std::printf("flash attention (%s kernels), bf16, median of %d (ceiling %.0f TFLOP/s)\n",
                tiles128.wgmma ? "wgmma" : "mma.sync", kRuns, kCeilingTflops);
    for (const Shape& s : shapes) {
      Buffers buf(s);
      for (bool causal : {false, true})
        bench_shape(s, buf, causal, pylon::cuda::detail::default_attention_tiles(s.hd), false);
    }
    if (tiles128.wgmma) {
      std::printf("\nwarp-specialised forward (TMA producer, 2 consumer warpgroups of 64 rows)\n");
      for (const Shape& s : shapes) {
        Buffers buf(s);
        for (bool causal : {false, true})
          for (const auto& t : pylon::cuda::detail::compiled_attention_tiles(s.hd))
            if (t.fwd_ws) bench_shape(s, buf, causal, t, true, false);
      }
      std::printf("\nwarp-specialised dk/dv pass (TMA producer warp, 2 consumer warpgroups of 64 keys); bwd = dsum + dk/dv + dq\n");
      for (const Shape& s : shapes) {
        Buffers buf(s);
        for (bool causal : {false, true})
          for (const auto& t : pylon::cuda::detail::compiled_attention_tiles(s.hd))
            if (t.bwd_ws) bench_shape(s, buf, causal, t, true);
      }
    }
    if (!sweep) return 0;

    std::printf("\ntile sweep\n");
    for (const Shape& s : shapes) {
      Buffers buf(s);
      for (bool causal : {false, true})
        for (const auto& t : pylon::cuda::detail::compiled_attention_tiles(s.hd))
          if (!t.fwd_ws && !t.bwd_ws) bench_shape(s, buf, causal, t, true);  // the ws kernels: above
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "pylon_bench_attention: %s\n", e.what());
    return 1;
  }
  return 0;
}
