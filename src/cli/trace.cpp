// pylon trace merge OUT IN...: the per-rank traces of a profiled run as one Chrome trace file with
// a process per rank. pylon trace analyze FILE: the step breakdown and kernel-class totals.
// pylon trace diff A B: two traces' breakdowns, classes and kernels side by side.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "core/error.h"
#include "profile/analysis.h"
#include "profile/chrome_trace.h"
#include "profile/trace_diff.h"

namespace pylon {

int run_trace(int argc, char** argv) {
  const char* usage =
      "usage: pylon trace merge OUT IN...\n"
      "       pylon trace analyze FILE [--json]\n"
      "       pylon trace diff A B [--json] [--top N]\n\n"
      "merge:   merge Chrome trace files (pylon train --profile writes DIR/trace.rank<R>.json) into\n"
      "         OUT, one process per rank; open it in Perfetto UI (ui.perfetto.dev) or chrome://tracing.\n"
      "analyze: per step, time in compute, communication, exposed (not overlapped) communication and\n"
      "         idle, the share of communication hidden behind compute, and time per kernel class;\n"
      "         from the device records (CUDA) or else the CPU ranges. --json prints it as JSON.\n"
      "diff:    what changed from trace A to trace B (any two Pylon traces, merged ones too): the\n"
      "         mean step breakdown, time per step of each kernel class, the N kernels (default 15)\n"
      "         whose time per step moved most, and kernels new in B or vanished from A, each with\n"
      "         A, B, B - A and B / A. Times are per step of one rank.\n\n"
      "flags:\n"
      "  --json                   analyze, diff: print the analysis or every row of the comparison as JSON\n"
      "  --top N                  diff: kernels in each list [range: [1, 100000]] [default: 15]\n";
  if (argc >= 3 && (!std::strcmp(argv[2], "--help") || !std::strcmp(argv[2], "-h"))) {
    std::fputs(usage, stdout);
    return 0;
  }
  PYLON_CHECK(argc >= 3 && (!std::strcmp(argv[2], "merge") || !std::strcmp(argv[2], "analyze") ||
                             !std::strcmp(argv[2], "diff")),
              "expected 'pylon trace merge OUT IN...', 'pylon trace analyze FILE' or 'pylon trace diff A B'");
  if (!std::strcmp(argv[2], "diff")) {
    bool json = false, top_given = false;
    size_t top = 15;
    std::vector<std::string> files;
    for (int i = 3; i < argc; ++i) {
      if (!std::strcmp(argv[i], "--json")) {
        PYLON_CHECK(!json, "trace diff: --json given twice");
        json = true;
      } else if (!std::strcmp(argv[i], "--top")) {
        PYLON_CHECK(!top_given, "trace diff: --top given twice");
        top_given = true;
        PYLON_CHECK(i + 1 < argc, "trace diff: --top needs a count");
        char* end = nullptr;
        const long n = std::strtol(argv[++i], &end, 10);
        PYLON_CHECK(*argv[i] && !*end && n >= 1 && n <= 100000, "trace diff: --top must be an integer in [1, 100000], got '",
                    argv[i], "'");
        top = static_cast<size_t>(n);
      } else {
        PYLON_CHECK(argv[i][0] != '-', "trace diff: unknown flag ", argv[i]);
        files.push_back(argv[i]);
      }
    }
    PYLON_CHECK(files.size() == 2, "trace diff takes two trace files (A, then B), got ", files.size());
    const profile::TraceDiff d = profile::diff_traces(profile::analyze_trace(profile::read_trace_slices(files[0])),
                                                      profile::analyze_trace(profile::read_trace_slices(files[1])));
    const std::string text =
        json ? profile::diff_json(d, files[0], files[1]).dump(1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n"
             : profile::format_diff(d, files[0], files[1], top);
    std::fputs(text.c_str(), stdout);
    return 0;
  }
  if (!std::strcmp(argv[2], "analyze")) {
    bool json = false;
    std::string file;
    for (int i = 3; i < argc; ++i) {
      if (!std::strcmp(argv[i], "--json")) {
        PYLON_CHECK(!json, "trace analyze: --json given twice");
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
