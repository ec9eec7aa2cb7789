// The DESIGN §2 data order: row j of micro-step m starts at (m·G + j)·T, wraps cyclically, and
// ranks partition the global batch so every world size sees the same rows.
#include <gtest/gtest.h>

#include <vector>

#include "io/token_file.h"
#include "support/temp_dir.h"
#include "train/data_loader.h"

namespace pylon {
namespace {

TEST(DataLoader, SequentialOrderAndWrap) {
  testing::TempDir tmp;
  const int n = 100;
  std::vector<uint32_t> ids(n);
  for (int i = 0; i < n; ++i) ids[i] = static_cast<uint32_t>(i);
  write_token_file(tmp.file("t.bin"), ids, TokenWidth::u16);
  const TokenFile file(tmp.file("t.bin"));
  const int B = 3, T = 7;
  const DataLoader loader(file, B, T);
  std::vector<int32_t> in(B * T), tg(B * T);
  for (int64_t m = 0; m < 12; ++m) {  // 12·3·7 = 252 tokens: wraps twice
    loader.load(m, in.data(), tg.data());
    for (int j = 0; j < B; ++j)
      for (int t = 0; t < T; ++t) {
        const int64_t pos = (m * B + j) * T + t;
        EXPECT_EQ(in[j * T + t], pos % n) << "m=" << m << " j=" << j << " t=" << t;
        EXPECT_EQ(tg[j * T + t], (pos + 1) % n);
      }
  }
}

TEST(DataLoader, RanksPartitionTheGlobalBatch) {
  testing::TempDir tmp;
  std::vector<uint32_t> ids(257);
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<uint32_t>((i * 7919) % 1000);
  write_token_file(tmp.file("t.bin"), ids, TokenWidth::u16);
  const TokenFile file(tmp.file("t.bin"));
  const int B = 2, T = 5, world = 3;
  const DataLoader one(file, B * world, T);
  std::vector<int32_t> all_in(B * world * T), all_tg(all_in.size()), in(B * T), tg(B * T);
  for (int64_t m = 0; m < 5; ++m) {
    one.load(m, all_in.data(), all_tg.data());
    for (int r = 0; r < world; ++r) {
      DataLoader(file, B, T, r, world).load(m, in.data(), tg.data());
      for (int i = 0; i < B * T; ++i) {
        EXPECT_EQ(in[i], all_in[r * B * T + i]);
        EXPECT_EQ(tg[i], all_tg[r * B * T + i]);
      }
    }
  }
}

}  // namespace
}  // namespace pylon
