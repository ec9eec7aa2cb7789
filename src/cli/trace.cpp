// pylon trace merge OUT IN...: the per-rank traces of a profiled run as one Chrome trace file with
// a process per rank. pylon trace analyze FILE: the step breakdown and kernel-class totals.
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "core/error.h"
#include "profile/analysis.h"
#include "profile/chrome_trace.h"

namespace pylon {

int run_trace(int argc, char** argv) {
  const char* usage =
      "usage: pylon trace merge OUT IN...\n"
      "       pylon trace analyze FILE [--json]\n\n"
      "merge:   merge Chrome trace files (pylon train --profile writes DIR/trace.rank<R>.json) into\n"
      "         OUT, one process per rank; open it in Perfetto UI (ui.perfetto.dev) or chrome://tracing.\n"
      "analyze: per step, time in compute, communication, exposed (not overlapped) communication and\n"
      "         idle, the share of communication hidden behind compute, and time per kernel class;\n"
      "         from the device records (CUDA) or else the CPU ranges. --json prints it as JSON.\n";
  if (argc >= 3 && (!std::strcmp(argv[2], "--help") || !std::strcmp(argv[2], "-h"))) {
    std::fputs(usage, stdout);
    return 0;
  }
  PYLON_CHECK(argc >= 3 && (!std::strcmp(argv[2], "merge") || !std::strcmp(argv[2], "analyze")),
              "expected 'pylon trace merge OUT IN...' or 'pylon trace analyze FILE'");
  if (!std::strcmp(argv[2], "analyze")) {
    bool json = false;
    std::string file;
    for (int i = 3; i < argc; ++i) {
      if (!std::strcmp(argv[i], "--json")) {
        json = true;
      } else {
        PYLON_CHECK(argv[i][0] != '-', "trace analyze: unknown flag ", argv[i]);
        PYLON_CHECK(file.empty(), "trace analyze takes one trace file");
        file = argv[i];
      }
    }
    PYLON_CHECK(!file.empty(), "trace analyze needs a trace file");
    const profile::TraceAnalysis a = profile::analyze_trace(profile::read_trace_slices(file));
    const auto replace = nlohmann::json::error_handler_t::replace;  // never throws on bad UTF-8
    std::fputs(json ? (profile::analysis_json(a).dump(1, ' ', false, replace) + "\n").c_str()
                    : profile::format_analysis(a).c_str(),
               stdout);
    return 0;
  }
  PYLON_CHECK(argc >= 5, "trace merge needs an output file and at least one input trace");
  const std::string out = argv[3];
  const std::vector<std::string> inputs(argv + 4, argv + argc);
  profile::merge_chrome_traces(out, inputs);
  std::printf("merged %zu trace%s into %s\n", inputs.size(), inputs.size() > 1 ? "s" : "", out.c_str());
  return 0;
}

}  // namespace pylon
