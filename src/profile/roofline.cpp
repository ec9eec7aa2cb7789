// Verdicts per kernel from its Speed-of-Light percentages, the known devices' ceilings, and the
// table and JSON forms of a roofline.
#include "profile/roofline.h"

#include <algorithm>
#include <cstdio>

namespace pylon::profile {
namespace {

constexpr double kBusyPct = 60;  // ncu: below this share of peak a unit is not the limiter

std::string fix_for(Bound b, const KernelCounters& k) {
  switch (b) {
    case Bound::latency:
      return "neither SMs nor memory reach 60% of peak: too little work in flight; fuse it with its "
             "neighbours, give it more blocks or a larger batch, or replay the step as a CUDA graph";
    case Bound::memory:
      return "fuse it with its producer or consumer to skip HBM round trips, store its "
             "data in fewer bytes (bf16/fp8, int8/int4 weights), or raise the batch for more reuse per byte";
    case Bound::compute:
      return k.tensor_flop <= 0 && k.fp32_flop > 0
                 ? "the CUDA cores are the limit: move the math to the tensor cores in bf16 or fp8"
                 : "lower precision (fp8) for twice the tensor rate, tiles and shapes aligned "
                   "to 64/128 so no tile is ragged, fewer non-matmul instructions in the main loop";
  }
  return "";
}

double pct_mean(double a, double wa, double b, double wb) {
  if (a < 0 || b < 0) return -1;
  return wa + wb > 0 ? (a * wa + b * wb) / (wa + wb) : (a + b) / 2;
}

double sum_known(double a, double b) { return a < 0 || b < 0 ? -1 : a + b; }

}  // namespace

void accumulate(KernelCounters& into, const KernelCounters& l) {
  into.sm_pct = pct_mean(into.sm_pct, into.seconds, l.sm_pct, l.seconds);
  into.dram_pct = pct_mean(into.dram_pct, into.seconds, l.dram_pct, l.seconds);
  into.memory_pct = pct_mean(into.memory_pct, into.seconds, l.memory_pct, l.seconds);
  into.dram_bytes = sum_known(into.dram_bytes, l.dram_bytes);
  into.fp32_flop = sum_known(into.fp32_flop, l.fp32_flop);
  into.tensor_flop = sum_known(into.tensor_flop, l.tensor_flop);
  into.seconds += l.seconds;
  into.launches += l.launches;
}

DeviceCeilings datasheet_ceilings(const std::string& name) {
  auto has = [&](const char* s) { return name.find(s) != std::string::npos; };
  // NVIDIA datasheets: dense bf16 tensor, fp32 CUDA-core FLOP/s, HBM bytes/s.
  if (has("H200")) return {name, 989.4e12, 66.9e12, 4.8e12};
  if (has("H100") && has("PCIe")) return {name, 756.0e12, 51.2e12, 2.0e12};
  if (has("H100")) return {name, 989.4e12, 66.9e12, 3.35e12};
  if (has("A100") && has("80GB")) return {name, 312e12, 19.5e12, 2.039e12};
  if (has("A100")) return {name, 312e12, 19.5e12, 1.555e12};
  return {name, 0, 0, 0};
}

double implied_dram_bandwidth(const std::vector<KernelCounters>& kernels) {
  std::vector<double> peaks;
  for (const KernelCounters& k : kernels)
    if (k.dram_bytes > 0 && k.seconds > 0 && k.dram_pct >= 10)  // a small share is mostly noise
      peaks.push_back(k.dram_bytes / k.seconds / (k.dram_pct / 100));
  if (peaks.empty()) return 0;
  std::nth_element(peaks.begin(), peaks.begin() + static_cast<std::ptrdiff_t>(peaks.size() / 2), peaks.end());
  return peaks[peaks.size() / 2];
}

const char* bound_name(Bound b) {
  switch (b) {
    case Bound::memory: return "memory-bound";
    case Bound::compute: return "compute-bound";
    case Bound::latency: return "latency-bound";
  }
  return "";
}

KernelVerdict judge(const KernelCounters& k, const DeviceCeilings& c) {
  KernelVerdict v;
  v.k = k;
  if (k.seconds > 0) {
    if (k.tensor_flop >= 0 || k.fp32_flop >= 0)
      v.flops_per_s = (std::max(0.0, k.tensor_flop) + std::max(0.0, k.fp32_flop)) / k.seconds;
    if (k.dram_bytes >= 0) v.dram_bytes_per_s = k.dram_bytes / k.seconds;
  }
  if (v.flops_per_s >= 0 && k.dram_bytes > 0) v.intensity = v.flops_per_s * k.seconds / k.dram_bytes;
  const double memory = std::max(k.dram_pct, k.memory_pct);
  const double peak = k.tensor_flop > 0 ? c.tensor_flops : c.fp32_flops;
  if (std::max(k.sm_pct, memory) < kBusyPct)
    v.bound = Bound::latency;
  else if (v.intensity >= 0 && peak > 0 && c.dram_bytes_per_s > 0)
    v.bound = v.intensity < peak / c.dram_bytes_per_s ? Bound::memory : Bound::compute;
  else
    v.bound = memory >= k.sm_pct ? Bound::memory : Bound::compute;
  v.fix = fix_for(v.bound, k);
  return v;
}

std::vector<KernelVerdict> judge_all(const std::vector<KernelCounters>& kernels, const DeviceCeilings& c) {
  std::vector<KernelVerdict> out;
  for (const KernelCounters& k : kernels) out.push_back(judge(k, c));
  std::stable_sort(out.begin(), out.end(),
                   [](const KernelVerdict& a, const KernelVerdict& b) { return a.k.seconds > b.k.seconds; });
  return out;
}

std::string format_roofline_table(const std::vector<KernelVerdict>& v, const DeviceCeilings& c, size_t rows) {
  double total = 0;
  for (const KernelVerdict& x : v) total += x.k.seconds;
  std::string out;
  char line[512];
  std::snprintf(line, sizeof line, "roofline of %zu kernels on %s (ceilings: %.0f TFLOP/s bf16 tensor, %.1f fp32, %.0f GB/s)\n",
                v.size(), c.device.empty() ? "an unnamed device" : c.device.c_str(), c.tensor_flops / 1e12,
                c.fp32_flops / 1e12, c.dram_bytes_per_s / 1e9);
  out += line;
  const char* fmt = "%-56s %6s %10s %6s %6s %6s %9s %9s %9s %8s %8s  %s\n";
  std::snprintf(line, sizeof line, fmt, "Kernel", "Calls", "Time", "Time%", "SM%", "DRAM%", "TC TF/s", "FP32 TF/s",
                "DRAM MB", "GB/s", "FLOP/B", "Verdict");
  const std::string header = line;
  out += header + std::string(header.size() - 1, '-') + "\n";
  auto num = [](double x, const char* f) {
    if (x < 0) return std::string("-");
    char b[32];
    std::snprintf(b, sizeof b, f, x);
    return std::string(b);
  };
  bool seen[3] = {};
  for (size_t i = 0; i < v.size() && i < rows; ++i) {
    const KernelVerdict& x = v[i];
    const KernelCounters& k = x.k;
    std::string name = k.name.size() > 56 ? k.name.substr(0, 53) + "..." : k.name;
    std::snprintf(line, sizeof line, fmt, name.c_str(), std::to_string(k.launches).c_str(),
                  num(k.seconds * 1e3, "%.3fms").c_str(), num(total > 0 ? 100 * k.seconds / total : 0, "%.1f").c_str(),
                  num(k.sm_pct, "%.1f").c_str(), num(k.dram_pct, "%.1f").c_str(),
                  num(k.tensor_flop < 0 || k.seconds <= 0 ? -1 : k.tensor_flop / k.seconds / 1e12, "%.1f").c_str(),
                  num(k.fp32_flop < 0 || k.seconds <= 0 ? -1 : k.fp32_flop / k.seconds / 1e12, "%.2f").c_str(),
                  num(k.dram_bytes < 0 ? -1 : k.dram_bytes / 1e6, "%.1f").c_str(),
                  num(x.dram_bytes_per_s < 0 ? -1 : x.dram_bytes_per_s / 1e9, "%.0f").c_str(),
                  num(x.intensity, "%.1f").c_str(), bound_name(x.bound));
    out += line;
    seen[static_cast<int>(x.bound)] = true;
  }
  if (v.size() > rows) out += "... " + std::to_string(v.size() - rows) + " more kernels (see the JSON)\n";
  out += "what to do:\n";
  for (Bound b : {Bound::memory, Bound::compute, Bound::latency})
    if (seen[static_cast<int>(b)]) {
      KernelCounters tensor;
      tensor.tensor_flop = 1;
      out += std::string("  ") + bound_name(b) + ": " + fix_for(b, tensor) + "\n";
    }
  return out;
}

nlohmann::json roofline_json(const std::vector<KernelVerdict>& v, const DeviceCeilings& c) {
  auto opt = [](double x) { return x < 0 ? nlohmann::json(nullptr) : nlohmann::json(x); };
  nlohmann::json kernels = nlohmann::json::array();
  for (const KernelVerdict& x : v) {
    const KernelCounters& k = x.k;
    kernels.push_back({{"name", k.name}, {"launches", k.launches}, {"seconds", k.seconds},
                       {"sm_pct", k.sm_pct}, {"dram_pct", k.dram_pct}, {"memory_pct", opt(k.memory_pct)},
                       {"dram_bytes", opt(k.dram_bytes)}, {"tensor_flop", opt(k.tensor_flop)},
                       {"fp32_flop", opt(k.fp32_flop)}, {"flops_per_s", opt(x.flops_per_s)},
                       {"dram_bytes_per_s", opt(x.dram_bytes_per_s)}, {"intensity", opt(x.intensity)},
                       {"verdict", bound_name(x.bound)}, {"fix", x.fix}});
  }
  return {{"device", c.device},
          {"ceilings", {{"tensor_flops", c.tensor_flops}, {"fp32_flops", c.fp32_flops},
                        {"dram_bytes_per_s", c.dram_bytes_per_s}}},
          {"kernels", kernels}};
}

}  // namespace pylon::profile
