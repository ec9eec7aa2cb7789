// Buckets of a unit's device shard (see shard_buckets.h).
#include "dist/cuda/shard_buckets.h"

#include "core/error.h"

namespace pylon::cuda {

std::vector<ShardBucket> make_shard_buckets(const ShardUnit& u, int world, bool split) {
  PYLON_ASSERT(world >= 1);
  std::vector<ShardBucket> out;
  auto add = [&](int64_t flat_begin, int64_t numel) {
    ShardBucket b;
    b.flat_begin = flat_begin, b.numel = numel;
    b.shard = (numel + world - 1) / world;
    if (!out.empty()) b.begin = out.back().begin + world * out.back().shard, b.at = out.back().at + out.back().shard;
    out.push_back(b);
  };
  if (split && u.params.size() > 1)
    for (const UnitParam& p : u.params) add(p.unit_offset, p.numel);
  else
    add(0, u.numel);
  return out;
}

int64_t gathered_numel(const std::vector<ShardBucket>& buckets, int world) {
  int64_t n = 0;
  for (const ShardBucket& b : buckets) n += world * b.shard;
  return n;
}

int64_t device_shard_numel(const std::vector<ShardBucket>& buckets) {
  int64_t n = 0;
  for (const ShardBucket& b : buckets) n += b.shard;
  return n;
}

const ShardBucket& bucket_of(const std::vector<ShardBucket>& buckets, int64_t k) {
  for (const ShardBucket& b : buckets)
    if (k >= b.flat_begin && k < b.flat_begin + b.numel) return b;
  PYLON_ASSERT(false, "element ", k, " lies in no bucket");
  return buckets.front();
}

}  // namespace pylon::cuda
