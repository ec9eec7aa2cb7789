// Fuzzes SafetensorsReader (io/safetensors.h): a .safetensors file's header and tensor table, and
// the conversion of each small tensor to fp32, and the model configuration its metadata or shapes
// describe (eval, generate and export read it so).
#include <vector>

#include "fuzz_util.h"
#include "io/safetensors.h"
#include "model/weights.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = pylon::fuzz::write_scratch("model.safetensors", pylon::fuzz::as_text(data, size));
  pylon::fuzz::expect_clean([&] {
    pylon::SafetensorsReader reader(path);
    std::vector<float> out;
    for (const pylon::TensorView& t : reader.tensors()) {
      if (t.numel() > (int64_t{1} << 16)) continue;
      out.resize(static_cast<size_t>(t.numel()));
      reader.read_f32(t.name, t.shape, out.data());
    }
    pylon::ModelConfig fallback = pylon::ModelConfig::with_preset("seed");
    (void)pylon::config_from_weights(reader, fallback, false, false);
  });
  return 0;
}
