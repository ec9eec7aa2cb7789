// Times every CUDA kernel and the GEMMs of one MiniLLM step at the seed preset's sizes (N = 8192
// tokens, D = 2048, V = 32000, 4D = 8192, 735M parameters): median of 20 runs after 3 warm-ups,
// CUDA events around each run, L2 flushed before each. Prints the time, GB/s (the bytes that must
// move / time) against the H200's measured 4300 GB/s copy bandwidth, and for GEMMs TFLOP/s against
// the 790 TFLOP/s a bf16 8192³ product reached on random data.
#include <algorithm>
#include <cstdio>
#include <functional>
#include <set>
#include <string>
#include <vector>

#include "ops/cuda/adamw.h"
#include "ops/cuda/cast.h"
#include "ops/cuda/column_sum.h"
#include "ops/cuda/cross_entropy.h"
#include "ops/cuda/embedding.h"
#include "ops/cuda/gemm.h"
#include "ops/cuda/reduce.h"
#include "ops/cuda/rmsnorm.h"
#include "ops/cuda/rope.h"
#include "ops/cuda/runtime.h"
#include "ops/cuda/silu.h"

namespace pylon::cuda {
namespace {

using bf16 = __nv_bfloat16;
constexpr double kPeakGBs = 4300, kPeakTflops = 790;
constexpr int kWarmup = 3, kRuns = 20;
constexpr int64_t kN = 8192, kD = 2048, kV = 32000, kF = 4 * kD, kH = 16;
constexpr int64_t kParams = 735199232;

__device__ uint64_t mix(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// scale·N(0, 1) by Box-Muller on hashed bits; |x| when positive (for AdamW's v).
template <typename T>
__global__ void fill_normal(T* out, int64_t n, uint64_t seed, float scale, bool positive) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const uint64_t bits = mix(mix(seed) ^ static_cast<uint64_t>(i));
    const float u1 = (static_cast<float>(bits >> 40) + 1.f) * (1.f / 16777217.f);
    const float u2 = static_cast<float>(bits & 0xFFFFFFu) * (1.f / 16777216.f);
    float x = scale * sqrtf(-2.f * logf(u1)) * cospif(2.f * u2);
    if (positive) x = fabsf(x);
    out[i] = static_cast<T>(x);
  }
}

template <typename T>
DeviceBuffer random_buffer(int64_t n, uint64_t seed, float scale = 1.f, bool positive = false) {
  DeviceBuffer b(sizeof(T) * static_cast<size_t>(n));
  fill_normal<T><<<4096, 256>>>(b.as<T>(), n, seed, scale, positive);
  PYLON_CUDA_CHECK_LAUNCH();
  return b;
}

DeviceBuffer upload_ids(const std::vector<int32_t>& ids) {
  DeviceBuffer b(ids.size() * sizeof(int32_t));
  PYLON_CUDA_CHECK(cudaMemcpy(b.get(), ids.data(), b.bytes(), cudaMemcpyHostToDevice));
  return b;
}

// Token ids: uniform, or Zipf(1) over the vocabulary like word frequencies in text.
std::vector<int32_t> make_ids(int64_t n, int64_t V, bool zipf, uint64_t seed) {
  std::vector<double> cdf;
  if (zipf) {
    cdf.resize(V);
    double s = 0;
    for (int64_t v = 0; v < V; ++v) cdf[v] = s += 1.0 / static_cast<double>(v + 1);
    for (double& c : cdf) c /= s;
  }
  std::vector<int32_t> ids(n);
  uint64_t x = seed * 2654435761u + 1;
  for (int64_t i = 0; i < n; ++i) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    const double u = static_cast<double>(x >> 11) * (1.0 / 9007199254740992.0);
    ids[i] = zipf ? static_cast<int32_t>(std::lower_bound(cdf.begin(), cdf.end(), u) - cdf.begin())
                  : static_cast<int32_t>(x % static_cast<uint64_t>(V));
  }
  return ids;
}

class Bench {
 public:
  Bench() : flush_(size_t{256} << 20), start_(true), stop_(true) {}

  // Median milliseconds of f over kRuns, each after an L2 flush.
  double time_ms(const std::function<void()>& f) {
    for (int i = 0; i < kWarmup; ++i) f();
    std::vector<float> ms;
    for (int i = 0; i < kRuns; ++i) {
      PYLON_CUDA_CHECK(cudaMemsetAsync(flush_.get(), i, flush_.bytes(), stream_.get()));
      start_.record(stream_.get());
      f();
      stop_.record(stream_.get());
      PYLON_CUDA_CHECK(cudaEventSynchronize(stop_.get()));
      ms.push_back(stop_.elapsed_since(start_));
    }
    std::sort(ms.begin(), ms.end());
    return (ms[kRuns / 2 - 1] + ms[kRuns / 2]) / 2;
  }

  void memory_bound(const std::string& name, const std::string& shape, double bytes, const std::function<void()>& f) {
    const double ms = time_ms(f), gbs = bytes / (ms * 1e-3) / 1e9;
    std::printf("%-32s %-22s %10.1f %9.0f %6.1f%%\n", name.c_str(), shape.c_str(), ms * 1e3, gbs, 100 * gbs / kPeakGBs);
  }

  double gemm(const std::string& name, int64_t M, int64_t N, int64_t K, const std::function<void()>& f) {
    const double ms = time_ms(f), tflops = 2.0 * M * N * K / (ms * 1e-3) / 1e12;
    const std::string shape = std::to_string(M) + "x" + std::to_string(N) + "x" + std::to_string(K);
    std::printf("%-32s %-22s %10.1f %9.0f %6.1f%%\n", name.c_str(), shape.c_str(), ms * 1e3, tflops,
                100 * tflops / kPeakTflops);
    return ms;
  }

  cudaStream_t stream() const { return stream_.get(); }

 private:
  Stream stream_;
  DeviceBuffer flush_;
  Event start_, stop_;
};

std::string dims(std::initializer_list<int64_t> d) {
  std::string s;
  for (int64_t x : d) {
    if (!s.empty()) s += 'x';
    s += std::to_string(x);
  }
  return s;
}

void bench_memory_bound(Bench& b) {
  const cudaStream_t s = b.stream();
  std::printf("\n%-32s %-22s %10s %9s %7s\n", "kernel", "shape", "us", "GB/s", "%4300");
  const int64_t nf = kN * kF;
  {
    DeviceBuffer f32 = random_buffer<float>(nf, 1), b16(sizeof(bf16) * nf);
    b.memory_bound("cast_f32_to_bf16", dims({nf}), 6.0 * nf, [&] { cast_f32_to_bf16(b16.as<bf16>(), f32.as<float>(), nf, s); });
    b.memory_bound("cast_bf16_to_f32", dims({nf}), 6.0 * nf, [&] { cast_bf16_to_f32(f32.as<float>(), b16.as<bf16>(), nf, s); });
  }
  {
    DeviceBuffer table = random_buffer<bf16>(kV * kD, 2), out(sizeof(bf16) * kN * kD);
    DeviceBuffer dout = random_buffer<bf16>(kN * kD, 3), dtable = random_buffer<float>(kV * kD, 4);
    DeviceBuffer ws(embedding_backward_workspace_bytes(kN, kD, kV));
    for (bool zipf : {false, true}) {
      const std::vector<int32_t> ids = make_ids(kN, kV, zipf, 5);
      const double unique = static_cast<double>(std::set<int32_t>(ids.begin(), ids.end()).size());
      DeviceBuffer d_ids = upload_ids(ids);
      if (!zipf)
        b.memory_bound("embedding_forward", dims({kN, kD}), 4.0 * kN * kD + 4.0 * kN,
                       [&] { embedding_forward(out.as<bf16>(), d_ids.as<int32_t>(), table.as<bf16>(), kN, kD, s); });
      b.memory_bound(zipf ? "embedding_backward (zipf ids)" : "embedding_backward (uniform)", dims({kN, kD, kV}),
                     2.0 * kN * kD + 8.0 * unique * kD, [&] {
                       embedding_backward(dtable.as<float>(), dout.as<bf16>(), d_ids.as<int32_t>(), kN, kD, kV,
                                          ws.get(), s);
                     });
    }
  }
  {
    DeviceBuffer x = random_buffer<bf16>(kN * kD, 6), delta = random_buffer<bf16>(kN * kD, 7);
    DeviceBuffer w = random_buffer<bf16>(kD, 8), xo(sizeof(bf16) * kN * kD), h(sizeof(bf16) * kN * kD);
    DeviceBuffer rstd(sizeof(float) * kN), dw = random_buffer<float>(kD, 9);
    DeviceBuffer ws(rmsnorm_backward_workspace_bytes(kN, kD));
    b.memory_bound("residual_rmsnorm_forward", dims({kN, kD}), 8.0 * kN * kD, [&] {
      residual_rmsnorm_forward(xo.as<bf16>(), h.as<bf16>(), rstd.as<float>(), x.as<bf16>(), delta.as<bf16>(),
                               w.as<bf16>(), kN, kD, 1.1920929e-07f, s);
    });
    b.memory_bound("rmsnorm_backward (+residual)", dims({kN, kD}), 8.0 * kN * kD, [&] {
      rmsnorm_backward(h.as<bf16>(), dw.as<float>(), x.as<bf16>(), delta.as<bf16>(), xo.as<bf16>(), w.as<bf16>(),
                       rstd.as<float>(), kN, kD, ws.get(), s);
    });
  }
  {
    DeviceBuffer in = random_buffer<bf16>(nf, 10), out(sizeof(bf16) * nf), dout = random_buffer<bf16>(nf, 11);
    b.memory_bound("silu_forward", dims({kN, kF}), 4.0 * nf, [&] { silu_forward(out.as<bf16>(), in.as<bf16>(), nf, s); });
    b.memory_bound("silu_backward", dims({kN, kF}), 6.0 * nf,
                   [&] { silu_backward(out.as<bf16>(), dout.as<bf16>(), in.as<bf16>(), nf, s); });
  }
  {
    DeviceBuffer qkv = random_buffer<bf16>(kN * 3 * kD, 12);
    DeviceBuffer ws(bias_backward_workspace_bytes(kN, 3 * kD)), db = random_buffer<float>(3 * kD, 13);
    b.memory_bound("rope_forward", dims({8, 1024, 3 * kD}), 8.0 * kN * kD,
                   [&] { rope_forward(qkv.as<bf16>(), 8, 1024, HeadLayout::multi_head(kD, kH), 10000.f, {}, 0, s); });
    b.memory_bound("bias_backward", dims({kN, 3 * kD}), 6.0 * kN * kD,
                   [&] { bias_backward(db.as<float>(), qkv.as<bf16>(), kN, 3 * kD, ws.get(), s); });
  }
  {
    DeviceBuffer logits = random_buffer<bf16>(kN * kV, 14, 2.f), losses(sizeof(float) * kN), mean(sizeof(float));
    DeviceBuffer targets = upload_ids(make_ids(kN, kV, false, 15)), ws(loss_mean_workspace_bytes(kN));
    b.memory_bound("cross_entropy_forward_backward", dims({kN, kV}), 4.0 * kN * kV, [&] {
      cross_entropy_forward_backward(losses.as<float>(), logits.as<bf16>(), targets.as<int32_t>(), kN, kV,
                                     1.f / kN, s);
    });
    b.memory_bound("loss_mean", dims({kN}), 4.0 * kN,
                   [&] { loss_mean(mean.as<float>(), losses.as<float>(), kN, ws.get(), s); });
  }
  {
    DeviceBuffer p = random_buffer<float>(kParams, 16, 0.02f), m = random_buffer<float>(kParams, 17, 1e-3f);
    DeviceBuffer v = random_buffer<float>(kParams, 18, 1e-6f, true), g = random_buffer<float>(kParams, 19, 1e-3f);
    DeviceBuffer pb(sizeof(bf16) * kParams), sumsq(sizeof(float)), coef(sizeof(float));
    DeviceBuffer ws(reduce_workspace_bytes(kParams)), constants(sizeof(AdamWConstants));
    const AdamWConstants k = adamw_constants(3e-4f, 0.9f, 0.999f, 1e-8f, 0.01f, 10);
    PYLON_CUDA_CHECK(cudaMemcpy(constants.get(), &k, sizeof k, cudaMemcpyHostToDevice));
    b.memory_bound("sum_of_squares", dims({kParams}), 4.0 * kParams,
                   [&] { sum_of_squares(sumsq.as<float>(), g.as<float>(), kParams, ws.get(), s); });
    clip_coefficient(coef.as<float>(), sumsq.as<float>(), 1.f, s);
    b.memory_bound("adamw_update (+bf16 copy)", dims({kParams}), 30.0 * kParams, [&] {
      adamw_update(p.as<float>(), m.as<float>(), v.as<float>(), g.as<float>(), pb.as<bf16>(), kParams,
                   constants.as<AdamWConstants>(), coef.as<float>(), s);
    });
  }
}

void bench_gemms(Bench& b) {
  const cudaStream_t s = b.stream();
  std::printf("\n%-32s %-22s %10s %9s %7s\n", "GEMM (bf16, fp32 accumulate)", "MxNxK", "us", "TFLOP/s", "%790");
  const int64_t max_elems = kN * kV;
  DeviceBuffer A = random_buffer<bf16>(max_elems, 20), B = random_buffer<bf16>(max_elems, 21);
  DeviceBuffer C = random_buffer<float>(max_elems, 22), bias = random_buffer<bf16>(kV, 23);
  Gemm gemm;
  struct Linear {
    const char* name;
    int64_t I, O;
    bool bias;
    int count;  // per step
  };
  const Linear linears[] = {{"qkv (in_proj)", kD, 3 * kD, true, 12}, {"out_proj", kD, kD, true, 12},
                            {"ffn1", kD, kF, false, 12},           {"ffn2", kF, kD, false, 12},
                            {"head", kD, kV, false, 1}};
  double step_ms = 0, step_flops = 0;
  for (const Linear& l : linears) {
    const int I = static_cast<int>(l.I), O = static_cast<int>(l.O), N = static_cast<int>(kN);
    const std::string n(l.name);
    // forward: out (N, O) = in (N, I) · Wᵀ [+ b]
    double ms = b.gemm(n + " fwd", N, O, I, [&] {
      gemm.run(false, true, N, O, I, 1.f, A.as<bf16>(), I, B.as<bf16>(), I, 0.f, C.get(), GemmOut::kBf16, O,
               l.bias ? bias.as<bf16>() : nullptr, s);
    });
    // backward: din (N, I) = dout (N, O) · W (O, I);  dW (O, I) += doutᵀ · in (N, I)
    ms += b.gemm(n + " bwd din", N, I, O, [&] {
      gemm.run(false, false, N, I, O, 1.f, A.as<bf16>(), O, B.as<bf16>(), I, 0.f, C.get(), GemmOut::kBf16, I, nullptr, s);
    });
    ms += b.gemm(n + " bwd dW (fp32 +=)", O, I, N, [&] {
      gemm.run(true, false, O, I, N, 1.f, A.as<bf16>(), O, B.as<bf16>(), I, 1.f, C.get(), GemmOut::kF32, I, nullptr, s);
    });
    step_ms += l.count * ms;
    step_flops += l.count * 3 * 2.0 * kN * l.I * l.O;
  }
  std::printf("%-32s %-22s %10.1f %9.0f %6.1f%%\n", "all linears of one step (L=12)", "", step_ms * 1e3,
              step_flops / (step_ms * 1e-3) / 1e12, 100 * step_flops / (step_ms * 1e-3) / 1e12 / kPeakTflops);
}

// The ceiling the training benchmark divides by: the best of a few large square bf16 GEMMs through
// the same cuBLASLt path (random data; tensor cores draw less power on zeros).
double measure_gemm_peak(Bench& b) {
  const int64_t n = 8192;
  DeviceBuffer A = random_buffer<bf16>(n * n, 30), B = random_buffer<bf16>(n * n, 31);
  DeviceBuffer C = random_buffer<bf16>(n * n, 32);
  Gemm gemm;
  double best = 0;
  for (const bool trans_b : {true, false}) {
    const double ms = b.time_ms([&] {
      gemm.run(false, trans_b, n, n, n, 1.f, A.as<bf16>(), n, B.as<bf16>(), n, 0.f, C.get(), GemmOut::kBf16, n,
               nullptr, b.stream());
    });
    best = std::max(best, 2.0 * n * n * n / (ms * 1e-3) / 1e12);
  }
  return best;
}

}  // namespace
}  // namespace pylon::cuda

// usage: pylon_bench_kernels           every kernel and the step's GEMMs
//        pylon_bench_kernels --peak    one line, PEAK_TFLOPS <bf16 GEMM TFLOP/s of this GPU>
int main(int argc, char** argv) {
  using namespace pylon::cuda;
  try {
    if (device_count() == 0) {
      std::fprintf(stderr, "pylon_bench_kernels: no CUDA device\n");
      return 1;
    }
    cudaDeviceProp prop{};
    PYLON_CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
    std::printf("%s: %d SMs, %.0f MB L2; median of %d runs after %d warm-ups, L2 flushed before each\n", prop.name,
                prop.multiProcessorCount, prop.l2CacheSize / 1e6, kRuns, kWarmup);
    Bench bench;
    if (argc > 1 && std::string(argv[1]) == "--peak") {
      std::printf("PEAK_TFLOPS %.1f\n", measure_gemm_peak(bench));
      return 0;
    }
    bench_memory_bound(bench);
    bench_gemms(bench);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "pylon_bench_kernels: %s\n", e.what());
    return 1;
  }
  return 0;
}
