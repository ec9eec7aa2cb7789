// The FSDP layout: units in forward order, padding to the world size, slices that tile the unit
// buffer, and initialisation straight into shards that reassembles to the single-process model
// at every world size.
#include <gtest/gtest.h>

#include <vector>

#include "dist/shard_layout.h"
#include "model/params.h"

namespace pylon {
namespace {

// Seed preset, V=53 D=25 H=5: root 2·53·25 = 2650 and blocks 7650 elements, so units are uneven
// for 3 ranks (root) and 4 ranks (both), and embed/head straddle rank boundaries.
ModelConfig uneven_model() {
  ModelConfig c;
  c.preset = Preset::seed;
  c.vocab = 53, c.dim = 25, c.heads = 5, c.layers = 2;
  return c;
}

TEST(ShardLayout, UnitsPaddingAndSlices) {
  const ParamTable table = param_table(uneven_model());
  for (int world : {1, 2, 3, 4, 7}) {
    const ShardLayout layout(table, world);
    ASSERT_EQ(layout.units().size(), 3u);
    const ShardUnit& root = layout.unit(-1);
    EXPECT_EQ(root.name, "root");
    ASSERT_EQ(root.params.size(), 2u);
    EXPECT_EQ(table.params[root.params[0].param].name, "embed.weight");
    EXPECT_EQ(table.params[root.params[1].param].name, "head.weight");
    EXPECT_EQ(root.params[1].unit_offset, 53 * 25);
    EXPECT_EQ(layout.unit(1).name, "layers.1");
    EXPECT_EQ(layout.unit(1).params.size(), 8u);
    int64_t total = 0;
    for (const ShardUnit& u : layout.units()) {
      total += u.numel;
      EXPECT_EQ(u.padded % world, 0);
      EXPECT_GE(u.padded, u.numel);
      EXPECT_LT(u.padded - u.numel, world);
      EXPECT_EQ(u.shard * world, u.padded);
      EXPECT_EQ(u.begin(0), 0);
      EXPECT_EQ(u.end(world - 1), u.padded);
      int64_t offset = 0;
      for (const UnitParam& p : u.params) {
        EXPECT_EQ(p.unit_offset, offset) << u.name;
        EXPECT_EQ(p.flat_offset, table.params[p.param].offset);
        offset += p.numel;
      }
    }
    EXPECT_EQ(total, table.total);
    const auto j = layout.to_json();
    EXPECT_EQ(j["world"], world);
    EXPECT_EQ(j["units"][0]["params"][1]["name"], "head.weight");
    EXPECT_EQ(j["units"][0]["ranks"].size(), static_cast<size_t>(world));
  }
  EXPECT_EQ(ShardLayout(table, 3).unit(-1).padded, 2652);
  EXPECT_EQ(ShardLayout(table, 4).unit(0).padded, 7652);
}

TEST(ShardLayout, ShardInitialisationReassemblesTheModel) {
  const ParamTable table = param_table(uneven_model());
  std::vector<float> want(table.total);
  init_params(table, 7, want.data());
  for (int world : {1, 2, 3, 4}) {
    const ShardLayout layout(table, world);
    std::vector<float> got(table.total, -1.f);
    for (const ShardUnit& u : layout.units()) {
      std::vector<float> unit(u.padded);
      for (int r = 0; r < world; ++r) init_shard(layout, u, r, 7, unit.data() + u.begin(r));
      for (int64_t i = u.numel; i < u.padded; ++i) EXPECT_EQ(unit[i], 0.f) << "padding";
      for (const UnitParam& p : u.params)
        std::copy(unit.begin() + p.unit_offset, unit.begin() + p.unit_offset + p.numel,
                  got.begin() + p.flat_offset);
    }
    EXPECT_EQ(got, want) << "world " << world;  // bitwise: every world size starts the same
  }
}

}  // namespace
}  // namespace pylon
