// Fuzzes the Nsight Compute CSV reader (profile/ncu_csv.h) on the export's text.
#include "fuzz_util.h"
#include "profile/ncu_csv.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(pylon::fuzz::as_text(data, size));
  pylon::fuzz::expect_clean([&] {
    std::string device;
    (void)pylon::profile::parse_ncu_csv(text, "fuzz.csv", &device);
  });
  return 0;
}
