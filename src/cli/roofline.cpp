// pylon roofline --ncu-csv FILE: per kernel SM and DRAM throughput, FLOP/s, bytes, intensity and a
// verdict with its fix, from an Nsight Compute raw CSV; as a table, JSON and an SVG chart.
#include <cstdio>
#include <string>

#include "cli/args.h"
#include "cli/commands.h"
#include "core/error.h"
#include "profile/ncu_csv.h"
#include "profile/roofline.h"

namespace pylon {

int run_roofline(int argc, char** argv) {
  std::string csv, json_path, svg_path, device;
  double peak_tflops = 0, peak_fp32_tflops = 0, peak_gbs = 0;
  int top = 30;
  const std::string summary =
      std::string("Roofline verdicts per kernel (memory-, compute- or latency-bound, and the fix).\n"
                  "From Nsight Compute: ncu --clock-control none --csv --page raw --metrics \\\n  ") +
      profile::ncu_roofline_metrics() + " --log-file FILE PROGRAM\n"
      "On a Pylon training step without ncu (CUPTI's range profiler):\n"
      "  pylon train --device cuda --profile DIR --profile-roofline  (writes DIR/roofline.json, .svg)";
  ArgParser args("roofline", summary);
  args.add("ncu-csv", &csv, "an `ncu --csv --page raw` export with the metrics above");
  args.add("json", &json_path, "also write the verdicts as JSON to this file");
  args.add("svg", &svg_path, "also write the roofline chart as SVG to this file");
  args.add("device", &device, "device name for the ceilings (default: from the export)");
  args.add("peak-tflops", &peak_tflops, "bf16 tensor ceiling in TFLOP/s (default: the device's datasheet)");
  args.add("peak-fp32-tflops", &peak_fp32_tflops, "fp32 ceiling in TFLOP/s (default: datasheet)");
  args.add("peak-gbs", &peak_gbs, "DRAM ceiling in GB/s (default: datasheet, else implied by the counters)");
  args.add("top", &top, "kernels in the printed table");
  if (!args.parse(argc, argv)) {
    std::fputs(args.help().c_str(), stdout);
    return 0;
  }
  PYLON_CHECK(!csv.empty(), "roofline needs --ncu-csv FILE (an `ncu --csv --page raw` export)");
  PYLON_CHECK(top > 0, "--top must be positive");
  PYLON_CHECK(peak_tflops >= 0 && peak_fp32_tflops >= 0 && peak_gbs >= 0, "--peak-* must be non-negative");
  std::string exported_device;
  const auto kernels = profile::read_ncu_csv(csv, &exported_device);
  profile::DeviceCeilings c = profile::datasheet_ceilings(device.empty() ? exported_device : device);
  if (peak_tflops > 0) c.tensor_flops = peak_tflops * 1e12;
  if (peak_fp32_tflops > 0) c.fp32_flops = peak_fp32_tflops * 1e12;
  if (peak_gbs > 0) c.dram_bytes_per_s = peak_gbs * 1e9;
  if (c.dram_bytes_per_s <= 0) c.dram_bytes_per_s = profile::implied_dram_bandwidth(kernels);
  const auto verdicts = profile::judge_all(kernels, c);
  std::fputs(profile::format_roofline_table(verdicts, c, static_cast<size_t>(top)).c_str(), stdout);
  if (!json_path.empty()) {
    std::FILE* f = std::fopen(json_path.c_str(), "w");
    PYLON_CHECK(f, json_path, ": cannot open for writing");
    const bool ok = std::fputs((profile::roofline_json(verdicts, c).dump(1) + "\n").c_str(), f) >= 0;
    PYLON_CHECK(std::fclose(f) == 0 && ok, json_path, ": cannot write (disk full?)");
    std::printf("wrote %s\n", json_path.c_str());
  }
  if (!svg_path.empty()) {
    profile::write_roofline_svg(verdicts, c, svg_path);
    std::printf("wrote %s\n", svg_path.c_str());
  }
  return 0;
}

}  // namespace pylon
