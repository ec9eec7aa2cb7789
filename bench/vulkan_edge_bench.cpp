// Edge decode and prefill on a Vulkan device, next to the device's ceilings, for a randomly
// initialised MiniLLM at the seed preset's size (causal preset so decode uses the KV cache; the
// weights read per token are the same). For each precision: weight bytes per decoded token, the
// device's measured read bandwidth (a compute shader reading a large buffer as 16-byte words, device
// timestamps; also vkCmdCopyBuffer's read + write bytes and, for CPU devices, an OpenMP sum over host
// memory: the bound uses the largest), the bandwidth bound (bandwidth / bytes per token), measured
// decode tokens/s (median per-token time, host submit and wait included; the first token, which
// also records the step, and the fastest and slowest after it), then a second decode pass
// with device timestamps after every dispatch: device time per token against host time per token,
// and the device time per kind of dispatch; prefill tokens/s on the plain GEMM (gemm_tiled;
// gemm_rows_texel on CPU devices) and on the coopmat GEMM where it runs, each with one more
// prefill's device time per kind of dispatch (each GEMM shape's TFLOP/s), next
// to the coopmat ceiling where coopmat runs (coopmat_peak.comp: products on operands in registers);
// after each precision's decodes, the read bandwidth again (a run slow throughout then says
// whether the memory was slow too).
// --gemv-sweep 1 first times the subgroup GEMV on each of the model's matrix shapes in several
// (rows per subgroup, subgroups per row set) shapes, dispatched back to back with barriers as in
// a decode step, each layer's copy in turn (device timestamps, mean of 30 dispatches after a
// warm-up run). --decode-paths measures decode on each listed path (auto: the device's default;
// ops: a dispatch per op; persistent: the persistent kernel, as many blocks a dispatch as share
// buffers, persistent:N on a grid of N workgroups, persistent:NxT of N workgroups of T threads,
// any of them /B: at most B blocks a dispatch), a decoder each, in turn in one run.
// --attention-chunk K: the persistent kernel's keys per attention item (a multiple of 32; 0: its
// own choice, >= 128). --layer-loads N, --head-loads N, --head-rows R, --head-groups G: the
// persistent kernel's tuning (vk::InferenceOptions; 0: its measured choices). --matmul-head 1: the
// decode head on matmul's GEMV. --pipeline-stats 1 prints each pipeline's compiler statistics
// (registers, spills; VK_KHR_pipeline_executable_properties). --timeline 1: where a
// block's time goes, step by step and workgroup by workgroup, from the kernel's own clock marks
// (print_timeline); --timeline-csv DIR as well, and every mark of the last 8 tokens into
// DIR/timeline_<quant>.csv. --buffer-cap-mb N caps every storage binding at N MiB (the
// weights then go a buffer per tensor where the model is larger: a persistent dispatch per block).
// --warmup-ms MS (default 1000): the GPU kept busy that long after each step that builds pipelines
// and before the timed runs (GpuWarmup; not on CPU devices). Prefill runs once per GEMM the device
// has: plain, coopmat (VK_KHR_cooperative_matrix), coopmat2 (VK_NV_cooperative_matrix2), the last
// once per tile of --coopmat2-tiles TOKENSxROWSxK[/SPLITS],... (default 0x0x0; zeros, TOKENS and
// ROWS together: chosen per GEMM shape, vk::Ops::coopmat2_tile_for; SPLITS: K split over that many
// workgroups a tile in every GEMM, 1 none, 0 or absent chosen per GEMM). --dequant-tokens N: int8 / int4
// prefills of N tokens or more take coopmat2 too, their weights decoded to fp16 first (default:
// vk::Ops::Coopmat2Dequant's). --preset llama with --kv-heads, --head-dim, --ffn-dim and --tie 1:
// a model of the Llama family (grouped-query heads, SwiGLU, a final norm; the persistent path runs
// its blocks in decode_layer_llama).
//   pylon_bench_vulkan [--dim 2048 --layers 12 --heads 16 --vocab 32000] [--quant f16,int8,int4]
//                      [--preset causal|llama --kv-heads KV --head-dim HD --ffn-dim F --tie 0|1]
//                      [--prefill 128] [--decode 32] [--dir /tmp] [--device N] [--gemv-sweep 0|1]
//                      [--decode-paths auto|ops|persistent[:N[xT]][/B],...] [--gemv-rows R]
//                      [--attention-chunk K] [--timeline 0|1] [--timeline-csv DIR]
//                      [--warmup-ms MS]
//                      [--buffer-cap-mb N] [--read-patterns 0|1] [--coopmat2-tiles MxNxK[/S],...]
//                      [--dequant-tokens N]
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <iterator>
#include <sstream>
#include <string>
#include <vector>

#include "core/error.h"
#include "io/edge_format.h"
#include "model/edge_model.h"
#include "model/edge_weights.h"
#include "model/params.h"
#include "model/vulkan/vulkan_decoder.h"
#include "ops/vulkan/context.h"
#include "ops/vulkan/ops.h"
#include "ops/vulkan/pipeline.h"
#include "ops/vulkan/weights.h"

namespace pylon {
namespace {

using Clock = std::chrono::steady_clock;
double since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }
double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Copy bandwidth of the device: a buffer of `bytes` copied into another, best of 5 after a warm-up.
double copy_bandwidth(vk::Context& ctx, uint64_t bytes) {
  vk::Buffer a = ctx.make_buffer(bytes, vk::MemoryKind::device), b = ctx.make_buffer(bytes, vk::MemoryKind::device);
  double best = 1e30;
  for (int i = 0; i < 6; ++i) {
    const auto t = Clock::now();
    ctx.run_commands([&](VkCommandBuffer cb) {
      const VkBufferCopy r{0, 0, bytes};
      vkCmdCopyBuffer(cb, a.handle(), b.handle(), 1, &r);
    });
    if (i > 0) best = std::min(best, since(t));
  }
  return 2.0 * static_cast<double>(bytes) / best;
}

// read_bandwidth.comp over all of `a`'s 16-byte words (their sum into `sink`).
void record_read(vk::Recorder& r, vk::KernelCache& kernels, vk::Buffer& a, vk::Buffer& sink) {
  const uint32_t words = static_cast<uint32_t>(a.size() / 16);
  const uint32_t groups = static_cast<uint32_t>(std::min<uint64_t>(65535, (words + 2047) / 2048));
  r.dispatch(kernels.get("read_bandwidth", 2, sizeof(words)), {{&a}, {&sink}}, words, groups);
}

// Read bandwidth of device memory as a shader sees it: read_bandwidth.comp over `bytes`, best of 5
// device-timed runs after a warm-up (host-timed where the device has no timestamps).
double shader_read_bandwidth(vk::Context& ctx, uint64_t bytes) {
  vk::Buffer a = ctx.make_buffer(bytes / 16 * 16, vk::MemoryKind::device);
  vk::Buffer sink = ctx.make_buffer(16, vk::MemoryKind::device);
  vk::KernelCache kernels(ctx);
  double best = 1e30;
  for (int i = 0; i < 6; ++i) {
    vk::GpuTimes times;
    vk::Recorder r(ctx, &times);
    record_read(r, kernels, a, sink);
    const auto t = Clock::now();
    r.run();
    const double host = since(t);
    if (i > 0) best = std::min(best, times.runs ? times.total : host);
  }
  return static_cast<double>(a.size()) / best;
}

// The cooperative-matrix ceiling in FLOP/s: coopmat_peak.comp on 8 workgroups a compute unit,
// best of 5 device-timed runs after a warm-up (host-timed where the device has no timestamps).
double coopmat_peak(vk::Context& ctx, bool f16_accumulate = false) {
  const uint32_t groups = std::max(1u, ctx.info().compute_units) * 8, iters = 4096, chains = 8;
  const uint32_t subgroups = 128 / std::max(1u, ctx.info().subgroup_size);
  vk::Buffer sink = ctx.make_buffer(uint64_t(groups) * subgroups * chains * 256 * 4, vk::MemoryKind::device);
  vk::KernelCache kernels(ctx);
  double best = 1e30;
  for (int i = 0; i < 6; ++i) {
    vk::GpuTimes times;
    vk::Recorder r(ctx, &times);
    r.dispatch(kernels.get("coopmat_peak", 1, sizeof(iters), {}, {f16_accumulate ? 1u : 0u}), {{&sink}}, iters,
               groups);
    const auto t = Clock::now();
    r.run();
    const double host = since(t);
    if (i > 0) best = std::min(best, times.runs ? times.total : host);
  }
  return 2.0 * 16 * 16 * 16 * chains * double(iters) * subgroups * groups / best;
}

// Busy work for the GPU before a timed run: read_bandwidth.comp over 64 MiB, again and again for at
// least `ms` of wall time (--warmup-ms; 0: none). A decode is too short and too sparse to wake a
// clocked-down GPU: after the seconds of a cold pipeline compile (no driver shader cache) the H200
// idled down to 345-615 MHz and decoded whole runs at that clock, 3-4x slower (nvidia-smi sampled
// every 100 ms: it takes 0.2-0.3 s of load to come back to 1980 MHz; bench/vulkan_notes.md,
// 2026-12-01 19:18-20:15). 300 ms was not always enough there (a cold-cache timeline at 800 MHz);
// 1000 ms was, in the one cold-cache run measured (2026-12-01 21:14 UTC: 1960 MHz, f16 0.555 ms). None on CPU devices (no GPU clock
// to wake; on lavapipe a round of 16 reads alone takes a second or more).
class GpuWarmup {
 public:
  GpuWarmup(const vk::ContextOptions& co, double ms)
      : ctx_(co), ms_(ctx_.info().type == VK_PHYSICAL_DEVICE_TYPE_CPU ? 0.0 : ms), kernels_(ctx_),
        a_(ctx_.make_buffer(kBytes, vk::MemoryKind::device)), sink_(ctx_.make_buffer(16, vk::MemoryKind::device)) {}
  void run() {
    const auto t = Clock::now();
    while (since(t) * 1e3 < ms_) {
      vk::Recorder r(ctx_);
      for (int i = 0; i < 16; ++i) record_read(r, kernels_, a_, sink_);
      r.run();
    }
  }

 private:
  static constexpr uint64_t kBytes = 64ull << 20;
  vk::Context ctx_;
  double ms_;
  vk::KernelCache kernels_;
  vk::Buffer a_, sink_;
};

// One more prefill with a device timestamp after every dispatch: device time per kind of dispatch
// (the GEMMs by shape, "gemm_coopmat 6144x2048 f16", with their TFLOP/s: 2·tokens·rows·cols each).
void print_prefill_split(VulkanDecoder& d, const std::vector<int32_t>& tokens, int prefill) {
  d.reset();
  vk::GpuTimes times;
  d.time_dispatches(&times);
  d.feed(tokens.data(), prefill);
  d.time_dispatches(nullptr);
  if (times.runs == 0) return;
  std::vector<std::pair<double, std::string>> kinds;
  for (const auto& [name, e] : times.by_kernel) kinds.emplace_back(e.seconds, name);
  std::sort(kinds.rbegin(), kinds.rend());
  std::printf("    device %.2f ms:\n", times.total * 1e3);
  for (const auto& [sec, name] : kinds) {
    const vk::GpuTimes::Entry& e = times.by_kernel.at(name);
    unsigned rows = 0, cols = 0;
    char tflops[48] = "";
    if (name.rfind("gemm", 0) == 0 && std::sscanf(name.c_str(), "%*s %ux%u", &rows, &cols) == 2)
      std::snprintf(tflops, sizeof(tflops), "  %6.1f TFLOP/s",
                    2.0 * prefill * rows * cols * static_cast<double>(e.count) / sec / 1e12);
    std::printf("    %-36s %4ld x %8.1f us  %5.1f%%%s\n", name.c_str(), e.count, sec / static_cast<double>(e.count) * 1e6,
                100.0 * sec / times.total, tflops);
  }
}

// --read-patterns 1: how a GEMV's reads can reach the memory's bandwidth. Device-timed medians of
// 5 dispatches after a warm-up: read_rows.comp over 512 MiB of random bytes (decode_layer's GEMV
// pattern, a subgroup's loads over one row's consecutive words, without its arithmetic; and
// read_bandwidth's pattern on fixed grids) at several grids and words in flight a lane.
void read_patterns(int device) {
  vk::ContextOptions co;
  co.device_index = device;
  vk::Context ctx(co);
  vk::KernelCache kernels(ctx);
  const uint32_t units = std::max(1u, ctx.info().compute_units);
  const uint64_t bytes = 512ull << 20;
  const uint32_t words = static_cast<uint32_t>(bytes / 16);
  vk::Buffer a = ctx.make_buffer(bytes, vk::MemoryKind::device), sink = ctx.make_buffer(16, vk::MemoryKind::device);
  {  // random words (xorshift32): a zeroed buffer might read faster than memory does (compression)
    std::vector<uint32_t> fill(bytes / 4);
    uint32_t x = 2463534242u;
    for (uint32_t& w : fill) x ^= x << 13, x ^= x >> 17, x ^= x << 5, w = x;
    ctx.upload(a, 0, fill.data(), bytes);
  }
  // Device seconds of one dispatch of k on `groups` workgroups, median of 5 after one.
  const auto timed = [&](const vk::Kernel& k, uint32_t groups) {
    std::vector<double> t;
    for (int i = 0; i < 6; ++i) {
      vk::GpuTimes times;
      vk::Recorder r(ctx, &times);
      r.dispatch(k, {{&a}, {&sink}}, words, groups);
      r.run();
      if (i > 0) t.push_back(times.total);
    }
    return median(t);
  };
  std::printf("read patterns over %llu MiB (GB/s; %u SMs):\n", static_cast<unsigned long long>(bytes >> 20), units);
  for (const uint32_t mode : {0u, 1u})
    for (const uint32_t threads : {256u, 512u})
      for (const uint32_t loads : {4u, 8u, 16u}) {
        const vk::Kernel& k = kernels.get("read_rows", 2, sizeof(words), {}, {threads, loads, mode});
        std::printf("  %s, %u threads, %2u words a lane:", mode == 0 ? "subgroup items" : "grid-stride", threads, loads);
        for (const uint32_t per_sm : {1u, 2u, 4u, 8u}) {
          if (per_sm * threads > 2048) continue;
          const double sec = timed(k, per_sm * units);
          std::printf("  %u/SM %.0f", per_sm, static_cast<double>(bytes) / sec / 1e9);
        }
        std::printf("\n");
      }
}

// Host memory read bandwidth: an OpenMP sum over `bytes` of floats, best of 5 after a warm-up (the
// bound for CPU devices such as lavapipe, whose buffers are host memory).
double host_read_bandwidth(uint64_t bytes) {
  std::vector<float> a(bytes / 4, 1.0f);
  double best = 1e30, sink = 0;
  for (int i = 0; i < 6; ++i) {
    const auto t = Clock::now();
    float s = 0;  // simd: several partial sums per thread, so the loop is bound by loads, not adds
#pragma omp parallel for simd reduction(+ : s) schedule(static)
    for (int64_t j = 0; j < static_cast<int64_t>(a.size()); ++j) s += a[static_cast<size_t>(j)];
    sink += s;
    if (i > 0) best = std::min(best, since(t));
  }
  if (sink < 0) std::printf("%f", sink);
  return static_cast<double>(bytes) / best;
}

std::string make_model(const ModelConfig& c, const std::string& quant, const std::string& dir,
                       std::vector<float>& flat) {
  std::string name = c.describe();  // e.g. "llama V=128256 D=2048 L=16 H=32 KV=8 F=8192"
  std::replace(name.begin(), name.end(), ' ', '_');
  name.erase(std::remove(name.begin(), name.end(), '='), name.end());
  const std::string path = dir + "/bench_" + name + (c.tied_head ? "_tied_" : "_") + quant + ".edge";
  if (std::filesystem::exists(path)) return path;
  const ParamTable table = param_table(c);
  if (flat.empty()) {
    flat.resize(table.total);
    for (const ParamInfo& p : table.params) {
      const int64_t chunk = 1 << 20;
#pragma omp parallel for schedule(dynamic)
      for (int64_t b = 0; b < p.numel; b += chunk)
        init_param_range(p, 1, b, std::min(p.numel, b + chunk), flat.data() + p.offset + b);
    }
  }
  EdgeQuant q;
  q.matrices = quant == "f16" ? EdgeDType::f16 : quant == "int8" ? EdgeDType::int8 : EdgeDType::int4;
  write_edge_model(path, c, encode_edge_tensors(table, flat.data(), q), "");
  return path;
}

// The subgroup GEMV on the layers' matrices and the head (the fused RMSNorm where decode fuses it),
// every shape against the automatic one: µs per dispatch and the weight bytes it moves per second.
void gemv_sweep(const std::string& path, int device) {
  vk::ContextOptions co;
  co.device_index = device;
  vk::Context ctx(co);
  vk::Ops ops(ctx);
  ops.set_gemv_rows(false);  // the subgroup GEMV on any device (CPU devices decode with gemv_rows)
  const EdgeModel edge(path);
  const EdgeFile& file = edge.file;
  const vk::DeviceWeights weights(ctx, file);
  const int64_t D = edge.config.dim;
  vk::Buffer x = ctx.make_buffer(static_cast<uint64_t>(8 * D) * 4, vk::MemoryKind::device);
  vk::Buffer y = ctx.make_buffer(static_cast<uint64_t>(edge.config.vocab) * 4, vk::MemoryKind::device);
  std::vector<float> ones(static_cast<size_t>(8 * D), 0.01f);
  ctx.upload(x, 0, ones.data(), ones.size() * 4);
  struct Matrix {
    const char* name;
    const char* norm;
  };
  const vk::Ops::GemvShape shapes[] = {{0, 0}, {1, 1}, {1, 2}, {2, 1}, {2, 2}, {2, 4}, {4, 1}, {4, 2}, {4, 4}, {8, 1}, {8, 2}};
  {  // warm-up: about a second of GEMVs, so that the clocks have risen before the first timing
    vk::Recorder warm(ctx, nullptr, true);
    for (int i = 0; i < 100; ++i) {
      const vk::DeviceMatrix& w = weights.get("layers." + std::to_string(i % edge.config.layers) + ".ffn.0.weight");
      ops.matmul(warm, {&y}, static_cast<uint32_t>(w.rows), {&x}, 0, 1, w, nullptr, false);
    }
    const auto t = Clock::now();
    while (since(t) < 1.0) warm.replay();
  }
  const int layers = edge.config.layers;
  for (const Matrix m : {Matrix{"attn.in_proj_weight", "norm1.weight"}, Matrix{"attn.out_proj.weight", nullptr},
                         Matrix{"ffn.0.weight", "norm2.weight"}, Matrix{"ffn.2.weight", nullptr},
                         Matrix{"head.weight", nullptr}}) {
    // Every layer's copy in turn, as decode reads them: from memory, not from the L2 cache.
    const bool head = std::string(m.name) == "head.weight";
    const auto layer_name = [&](const char* what, int i) {
      return head ? std::string(what) : "layers." + std::to_string(i % layers) + "." + what;
    };
    const vk::DeviceMatrix& w = weights.get(layer_name(m.name, 0));
    const double bytes = static_cast<double>(vk::row_bytes(w.dtype, w.cols)) * static_cast<double>(w.rows);
    std::printf("  gemv sweep %s %lldx%lld %s%s:", m.name, static_cast<long long>(w.rows),
                static_cast<long long>(w.cols), edge_dtype_name(w.dtype), m.norm ? " +norm" : "");
    for (const vk::Ops::GemvShape s : shapes) {
      ops.set_gemv_shape(s);
      const vk::Ops::GemvShape used = ops.gemv_shape_for(w);
      vk::GpuTimes times;
      vk::Recorder r(ctx, &times, true);
      for (int i = 0; i < 30; ++i) {
        const vk::DeviceMatrix& wi = weights.get(layer_name(m.name, i));
        if (m.norm) ops.normed_gemv(r, {&y}, static_cast<uint32_t>(w.rows), {&x}, 0, weights.get(layer_name(m.norm, i)),
                                    1e-5f, wi, nullptr, false);
        else ops.matmul(r, {&y}, static_cast<uint32_t>(w.rows), {&x}, 0, 1, wi, nullptr, false);
      }
      r.replay();
      times.clear();
      r.replay();
      if (times.runs == 0) return;
      double sec = 0;
      long count = 0;
      for (const auto& [name, e] : times.by_kernel) sec += e.seconds, count += e.count;
      const double each = sec / static_cast<double>(count);
      std::printf(" %s%ux%u %.2f us (%.0f GB/s)", s.rows == 0 ? "auto=" : "", used.rows, used.split, each * 1e6,
                  bytes / each / 1e9);
    }
    std::printf("\n");
  }
  ops.set_gemv_shape({});
}

// --timeline 1: the persistent kernel's variant with clock marks (VulkanOptions::timeline), over
// `decode` - 1 tokens after the prefill, a first token (which builds the pipelines) and a GPU
// warm-up: per step of a block, the mean over tokens, blocks and workgroups, and the lowest and
// highest workgroup's mean (imbalance), in µs where the dispatch's device time gives the SM
// clock's rate (one dispatch a token), else in clock cycles.
// csv (--timeline-csv): also every mark of the last 8 tokens, one row per (token, block,
// workgroup): the time of events 1 .. kEvents - 1 and of the block's end, from the workgroup's
// block start, in the same unit, for a look at single workgroups and heads afterwards.
void print_timeline(GpuWarmup& warmup, const std::string& path, VulkanOptions o, const std::vector<int32_t>& tokens,
                    int prefill, int decode, const std::string& csv) {
  PYLON_CHECK(decode >= 2, "--timeline needs --decode 2 or more (the first token builds the pipelines)");
  o.decode = "persistent", o.timeline = true;
  VulkanDecoder d(path, o, prefill + decode);
  d.feed(tokens.data(), prefill);
  const uint32_t G = d.persistent_grid(), L = static_cast<uint32_t>(d.config().layers);
  const char* steps[] = {"qkv: stage the row (norm)",  "qkv: GEMV, store",           "attention: wait for q, k",
                         "attention: scores, softmax", "attention: p.V, store",      "attention: other items",
                         "out_proj: wait for att",     "out_proj: tiles, added",     "barrier after out_proj",
                         "FFN: stage the row (norm)",  "FFN: first slice's W1, f1",  "FFN: W2 (and later slices)",
                         "barrier between blocks"};
  constexpr int kSteps = static_cast<int>(vk::LayerTimeline::kEvents);
  static_assert(std::size(steps) == kSteps);
  std::vector<double> per_group(static_cast<size_t>(kSteps) * G, 0.0);  // cycles, summed
  std::vector<long> counts(kSteps, 0);
  // When each step ends, from each workgroup's block start (its exit from the barrier before; the
  // grid leaves a barrier within a read's latency, so these compare across workgroups, whose
  // clocks differ): the median and the last workgroup's, summed over tokens and blocks.
  std::vector<double> ends_median(kSteps, 0.0), ends_last(kSteps, 0.0);
  std::vector<double> ends(G);
  double cycles = 0;  // each token's longest workgroup span, summed
  std::vector<uint32_t> rows;  // csv: (token, block, workgroup, kSteps cycle counts) per row
  d.feed(&tokens[static_cast<size_t>(prefill)], 1);  // builds the pipelines: not timed, then a warm-up
  warmup.run();
  vk::GpuTimes times;
  d.time_dispatches(&times);
  for (int i = 1; i < decode; ++i) {
    d.feed(&tokens[static_cast<size_t>(prefill + i)], 1);
    const vk::LayerTimeline t = d.layer_timeline();
    if (!csv.empty() && i + 8 >= decode)
      for (uint32_t b = 0; b < L; ++b)
        for (uint32_t g = 0; g < G; ++g) {
          rows.insert(rows.end(), {static_cast<uint32_t>(i), b, g});
          for (uint32_t e = 1; e <= static_cast<uint32_t>(kSteps); ++e) {
            const uint32_t at = e < static_cast<uint32_t>(kSteps) ? t.at(b, e, g)
                                : b + 1 < L                          ? t.at(b + 1, 0, g)
                                                                     : t.end(g);
            rows.push_back(at - t.at(b, 0, g));
          }
        }
    uint32_t span = 0;
    for (uint32_t g = 0; g < G; ++g) span = std::max(span, t.end(g) - t.start(g));
    cycles += span;
    for (uint32_t b = 0; b < L; ++b)
      for (int k = 0; k < kSteps; ++k) {
        if (k == kSteps - 1 && b + 1 == L) continue;  // no barrier after the last block
        for (uint32_t g = 0; g < G; ++g) {
          const uint32_t from = t.at(b, static_cast<uint32_t>(k), g);
          const uint32_t to = k + 1 < kSteps ? t.at(b, static_cast<uint32_t>(k + 1), g) : t.at(b + 1, 0, g);
          per_group[static_cast<size_t>(k) * G + g] += static_cast<double>(to - from);  // modulo 2^32
          ends[g] = static_cast<double>(to - t.at(b, 0, g));
        }
        std::nth_element(ends.begin(), ends.begin() + G / 2, ends.end());
        ends_median[k] += ends[G / 2];
        ends_last[k] += *std::max_element(ends.begin(), ends.end());
        ++counts[k];
      }
  }
  d.time_dispatches(nullptr);
  double layer_s = 0;
  for (const auto& [name, e] : times.by_kernel)
    if (name.rfind("decode_layer", 0) == 0) layer_s += e.seconds;
  const bool timed = layer_s > 0 && d.persistent_dispatches() == 1;
  const double per_us = timed ? cycles / (layer_s * 1e6) : 1.0;  // cycles a µs
  if (timed)
    std::printf("  timeline (SM clock at %.0f MHz from the dispatch's device time; a block, mean over workgroups "
                "[lowest .. highest workgroup]; ends: when the median / last workgroup finished it, from the "
                "block's start):\n", per_us);
  else
    std::printf("  timeline (SM clock cycles; a block, mean over workgroups [lowest .. highest workgroup]; ends: when "
                "the median / last workgroup finished it, from the block's start):\n");
  double total = 0;
  for (int k = 0; k < kSteps; ++k) {
    if (!counts[k]) continue;
    double sum = 0, lo = 1e300, hi = 0;
    for (uint32_t g = 0; g < G; ++g) {
      const double v = per_group[static_cast<size_t>(k) * G + g] / static_cast<double>(counts[k]) / per_us;
      sum += v, lo = std::min(lo, v), hi = std::max(hi, v);
    }
    total += sum / G;
    std::printf("    %-30s %8.2f [%5.2f .. %5.2f]   ends %6.2f / %6.2f%s\n", steps[k], sum / G, lo, hi,
                ends_median[k] / static_cast<double>(counts[k]) / per_us,
                ends_last[k] / static_cast<double>(counts[k]) / per_us, timed ? " us" : "");
  }
  std::printf("    %-30s %8.2f%s\n", "sum", total, timed ? " us" : "");
  if (csv.empty()) return;
  std::ofstream f(csv);
  f << "# " << path << ": the persistent kernel's marks, " << (timed ? "us" : "SM clock cycles")
    << " from each workgroup's block start (bench/vulkan_edge_bench.cpp print_timeline)\ntoken,block,workgroup";
  for (int k = 0; k < kSteps; ++k) f << ",\"ends: " << steps[k] << "\"";
  f << "\n" << std::fixed << std::setprecision(timed ? 3 : 0);
  const size_t width = 3 + static_cast<size_t>(kSteps);
  for (size_t r = 0; r < rows.size(); r += width) {
    f << rows[r] << ',' << rows[r + 1] << ',' << rows[r + 2];
    for (size_t k = 3; k < width; ++k) f << ',' << static_cast<double>(rows[r + k]) / per_us;
    f << '\n';
  }
  f.close();
  if (!f) throw Error("cannot write " + csv);
  std::printf("  timeline: every mark of the last %d tokens in %s\n", std::min(decode, 8), csv.c_str());
}

constexpr const char* kUsage =
    "usage: pylon_bench_vulkan [--dim 2048 --layers 12 --heads 16 --vocab 32000] [--quant f16,int8,int4]\n"
    "                          [--preset causal|llama --kv-heads KV --head-dim HD --ffn-dim F --tie 0|1]\n"
    "                          [--prefill 128] [--decode 32] [--dir /tmp] [--device N] [--gemv-sweep 0|1]\n"
    "                          [--decode-paths auto|ops|persistent[:N[xT]][/B],...] [--gemv-rows R]\n"
    "                          [--attention-chunk K] [--timeline 0|1] [--timeline-csv DIR]\n"
    "                          [--layer-loads N] [--head-loads N] [--head-rows R] [--head-groups G]\n"
    "                          [--pipeline-stats 0|1]\n"
    "                          [--warmup-ms MS]\n"
    "                          [--buffer-cap-mb N] [--read-patterns 0|1] [--coopmat2-tiles MxNxK[/S],...]\n"
    "                          [--dequant-tokens N] [--matmul-head 0|1]\n"
    "Decode and prefill of a random model (seed size by default) on a Vulkan device, next to its measured bandwidth\n"
    "bound (bench/vulkan_edge_bench.cpp's header says what each flag does).\n";

int run(int argc, char** argv) {
  ModelConfig c = ModelConfig::with_preset("causal");  // seed size: V 32000, D 2048, L 12, H 16
  std::string quants = "f16,int8,int4", dir = "/tmp", decodes = "auto", timeline_csv, coopmat2_tiles = "0x0x0";
  int prefill = 128, decode = 32, device = -1, sweep = 0, timeline = 0, read_patterns_only = 0, pipeline_stats = 0;
  uint32_t layer_loads = 0, head_loads = 0, head_rows = 0, head_groups = 0;  // 0: the kernel's choices
  double warmup_ms = 1000;
  uint32_t gemv_rows = 0;  // rows per subgroup of the decode GEMVs (0: chosen per matrix)
  uint32_t attention_chunk = 0;
  int dequant_tokens = -1;  // --dequant-tokens (-1: the library's default)
  int matmul_head = 0;      // --matmul-head 1: the decode head on matmul's GEMV, not the persistent kernel's
  uint64_t buffer_cap = 0;  // --buffer-cap-mb: the storage-binding cap (a buffer per tensor below the model's size)
  for (int i = 1; i < argc; i += 2) {
    const std::string k = argv[i];
    if (k == "--help" || k == "-h") {
      std::printf("%s", kUsage);
      return 0;
    }
    PYLON_CHECK(i + 1 < argc, "flag ", k, " needs a value (--help lists the flags)");
    const std::string v = argv[i + 1];
    if (k == "--dim") c.dim = std::stoi(v);
    else if (k == "--layers") c.layers = std::stoi(v);
    else if (k == "--heads") c.heads = std::stoi(v);
    else if (k == "--vocab") c.vocab = std::stoi(v);
    else if (k == "--preset") c.set_preset(find_preset(v));
    else if (k == "--kv-heads") c.kv_heads = std::stoi(v);
    else if (k == "--head-dim") c.head_size = std::stoi(v);
    else if (k == "--ffn-dim") c.ffn_dim = std::stoi(v);
    else if (k == "--tie") c.tied_head = std::stoi(v) != 0;
    else if (k == "--quant") quants = v;
    else if (k == "--prefill") prefill = std::stoi(v);
    else if (k == "--decode") decode = std::stoi(v);
    else if (k == "--dir") dir = v;
    else if (k == "--device") device = std::stoi(v);
    else if (k == "--gemv-sweep") sweep = std::stoi(v);
    else if (k == "--read-patterns") read_patterns_only = std::stoi(v);
    else if (k == "--decode-paths") decodes = v;
    else if (k == "--gemv-rows") gemv_rows = static_cast<uint32_t>(std::stoul(v));
    else if (k == "--attention-chunk") attention_chunk = static_cast<uint32_t>(std::stoul(v));
    else if (k == "--layer-loads") layer_loads = static_cast<uint32_t>(std::stoul(v));
    else if (k == "--head-loads") head_loads = static_cast<uint32_t>(std::stoul(v));
    else if (k == "--head-rows") head_rows = static_cast<uint32_t>(std::stoul(v));
    else if (k == "--head-groups") head_groups = static_cast<uint32_t>(std::stoul(v));
    else if (k == "--pipeline-stats") pipeline_stats = std::stoi(v);
    else if (k == "--timeline") timeline = std::stoi(v);
    else if (k == "--warmup-ms") warmup_ms = std::stod(v);
    else if (k == "--timeline-csv") timeline_csv = v, timeline = 1;
    else if (k == "--buffer-cap-mb") buffer_cap = std::stoull(v) << 20;
    else if (k == "--coopmat2-tiles") coopmat2_tiles = v;
    else if (k == "--dequant-tokens") dequant_tokens = std::stoi(v);
    else if (k == "--matmul-head") matmul_head = std::stoi(v);
    else PYLON_CHECK(false, "unknown flag ", k, " (--help lists the flags)");
  }
  c.validate();
  if (read_patterns_only) {
    read_patterns(device);
    return 0;
  }
  vk::ContextOptions co;
  co.device_index = device;
  double bw = 0, read_bw = 0;
  {
    vk::Context ctx(co);
    const uint64_t bytes = std::min<uint64_t>(1ull << 30, ctx.info().max_allocation / 2);
    const double copy = copy_bandwidth(ctx, bytes);
    const double read = shader_read_bandwidth(ctx, bytes);
    read_bw = read;
    bw = std::max(copy, read);
    const double host = host_read_bandwidth(1ull << 30);
    std::printf("host read bandwidth (OpenMP sum over 1 GiB, best of 5): %.1f GB/s\n", host / 1e9);
    if (ctx.info().type == VK_PHYSICAL_DEVICE_TYPE_CPU) bw = std::max(bw, host);  // buffers are host memory
    const auto& g = ctx.info().coopmat2_granularity;
    std::printf("device %s (%s), subgroup %u, max storage range %llu, shared memory %llu bytes a workgroup, "
                "coopmat %s, coopmat2 %s\n",
                ctx.info().name.c_str(), ctx.info().type_name(), ctx.info().subgroup_size,
                static_cast<unsigned long long>(ctx.info().max_storage_range),
                static_cast<unsigned long long>(ctx.info().max_shared_bytes), ctx.info().coopmat ? "yes" : "no",
                ctx.info().coopmat2 ? ("yes (granularity " + std::to_string(g[0]) + "x" + std::to_string(g[1]) + "x" +
                                       std::to_string(g[2]) + ", " + std::to_string(ctx.info().coopmat2_reserved_shared) +
                                       " bytes of shared memory reserved)")
                                          .c_str()
                                    : "no");
    std::printf("copy bandwidth (vkCmdCopyBuffer %llu MiB, read+write, best of 5): %.1f GB/s\n",
                static_cast<unsigned long long>(bytes >> 20), copy / 1e9);
    std::printf("read bandwidth (read_bandwidth.comp over %llu MiB, 16-byte words, best of 5, %s): %.1f GB/s\n",
                static_cast<unsigned long long>(bytes >> 20),
                ctx.info().timestamp_ns > 0 ? "device timestamps" : "host clock", read / 1e9);
    std::printf("bound uses %.1f GB/s\n", bw / 1e9);
    if (ctx.info().coopmat)
      std::printf("coopmat ceiling (coopmat_peak.comp: fp16 16x16x16 products on operands in registers, best of 5): "
                  "%.1f TFLOP/s with fp32 accumulators (the GEMM's)%s\n", coopmat_peak(ctx) / 1e12,
                  ctx.info().coopmat_f16_accumulate
                      ? (", " + std::to_string(coopmat_peak(ctx, true) / 1e12) + " TFLOP/s with fp16").c_str()
                      : "");
  }
  GpuWarmup warmup(co, warmup_ms);  // run after each step that builds pipelines, before the timed runs
  std::vector<float> flat;
  std::stringstream list(quants);
  std::string q;
  std::vector<int32_t> tokens(static_cast<size_t>(prefill + decode));
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<int32_t>((i * 7919 + 13) % c.vocab);
  const double flops_per_token = 2.0 * static_cast<double>(c.num_params() - int64_t(c.vocab) * c.dim);
  while (std::getline(list, q, ',')) {
    const auto t0 = Clock::now();
    const std::string path = make_model(c, q, dir, flat);
    const double bytes = static_cast<double>(edge_bytes_per_token(EdgeModel(path, /*check_data=*/false)));
    if (sweep) gemv_sweep(path, device);
    VulkanOptions o;
    o.device_index = device;
    o.gemv_rows = gemv_rows;
    o.max_buffer_bytes = buffer_cap;
    o.matmul_head = matmul_head != 0;
    o.layer_loads = layer_loads, o.head_loads = head_loads, o.head_rows = head_rows, o.head_groups = head_groups;
    o.pipeline_stats = pipeline_stats != 0;
    VulkanDecoder d(path, o, prefill + decode);
    if (dequant_tokens >= 0) d.set_coopmat2_dequant_tokens(static_cast<uint32_t>(dequant_tokens));
    std::printf("\n[%s] %s (model ready in %.1f s)\n", q.c_str(), d.describe().c_str(), since(t0));
    // The prefill GEMMs: plain, coopmat (VK_KHR_cooperative_matrix), coopmat2 (VK_NV_cooperative_matrix2)
    // at each tile of --coopmat2-tiles.
    std::vector<std::pair<int, std::string>> gemms{{0, ""}, {1, ""}};
    std::stringstream tile_list(coopmat2_tiles);
    for (std::string t; std::getline(tile_list, t, ',');) gemms.emplace_back(2, t);
    for (const auto& [gemm, tile] : gemms) {
      const bool coop = gemm > 0;
      unsigned tm = 0, tn = 0, tk = 0, ts = 0;
      if (gemm == 2)
        PYLON_CHECK(std::sscanf(tile.c_str(), "%ux%ux%u/%u", &tm, &tn, &tk, &ts) >= 3, "--coopmat2-tiles: ", tile,
                    " is not TOKENSxROWSxK[/SPLITS]");
      d.set_coopmat2_tile(tm, tn, tk, ts);
      if (d.use_coopmat(coop) != coop) continue;
      if (d.use_coopmat2(gemm == 2, prefill) != (gemm == 2)) {
        if (gemm == 2)
          std::printf("  (coopmat2 tile %s not taken: it needs VK_NV_cooperative_matrix2, a tile of multiples of its "
                      "granularity, and f16 weights or a prefill of at least the dequant tokens)\n", tile.c_str());
        continue;
      }
      std::vector<double> pre;
      try {  // a tile the driver cannot build (its shared memory, say) ends only its own run
        for (int rep = 0; rep < 4; ++rep) {  // the first is a warm-up
          d.reset();
          const auto t = Clock::now();
          d.feed(tokens.data(), prefill);
          if (rep > 0) pre.push_back(since(t));
          if (rep == 0) warmup.run();
        }
      } catch (const Error& e) {
        if (gemm != 2) throw;
        std::printf("  prefill with coopmat2 tile %s failed: %s\n", tile.c_str(), e.what());
        continue;
      }
      std::printf("  prefill %d tokens, %s GEMM: %.1f ms, %.0f tokens/s, %.2f TFLOP/s (weights only)\n", prefill,
                  gemm == 2 ? ("coopmat2 " + tile).c_str() : coop ? "coopmat" : "plain", median(pre) * 1e3,
                  prefill / median(pre),
                  flops_per_token * prefill / median(pre) / 1e12);
      print_prefill_split(d, tokens, prefill);
    }
    const auto measure_decode = [&](VulkanDecoder& dec_model) {
      std::vector<double> dec;
      for (int i = 0; i < decode; ++i) {
        const auto t = Clock::now();
        dec_model.feed(&tokens[static_cast<size_t>(prefill + i)], 1);
        dec.push_back(since(t));
        if (i == 0) warmup.run();  // the first token built the decode pipelines
      }
      // The first token also records the step and may build pipelines (seconds on a cold driver
      // cache): the median is of the tokens after it, where there are any.
      const std::vector<double> steady(dec.size() > 1 ? dec.begin() + 1 : dec.begin(), dec.end());
      const double tps = 1.0 / median(steady), bound = bw / bytes;
      std::printf("  decode: %.3f ms/token median of %zu tokens, %.1f tokens/s; weights %.1f MB/token; bound %.1f "
                  "tokens/s at %.1f GB/s: %.0f%% of the bound (%.1f GB/s effective)\n",
                  median(steady) * 1e3, steady.size(), tps, bytes / 1e6, bound, bw / 1e9, 100.0 * tps / bound,
                  bytes * tps / 1e9);
      if (dec.size() > 1)  // the first token also records the step (and may build pipelines)
        std::printf("  decode tokens: first %.3f ms, then fastest %.3f ms, slowest %.3f ms\n", dec[0] * 1e3,
                    *std::min_element(dec.begin() + 1, dec.end()) * 1e3,
                    *std::max_element(dec.begin() + 1, dec.end()) * 1e3);
      if (dec_model.persistent_gave_up_at() >= 0)  // the rest of the run is the op-by-op path's
        std::printf("  (the persistent kernel's grid wait timed out at position %d: op by op from there)\n",
                    dec_model.persistent_gave_up_at());
      // Again with a device timestamp after every command: device time against host time per token.
      dec_model.reset();
      dec_model.feed(tokens.data(), prefill);
      vk::GpuTimes times;
      dec_model.time_dispatches(&times);
      double host_total = 0;
      for (int i = 0; i < decode; ++i) {
        const auto t = Clock::now();
        dec_model.feed(&tokens[static_cast<size_t>(prefill + i)], 1);
        host_total += since(t);
      }
      dec_model.time_dispatches(nullptr);
      if (times.runs == 0) {
        std::printf("  (no device timestamps on this device)\n");
        return;
      }
      const double per = 1.0 / decode, gpu = times.total * per;
      std::printf("  decode, timed (mean of %d tokens): host %.3f ms/token, device %.3f ms/token (%.0f%%), "
                  "host-only %.3f ms/token; device time at %.1f GB/s would be %.0f%% of the bound\n",
                  decode, host_total * per * 1e3, gpu * 1e3, 100.0 * gpu / (host_total * per),
                  (host_total * per - gpu) * 1e3, bytes / gpu / 1e9, 100.0 * (bytes / gpu) / bw);
      std::vector<std::pair<double, std::string>> kinds;
      for (const auto& [name, e] : times.by_kernel) kinds.emplace_back(e.seconds, name);
      std::sort(kinds.rbegin(), kinds.rend());
      for (const auto& [sec, name] : kinds) {
        const vk::GpuTimes::Entry& e = times.by_kernel.at(name);
        std::printf("    %-30s %5.1f per token  %8.1f us/token  %5.1f%%  %7.2f us each\n", name.c_str(),
                    static_cast<double>(e.count) * per, sec * per * 1e6, 100.0 * sec / times.total,
                    sec / static_cast<double>(e.count) * 1e6);
      }
    };
    // Decode on each path asked for (--decode-paths auto,ops,persistent,persistent:GRID), each on
    // a decoder of its own over the same file, after the same prefill.
    std::stringstream paths(decodes);
    std::string path_name;
    while (std::getline(paths, path_name, ',')) {
      VulkanOptions od = o;
      od.attention_chunk = attention_chunk;
      std::string spec = path_name;
      if (spec.find('/') != std::string::npos) {  // /B: at most B blocks a dispatch
        od.persistent_blocks = static_cast<uint32_t>(std::stoul(spec.substr(spec.find('/') + 1)));
        spec = spec.substr(0, spec.find('/'));
      }
      od.decode = spec.substr(0, spec.find(':'));
      if (spec.find(':') != std::string::npos) {  // persistent:GROUPS or persistent:GROUPSxTHREADS
        const std::string g = spec.substr(spec.find(':') + 1);
        od.persistent_grid = static_cast<uint32_t>(std::stoul(g));
        if (g.find('x') != std::string::npos) od.persistent_threads = static_cast<uint32_t>(std::stoul(g.substr(g.find('x') + 1)));
      }
      try {
        VulkanDecoder dd(path, od, prefill + decode);
        std::printf("  decode path %s: %s\n", path_name.c_str(), dd.describe().c_str());
        dd.feed(tokens.data(), prefill);
        measure_decode(dd);
      } catch (const Error& e) {
        std::printf("  decode path %s: %s\n", path_name.c_str(), e.what());
      }
    }
    {  // the device's read bandwidth again: a run slow throughout shows whether memory was slower too
      vk::Context ctx(co);
      const uint64_t bw_bytes = std::min<uint64_t>(1ull << 30, ctx.info().max_allocation / 2);
      std::printf("  read bandwidth after these decodes: %.1f GB/s (%.1f at the start)\n",
                  shader_read_bandwidth(ctx, bw_bytes) / 1e9, read_bw / 1e9);
    }
    if (timeline) {
      VulkanOptions ot = o;
      ot.attention_chunk = attention_chunk;
      try {
        print_timeline(warmup, path, ot, tokens, prefill, decode,
                       timeline_csv.empty() ? "" : timeline_csv + "/timeline_" + q + ".csv");
      } catch (const Error& e) {
        std::printf("  timeline: %s\n", e.what());
      }
    }
  }
  return 0;
}

}  // namespace
}  // namespace pylon

int main(int argc, char** argv) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);  // line by line into a log, also when a timeout kills it
  try {
    return pylon::run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "pylon_bench_vulkan: %s\n", e.what());
    return 1;
  }
}
