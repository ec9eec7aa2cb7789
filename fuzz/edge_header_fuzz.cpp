// Fuzzes EdgeFile (io/edge_format.h): the edge file's magic, version, header length and CRC, the
// JSON config and tensor table, offsets, alignment and lengths.
#include "fuzz_util.h"
#include "io/edge_format.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = pylon::fuzz::write_scratch("model.pylon", pylon::fuzz::as_text(data, size));
  pylon::fuzz::expect_clean([&] {
    (void)pylon::EdgeFile::has_magic(path);
    pylon::EdgeFile edge(path);
    for (const pylon::EdgeTensor& t : edge.tensors()) {
      (void)pylon::edge_value_bytes(t);
      (void)pylon::edge_scale_bytes(t);
    }
    (void)edge.tokenizer();
  });
  return 0;
}
