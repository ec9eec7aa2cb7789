// pylon roofline: per kernel SM and DRAM throughput, FLOP/s, bytes, intensity and a verdict with
// its fix, as a table, JSON and an SVG chart; from an Nsight Compute raw CSV (--ncu-csv FILE), or
// from CUPTI's range profiler around a pylon command run in this process (-- pylon CMD ...).
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "cli/args.h"
#include "cli/commands.h"
#include "core/error.h"
#include "io/atomic_file.h"
#include "profile/command_counters.h"
#include "profile/counter_profile.h"
#include "profile/ncu_csv.h"
#include "profile/roofline.h"

namespace pylon {
namespace {

struct Profilable {
  const char* name;
  int (*run)(int, char**);
};
// The commands that can run under the counters (the others launch no kernel, or are this one).
constexpr Profilable kProfilable[] = {
    {"train", run_train}, {"eval", run_eval}, {"generate", run_generate}, {"export", run_export}};

// The command after `--`: `pylon CMD [flags]`, checked before anything runs. Returns its entry point.
int (*profiled_command(int argc, char** argv))(int, char**) {
  const std::string usage = "after --, expected `pylon <command> [flags]`";
  PYLON_CHECK(argc >= 2, usage);
  const std::string program = argv[0];
  const size_t slash = program.rfind('/');
  PYLON_CHECK(program.substr(slash == std::string::npos ? 0 : slash + 1) == "pylon", usage, ", got `", program, "`");
  const std::string command = argv[1];
  PYLON_CHECK(command != "roofline", "roofline cannot profile `pylon roofline`");
  int (*run)(int, char**) = nullptr;
  for (const Profilable& p : kProfilable)
    if (command == p.name) run = p.run;
  PYLON_CHECK(run, "cannot profile `pylon ", command, "`: expected train, eval, generate or export");
  for (int i = 2; i < argc; ++i) {
    const std::string flag = argv[i];
    const std::string value = flag.find('=') != std::string::npos ? flag.substr(flag.find('=') + 1)
                              : i + 1 < argc                      ? argv[i + 1]
                                                                  : "";
    const std::string name = flag.substr(0, flag.find('='));
    PYLON_CHECK(!((name == "--nproc-per-node" || name == "--nnodes") && value != "1"),
                "roofline profiles one process: drop ", name, " (each rank would be a process of its own)");
    PYLON_CHECK(name != "--profile",
                "drop --profile from the command (tracing and the counters cannot share CUPTI; for one "
                "chosen step use pylon train --profile DIR --profile-roofline)");
  }
  return run;
}

}  // namespace

int run_roofline(int argc, char** argv) {
  std::string csv, json_path, svg_path, device;
  double peak_tflops = 0, peak_fp32_tflops = 0, peak_gbs = 0;
  int top = 30;
  const std::string summary =
      std::string("Roofline verdicts per kernel (memory-, compute- or latency-bound, and the fix).\n"
                  "usage: pylon roofline [flags] --ncu-csv FILE\n"
                  "       pylon roofline [flags] -- pylon COMMAND [its flags]   (CUPTI's range profiler)\n"
                  "From Nsight Compute: ncu --clock-control none --csv --page raw --metrics \\\n  ") +
      profile::ncu_roofline_metrics() + " --log-file FILE PROGRAM\n"
      "Around a pylon command, run here with every kernel replayed (slow: seconds per kernel, so keep\n"
      "the run short, e.g. pylon train ... --steps 1). For one chosen training step:\n"
      "  pylon train --device cuda --profile DIR --profile-roofline  (writes DIR/roofline.json, .svg)";
  ArgParser args("roofline", summary);
  args.add("ncu-csv", &csv, "an `ncu --csv` export: --page raw with the metrics above, the default sections, --set full or --section SpeedOfLight (ncu --import too), or --page details");
  args.add("json", &json_path, "also write the verdicts as JSON to this file");
  args.add("svg", &svg_path, "also write the roofline chart as SVG to this file");
  args.add("device", &device, "device name for the ceilings (default: from the export, or this GPU)");
  args.add("peak-tflops", &peak_tflops, Range::at_least(0), "bf16 tensor ceiling in TFLOP/s (default: the device's datasheet)");
  args.add("peak-fp32-tflops", &peak_fp32_tflops, Range::at_least(0), "fp32 ceiling in TFLOP/s (default: datasheet)");
  args.add("peak-gbs", &peak_gbs, Range::at_least(0), "DRAM ceiling in GB/s (default: datasheet, else implied by the counters)");
  args.add("top", &top, Range::at_least(1), "kernels in the printed table");
  int split = argc;  // `--` starts the profiled command
  for (int i = 2; i < argc && split == argc; ++i)
    if (std::strcmp(argv[i], "--") == 0) split = i;
  if (!args.parse(split, argv)) {
    std::fputs(args.help().c_str(), stdout);
    return 0;
  }
  const bool command = split < argc;
  PYLON_CHECK(csv.empty() == command, command ? "give either --ncu-csv FILE or -- pylon COMMAND, not both"
                                              : "roofline needs --ncu-csv FILE or -- pylon COMMAND [flags]");
  PYLON_CHECK(top > 0, "--top must be positive");
  PYLON_CHECK(peak_tflops >= 0 && peak_fp32_tflops >= 0 && peak_gbs >= 0, "--peak-* must be non-negative");

  std::vector<profile::KernelCounters> kernels;
  std::string source_device;
  if (command) {
    const int command_argc = argc - split - 1;
    char** command_argv = argv + split + 1;
    int (*run)(int, char**) = profiled_command(command_argc, command_argv);
    PYLON_CHECK(profile::counter_profiling_available(),
                "this build has no CUPTI (install the CUDA toolkit's CUPTI and rebuild)");
    const std::string what = std::string("pylon ") + command_argv[1];
    const profile::CommandCounters counted =
        profile::count_command_kernels(what, [&] { return run(command_argc, command_argv); });
    kernels = counted.kernels;
    source_device = profile::current_device_name();
    int64_t launches = 0;
    for (const auto& k : kernels) launches += k.launches;
    std::printf("CUPTI range profiler over `%s`: %zu kernels, %lld launches, %d replay passes each (caches not "
                "flushed: compare with ncu --cache-control none)\n",
                what.c_str(), kernels.size(), static_cast<long long>(launches), counted.passes);
  } else {
    kernels = profile::read_ncu_csv(csv, &source_device);
    const std::string note = profile::missing_counters_note(kernels);
    if (!note.empty()) std::printf("note: %s\n", note.c_str());
  }
  profile::DeviceCeilings c = profile::datasheet_ceilings(device.empty() ? source_device : device);
  if (peak_tflops > 0) c.tensor_flops = peak_tflops * 1e12;
  if (peak_fp32_tflops > 0) c.fp32_flops = peak_fp32_tflops * 1e12;
  if (peak_gbs > 0) c.dram_bytes_per_s = peak_gbs * 1e9;
  PYLON_CHECK(std::isfinite(c.tensor_flops) && std::isfinite(c.fp32_flops) && std::isfinite(c.dram_bytes_per_s),
              "--peak-tflops, --peak-fp32-tflops and --peak-gbs must be finite in FLOP/s and bytes/s");
  if (c.dram_bytes_per_s <= 0) c.dram_bytes_per_s = profile::implied_dram_bandwidth(kernels);
  const auto verdicts = profile::judge_all(kernels, c);
  // Both outputs are made before either is written, each written atomically: no partial file.
  const auto replace = nlohmann::json::error_handler_t::replace;  // never throws on bad UTF-8
  const std::string json_text =
      json_path.empty() ? "" : profile::roofline_json(verdicts, c).dump(1, ' ', false, replace) + "\n";
  const std::string svg_text = svg_path.empty() ? "" : profile::roofline_svg(verdicts, c);
  std::fputs(profile::format_roofline_table(verdicts, c, static_cast<size_t>(top)).c_str(), stdout);
  if (!json_path.empty()) {
    write_file_atomic(json_path, json_text);
    std::printf("wrote %s\n", json_path.c_str());
  }
  if (!svg_path.empty()) {
    write_file_atomic(svg_path, svg_text);
    std::printf("wrote %s\n", svg_path.c_str());
  }
  return 0;
}

}  // namespace pylon
