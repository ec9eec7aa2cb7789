// Fuzzes the Hugging Face tokenizer.json reader (io/hf_tokenizer.h, io/byte_level_bpe.h): the
// input is a tokenizer.json, then optionally a NUL and a tokenizer_config.json. A tokenizer that
// loads encodes and decodes a fixed text.
#include "fuzz_util.h"
#include "io/hf_tokenizer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto parts = pylon::fuzz::split_at_nul(data, size);  // tokenizer.json, tokenizer_config.json
  pylon::fuzz::expect_clean([&] {
    pylon::HfTokenizer tok(std::string(parts.first), "tokenizer.json", std::string(parts.second),
                           "tokenizer_config.json");
    const std::vector<int> ids = tok.encode("Hello world! 12345 \xc3\xa9t\xc3\xa9  <|endoftext|>\n\tend");
    (void)tok.decode(ids);
    (void)tok.serialize();
  });
  return 0;
}
