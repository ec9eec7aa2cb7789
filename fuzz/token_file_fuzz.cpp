// Fuzzes TokenFile (io/token_file.h): the llm.c header, the width by name or flag, the size checks.
// The first byte picks the name and the width flag; the rest is the file.
#include "fuzz_util.h"
#include "io/token_file.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const int pick = data[0] % 6;
  const char* name = pick % 2 ? "tokens.u32" : "tokens.bin";
  const pylon::TokenWidth width = pick / 2 == 0   ? pylon::TokenWidth::automatic
                                  : pick / 2 == 1 ? pylon::TokenWidth::u16
                                                  : pylon::TokenWidth::u32;
  const std::string path = pylon::fuzz::write_scratch(name, pylon::fuzz::as_text(data + 1, size - 1));
  pylon::fuzz::expect_clean([&] {
    pylon::TokenFile tokens(path, width);
    if (tokens.size() > 0) (void)(tokens[0] + tokens[tokens.size() - 1]);
    tokens.check_vocab(50000);
  });
  return 0;
}
