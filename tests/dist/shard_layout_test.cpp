// The FSDP layout: units in forward order, every parameter cut along dim 0 with padding rows, and
// initialisation straight into shards that reassembles to the single-process model at every world
// size.
#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

#include "dist/shard_layout.h"
#include "model/params.h"

namespace pylon {
namespace {

// Seed preset, V=53 D=25 H=5: root 2·53·25 = 2650 and blocks 7650 elements, so units are uneven
// for 3 ranks (root) and 4 ranks (both), and embed/head straddle rank boundaries.
ModelConfig uneven_model() {
  ModelConfig c;
  c.preset = find_preset("seed");
  c.vocab = 53, c.dim = 25, c.heads = 5, c.layers = 2;
  return c;
}

// Every parameter is cut along dim 0: rank r's chunk holds rows [r·R', (r+1)·R'), R' = ceil(rows / W);
// a rank's shard is its chunks back to back; the gathered unit holds each parameter whole, at W times
// its shard offset.
TEST(ShardLayout, UnitsAndDim0Chunks) {
  const ParamTable table = param_table(uneven_model());
  for (int world : {1, 2, 3, 4, 7}) {
    const ShardLayout layout(table, world);
    ASSERT_EQ(layout.units().size(), 3u);
    const ShardUnit& root = layout.unit(-1);
    EXPECT_EQ(root.name, "root");
    ASSERT_EQ(root.params.size(), 2u);
    EXPECT_EQ(table.params[root.params[0].param].name, "embed.weight");
    EXPECT_EQ(table.params[root.params[1].param].name, "head.weight");
    const int64_t vocab_rows = (53 + world - 1) / world;  // embed and head: 53 rows of 25
    EXPECT_EQ(root.params[0].chunk, vocab_rows * 25);
    EXPECT_EQ(root.params[1].shard_offset, vocab_rows * 25);
    EXPECT_EQ(root.params[1].unit_offset, world * vocab_rows * 25);
    EXPECT_EQ(layout.unit(1).name, "layers.1");
    EXPECT_EQ(layout.unit(1).params.size(), 8u);
    int64_t total = 0;
    for (const ShardUnit& u : layout.units()) {
      total += u.numel;
      int64_t shard = 0, numel = 0;
      for (const UnitParam& p : u.params) {
        const ParamInfo& info = table.params[p.param];
        const int64_t rows = info.shape[0], row = info.numel / rows;
        EXPECT_EQ(p.chunk, (rows + world - 1) / world * row) << info.name;
        EXPECT_EQ(p.shard_offset, shard) << info.name;
        EXPECT_EQ(p.unit_offset, world * shard) << info.name;
        EXPECT_EQ(p.flat_offset, info.offset);
        EXPECT_EQ(p.numel, info.numel);
        // The ranks' pieces tile the parameter in order; each starts on a row.
        int64_t next = 0;
        for (int r = 0; r < world; ++r) {
          EXPECT_EQ(p.first(r), std::min(next, p.numel));
          EXPECT_EQ(p.first(r) % row, 0) << info.name << " rank " << r;
          EXPECT_LE(p.last(r) - p.first(r), p.chunk);
          next = p.last(r);
        }
        EXPECT_EQ(next, p.numel);
        shard += p.chunk, numel += p.numel;
      }
      EXPECT_EQ(u.shard, shard);
      EXPECT_EQ(u.numel, numel);
      EXPECT_EQ(u.padded, world * u.shard);
    }
    EXPECT_EQ(total, table.total);
    const auto j = layout.to_json();
    EXPECT_EQ(j["format"], kShardFormat);
    EXPECT_EQ(j["world"], world);
    EXPECT_EQ(j["units"][0]["params"][1]["name"], "head.weight");
    EXPECT_EQ(j["units"][0]["params"][1]["chunk"], vocab_rows * 25);
  }
  // 53 vocabulary rows over 4 ranks: 14 each, the last 11 and three rows of padding.
  EXPECT_EQ(ShardLayout(table, 4).unit(-1).shard, 2 * 14 * 25);
  EXPECT_EQ(ShardLayout(table, 4).unit(-1).params[1].last(3), 53 * 25);
}

TEST(ShardLayout, ShardInitialisationReassemblesTheModel) {
  const ParamTable table = param_table(uneven_model());
  std::vector<float> want(table.total);
  init_params(table, 7, want.data());
  for (int world : {1, 2, 3, 4}) {
    const ShardLayout layout(table, world);
    std::vector<float> got(table.total, -1.f);
    for (const ShardUnit& u : layout.units()) {
      for (int r = 0; r < world; ++r) {
        std::vector<float> shard(u.shard, -1.f);
        init_shard(layout, u, r, 7, shard.data());
        for (const UnitParam& p : u.params) {
          const int64_t n = p.last(r) - p.first(r);  // then padding
          std::copy(shard.begin() + p.shard_offset, shard.begin() + p.shard_offset + n,
                    got.begin() + p.flat_offset + p.first(r));
          for (int64_t k = std::max<int64_t>(n, 0); k < p.chunk; ++k) EXPECT_EQ(shard[p.shard_offset + k], 0.f) << "padding";
        }
      }
    }
    EXPECT_EQ(got, want) << "world " << world;  // bitwise: every world size starts the same
  }
}

}  // namespace
}  // namespace pylon
