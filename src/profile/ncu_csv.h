// Reads Nsight Compute's CSV exports as users make them: `--page raw` (a header row of metric
// names, a row of units, then one row per kernel launch) with Pylon's --metrics list, the default
// sections, `--set full` or `--section SpeedOfLight`, also through `ncu --import report.ncu-rep`;
// and `--page details` (one row per launch, section and metric), from which the speed-of-light
// section's figures are read.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "profile/roofline.h"

namespace pylon::profile {

// The metrics to ask ncu for (comma-separated, for --metrics): the three that are required
// (duration, SM and DRAM throughput as % of peak) and the optional bytes and FLOP counters.
const char* ncu_roofline_metrics();

// Per kernel name (launches summed), in order of first launch. Skips ncu's "==PROF==" lines and
// anything before the header. Throws pylon::Error, one line naming the file and the row or
// column, for input that is not such an export, a missing required metric, a figure that is not
// a finite number >= 0 (absent optional ones, "n/a" or empty, are not measured), or sums that
// overflow. Kernel and device names that are not valid UTF-8 get U+FFFD. Linear time, one record
// in memory at a time.
std::vector<KernelCounters> read_ncu_csv(const std::string& path, std::string* device_name = nullptr);
// Required: the duration, SM throughput and DRAM throughput (raw: dram__throughput or the SOL
// section's gpu__dram_throughput). FP32 FLOPs from the .sum counters, or from --set full's
// .sum.per_cycle_elapsed rates times smsp__cycles_elapsed.avg.
// The same from text (the file's contents); `source` names it in errors.
std::vector<KernelCounters> parse_ncu_csv(std::string_view text, const std::string& source,
                                          std::string* device_name = nullptr);

// One line for exports without FLOP counters or DRAM bytes (what is missing, what the verdicts rest
// on, the ncu flags that add them); "" when the kernels have both.
std::string missing_counters_note(const std::vector<KernelCounters>& kernels);

// A kernel name without "void ", its parameter list and anonymous namespaces: how ncu and CUPTI
// both spell it once demangled ("pylon::adamw_kernel<4>", "attention_forward_wgmma<128, true>").
std::string short_kernel_name(const std::string& name);
// A kernel symbol as CUPTI reports it (mangled) demangled, then shortened as above; a name that
// does not demangle is only shortened.
std::string kernel_name_from_symbol(const std::string& symbol);

}  // namespace pylon::profile
