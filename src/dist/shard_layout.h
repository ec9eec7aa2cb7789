// How FSDP cuts MiniLLM into shards (DESIGN §4). A unit is what is gathered at once: the root
// (embed.weight, then head.weight) and one per block (its 8 parameters in table order). Each
// parameter is sharded along dim 0: its rows are padded to a multiple of the world size W and rank
// r owns rows [r·R', (r+1)·R') with R' = ceil(rows / W), a chunk of R'·(elements per row). A rank's
// shard of a unit is one flat buffer, its chunks of the unit's parameters back to back (padding
// rows zero). Gathered, a unit is one buffer too: each parameter whole and contiguous (its W
// chunks in rank order, then its padding rows), so one all-gather per parameter, grouped, lands
// every parameter where the model reads it, with no copy-out, and one reduce-scatter per
// parameter returns each rank its chunk of the gradient.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "model/params.h"

namespace pylon {

// One parameter's place in its unit.
struct UnitParam {
  int param = 0;             // index into ParamTable::params
  int64_t numel = 0;
  int64_t flat_offset = 0;   // first element inside the model's flat buffer (ParamInfo::offset)
  int64_t chunk = 0;         // elements per rank: ceil(rows / W) · elements per row
  int64_t shard_offset = 0;  // where its chunk sits in every rank's shard of the unit
  int64_t unit_offset = 0;   // first element in the gathered unit buffer: W · shard_offset
  // Rank r's elements of the parameter (flat, row-major): [first(r), last(r)), possibly empty.
  int64_t first(int rank) const { return std::min(numel, rank * chunk); }
  int64_t last(int rank) const { return std::min(numel, (rank + 1) * chunk); }
};

struct ShardUnit {
  int id = -1;               // -1: root; i: layers.i
  std::string name;          // "root", "layers.3"
  std::vector<UnitParam> params;
  int64_t numel = 0;         // Σ params' numel
  int64_t shard = 0;         // Σ params' chunk: every rank's shard length
  int64_t padded = 0;        // W · shard: the gathered unit buffer's length
};

// layout.json's "format": per-parameter dim-0 chunks. ("pylon-fsdp-flat-v1", read too, sliced each
// unit's flat buffer into W equal parts.)
inline constexpr const char* kShardFormat = "pylon-fsdp-dim0-v1";

class ShardLayout {
 public:
  ShardLayout(const ParamTable& table, int world);

  int world() const { return world_; }
  const ParamTable& table() const { return table_; }
  // Root first, then layers.0 .. L-1: the forward order.
  const std::vector<ShardUnit>& units() const { return units_; }
  const ShardUnit& unit(int id) const { return units_.at(static_cast<size_t>(id + 1)); }

  // layout.json's description: format, world, and per unit its parameters (name, shape, numel,
  // chunk, shard offset), numel and shard size.
  nlohmann::json to_json() const;

 private:
  ParamTable table_;
  int world_;
  std::vector<ShardUnit> units_;
};

// Calls fn(p, param_begin, param_end, at) for every parameter p of which `rank` holds elements:
// p's elements [param_begin, param_end) (flat, row-major) are elements [at, at + param_end −
// param_begin) of the rank's shard of the unit.
template <typename Fn>
void for_each_piece(const ShardUnit& u, int rank, Fn&& fn) {
  for (const UnitParam& p : u.params)
    if (p.first(rank) < p.last(rank)) fn(p, p.first(rank), p.last(rank), p.shard_offset);
}

// Rank `rank`'s shard of the unit's initial values, computed from the seed alone
// (init_param_range), so no rank materialises the model and every world size starts the same.
// Padding is zero.
void init_shard(const ShardLayout& layout, const ShardUnit& u, int rank, uint64_t seed, float* out);

}  // namespace pylon
