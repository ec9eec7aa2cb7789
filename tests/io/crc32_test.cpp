// The CRC-32 of the edge format's header (zlib's: reflected polynomial 0xEDB88320, init and final
// xor 0xFFFFFFFF) against its published check values.
#include <gtest/gtest.h>

#include <string>

#include "io/edge_format.h"

namespace pylon {
namespace {

uint32_t crc_of(const std::string& s) { return crc32(s.data(), s.size()); }

TEST(Crc32, KnownAnswers) {
  EXPECT_EQ(crc_of("123456789"), 0xCBF43926u);  // the CRC catalogue's check value
  EXPECT_EQ(crc_of(""), 0u);
  EXPECT_EQ(crc_of("a"), 0xE8B7BE43u);
  EXPECT_EQ(crc_of("The quick brown fox jumps over the lazy dog"), 0x414FA339u);
}

}  // namespace
}  // namespace pylon
