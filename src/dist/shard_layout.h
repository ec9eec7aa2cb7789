// How FSDP cuts MiniLLM into shards. A unit is what is gathered at once: the root (embed.weight,
// then head.weight) and one per block (its 8 parameters in table order). Each unit is one flat
// fp32 buffer, its parameters back to back, zero-padded to a multiple of the world size W; rank r
// owns the contiguous slice [r·S, (r+1)·S) with S = padded/W.
//
// DESIGN §4 says each parameter is sharded along dim 0 and leaves the memory layout to us; this
// is the flat form of it (FSDP1's FlatParameter): one all-gather and one reduce-scatter per unit
// land straight in a contiguous buffer, with no per-parameter copy-out as in FSDP2's per-parameter
// dim-0 shards. A parameter may straddle two ranks' slices; only the unit buffer is padded.
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
  int64_t unit_offset = 0;   // first element inside the unit buffer
  int64_t flat_offset = 0;   // first element inside the model's flat buffer (ParamInfo::offset)
  int64_t numel = 0;
};

struct ShardUnit {
  int id = -1;               // -1: root; i: layers.i
  std::string name;          // "root", "layers.3"
  std::vector<UnitParam> params;
  int64_t numel = 0;         // Σ params' numel
  int64_t padded = 0;        // numel rounded up to a multiple of the world size
  int64_t shard = 0;         // padded / world: every rank's slice length
  int64_t begin(int rank) const { return rank * shard; }
  int64_t end(int rank) const { return (rank + 1) * shard; }
};

class ShardLayout {
 public:
  ShardLayout(const ParamTable& table, int world);

  int world() const { return world_; }
  const ParamTable& table() const { return table_; }
  // Root first, then layers.0 .. L-1: the forward order.
  const std::vector<ShardUnit>& units() const { return units_; }
  const ShardUnit& unit(int id) const { return units_.at(static_cast<size_t>(id + 1)); }

  // layout.json's description: world, and per unit its parameters (name, shape, unit offset,
  // numel), numel, padded size, shard size and each rank's [begin, end).
  nlohmann::json to_json() const;

 private:
  ParamTable table_;
  int world_;
  std::vector<ShardUnit> units_;
};

// Calls fn(p, param_begin, param_end, at) for every parameter p overlapping the unit-buffer range
// [begin, end): p's elements [param_begin, param_end) (flat, row-major) are elements
// [at, at + param_end − param_begin) of a buffer holding that range.
template <typename Fn>
void for_each_overlap(const ShardUnit& u, int64_t begin, int64_t end, Fn&& fn) {
  for (const UnitParam& p : u.params) {
    const int64_t lo = std::max(begin, p.unit_offset), hi = std::min(end, p.unit_offset + p.numel);
    if (lo < hi) fn(p, lo - p.unit_offset, hi - p.unit_offset, lo - begin);
  }
}

// Rank `rank`'s slice (shard elements) of the unit's initial values, computed from the seed alone
// (init_param_range), so no rank materialises the model and every world size starts the same.
// Padding is zero.
void init_shard(const ShardLayout& layout, const ShardUnit& u, int rank, uint64_t seed, float* out);

}  // namespace pylon
