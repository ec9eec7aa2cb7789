// pylon trace merge OUT IN...: the per-rank traces of a profiled run as one Chrome trace file with
// a process per rank.
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "core/error.h"
#include "profile/chrome_trace.h"

namespace pylon {

int run_trace(int argc, char** argv) {
  const char* usage =
      "usage: pylon trace merge OUT IN...\n\n"
      "Merge Chrome trace files (pylon train --profile writes DIR/trace.rank<R>.json) into OUT,\n"
      "one process per rank; open it in Perfetto UI (ui.perfetto.dev) or chrome://tracing.\n";
  if (argc >= 3 && (!std::strcmp(argv[2], "--help") || !std::strcmp(argv[2], "-h"))) {
    std::fputs(usage, stdout);
    return 0;
  }
  PYLON_CHECK(argc >= 3 && !std::strcmp(argv[2], "merge"), "expected 'pylon trace merge OUT IN...'");
  PYLON_CHECK(argc >= 5, "trace merge needs an output file and at least one input trace");
  const std::string out = argv[3];
  const std::vector<std::string> inputs(argv + 4, argv + argc);
  profile::merge_chrome_traces(out, inputs);
  std::printf("merged %zu trace%s into %s\n", inputs.size(), inputs.size() > 1 ? "s" : "", out.c_str());
  return 0;
}

}  // namespace pylon
