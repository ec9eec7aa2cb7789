// Fuzzes the Chrome trace readers: `pylon trace analyze` (read_trace_slices, analyze_trace,
// profile/analysis.h) and `pylon trace merge` (merge_chrome_traces, profile/chrome_trace.h).
#include "fuzz_util.h"
#include "profile/analysis.h"
#include "profile/chrome_trace.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = pylon::fuzz::write_scratch("trace.json", pylon::fuzz::as_text(data, size));
  pylon::fuzz::expect_clean([&] {
    const auto slices = pylon::profile::read_trace_slices(path);
    const auto analysis = pylon::profile::analyze_trace(slices);
    (void)pylon::profile::format_analysis(analysis);
    (void)pylon::profile::analysis_json(analysis).dump();
  });
  const std::string merged = (pylon::fuzz::scratch_dir() / "merged.json").string();
  pylon::fuzz::expect_clean([&] { pylon::profile::merge_chrome_traces(merged, {path, path}); });
  return 0;
}
