// The roofline: per kernel its hardware counters (from an Nsight Compute CSV or CUPTI's range
// profiler), achieved FLOP/s and bytes against the device's ceilings, and a verdict with the fix.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace pylon::profile {

// One kernel's counters, summed over its launches (percentages: duration-weighted means).
// A count that was not measured is negative.
struct KernelCounters {
  std::string name;
  int64_t launches = 0;
  double seconds = 0;       // gpu__time_duration.sum
  double sm_pct = 0;        // sm__throughput.avg.pct_of_peak_sustained_elapsed
  double dram_pct = 0;      // dram__throughput.avg.pct_of_peak_sustained_elapsed
  double memory_pct = -1;   // gpu__compute_memory_throughput...: the busiest of L1, L2, DRAM
  double dram_bytes = -1;   // dram__bytes.sum (read + write)
  double fp32_flop = -1;    // fadd + fmul + 2 ffma (sm__sass_thread_inst_executed_op_*_pred_on.sum)
  double tensor_flop = -1;  // sm__ops_path_tensor_src_*.sum (the tensor cores' math operations)
};

// Adds one launch to a kernel's sums.
void accumulate(KernelCounters& into, const KernelCounters& launch);

// Peak rates the chart draws and the verdicts compare with.
struct DeviceCeilings {
  std::string device;
  double tensor_flops = 0;      // dense bf16 tensor-core FLOP/s (0: unknown)
  double fp32_flops = 0;        // fp32 FLOP/s on the CUDA cores (0: unknown)
  double dram_bytes_per_s = 0;  // HBM bandwidth (0: unknown)
};
// The datasheet ceilings of known devices (H200, H100 SXM/PCIe, A100), matched by name; unknown
// devices get zeros.
DeviceCeilings datasheet_ceilings(const std::string& device_name);
// Where the datasheet has no bandwidth: the median over kernels of bytes / time / DRAM%, the peak
// the counters themselves imply. 0 when no kernel has bytes and a DRAM share.
double implied_dram_bandwidth(const std::vector<KernelCounters>& kernels);

enum class Bound { memory, compute, latency };
const char* bound_name(Bound b);

struct KernelVerdict {
  KernelCounters k;
  double flops_per_s = -1;  // (tensor + fp32) / seconds; negative when no FLOPs were counted
  double dram_bytes_per_s = -1;
  double intensity = -1;    // FLOP per DRAM byte
  Bound bound = Bound::latency;
  std::string fix;
};

// Neither SM nor memory throughput reaches 60% of peak -> latency-bound (ncu's Speed-of-Light
// rule: too little work in flight). Else the roofline decides where it can: arithmetic intensity
// below the ridge point (peak FLOP/s over DRAM bandwidth; the tensor peak when the kernel uses
// tensor cores) -> memory-bound, above -> compute-bound. Without FLOP or byte counts or ceilings,
// the busier of SM and memory throughput names the bound.
KernelVerdict judge(const KernelCounters& k, const DeviceCeilings& c);
// Every kernel, judged, sorted by total time (longest first).
std::vector<KernelVerdict> judge_all(const std::vector<KernelCounters>& kernels, const DeviceCeilings& c);

std::string format_roofline_table(const std::vector<KernelVerdict>& v, const DeviceCeilings& c, size_t rows = 30);
nlohmann::json roofline_json(const std::vector<KernelVerdict>& v, const DeviceCeilings& c);
// An SVG chart: log-log arithmetic intensity vs FLOP/s, the memory and compute roofs of `c`, a dot
// per kernel with FLOP and byte counts (colour = verdict, size = share of time, title = name).
// write_roofline_svg writes it atomically (nothing at `path` on failure; throws pylon::Error).
std::string roofline_svg(const std::vector<KernelVerdict>& v, const DeviceCeilings& c);
void write_roofline_svg(const std::vector<KernelVerdict>& v, const DeviceCeilings& c, const std::string& path);

}  // namespace pylon::profile
