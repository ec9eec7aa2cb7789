// Fuzzes the Hugging Face config.json reader (model/hf_config.h) and the parameter table it leads to.
#include "fuzz_util.h"
#include "model/hf_config.h"
#include "model/params.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string dir = (pylon::fuzz::scratch_dir() / "hf").string();
  pylon::fuzz::write_scratch("hf/config.json", pylon::fuzz::as_text(data, size));
  pylon::fuzz::expect_clean([&] {
    const pylon::ModelConfig config = pylon::read_hf_config(dir);
    if (config.layers <= 64) (void)pylon::param_table(config);  // more layers: only a longer table
  });
  return 0;
}
