// Units, dim-0 chunks and padding of the FSDP layout; deterministic shard initialisation.
#include "dist/shard_layout.h"

#include <algorithm>

#include "core/error.h"

namespace pylon {

ShardLayout::ShardLayout(const ParamTable& table, int world) : table_(table), world_(world) {
  PYLON_CHECK(world >= 1, "world size must be positive, got ", world);
  int layers = 0;
  for (const auto& p : table_.params) layers = std::max(layers, p.unit + 1);
  units_.resize(static_cast<size_t>(layers) + 1);
  for (int id = -1; id < layers; ++id) {
    ShardUnit& u = units_[static_cast<size_t>(id + 1)];
    u.id = id;
    u.name = id < 0 ? "root" : "layers." + std::to_string(id);
  }
  // Table order is embed, blocks, head: the root gets embed then head, as the layout promises.
  for (size_t i = 0; i < table_.params.size(); ++i) {
    const ParamInfo& p = table_.params[i];
    ShardUnit& u = units_[static_cast<size_t>(p.unit + 1)];
    const int64_t rows = p.shape.empty() ? 1 : p.shape[0];
    PYLON_ASSERT(rows > 0 && p.numel % rows == 0, p.name, ": ", p.numel, " elements in ", rows, " rows");
    UnitParam q;
    q.param = static_cast<int>(i), q.numel = p.numel, q.flat_offset = p.offset;
    q.chunk = (rows + world - 1) / world * (p.numel / rows);
    q.shard_offset = u.shard, q.unit_offset = world * u.shard;
    u.params.push_back(q);
    u.numel += p.numel;
    u.shard += q.chunk;
  }
  for (ShardUnit& u : units_) {
    PYLON_ASSERT(u.numel > 0, "unit ", u.name, " is empty");
    u.padded = world * u.shard;
  }
}

nlohmann::json ShardLayout::to_json() const {
  nlohmann::json units = nlohmann::json::array();
  for (const ShardUnit& u : units_) {
    nlohmann::json params = nlohmann::json::array();
    for (const UnitParam& p : u.params) {
      const ParamInfo& info = table_.params[static_cast<size_t>(p.param)];
      params.push_back({{"name", info.name}, {"shape", info.shape}, {"numel", p.numel}, {"chunk", p.chunk},
                        {"shard_offset", p.shard_offset}});
    }
    units.push_back({{"name", u.name}, {"params", params}, {"numel", u.numel}, {"shard", u.shard}});
  }
  return {{"format", kShardFormat}, {"world", world_}, {"units", units}};
}

void init_shard(const ShardLayout& layout, const ShardUnit& u, int rank, uint64_t seed, float* out) {
  std::fill(out, out + u.shard, 0.f);
  for_each_piece(u, rank, [&](const UnitParam& p, int64_t b, int64_t e, int64_t at) {
    init_param_range(layout.table().params[static_cast<size_t>(p.param)], seed, b, e, out + at);
  });
}

}  // namespace pylon
