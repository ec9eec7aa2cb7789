// How the GPU FSDP runtime shards a unit on the device: as one or more buckets, each padded to a
// multiple of the world size W and split into W equal chunks, rank r owning chunk r of every
// bucket. A block is one bucket, which is exactly ShardLayout's flat shard. The root is split into
// one bucket per parameter (embedding, head) when W > 1, so the head's gradient can be
// reduce-scattered, and its next weights gathered, as soon as the head's backward ends, while
// the embedding's gradient is still being formed. Host shards (checkpoints, initialisation) keep
// ShardLayout's flat form; upload and download convert through an all-gather of the other form,
// one chunk at a time (for_each_flat_to_bucket, for_each_bucket_to_flat say which elements go where).
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "dist/shard_layout.h"

namespace pylon::cuda {

struct ShardBucket {
  int64_t flat_begin = 0;  // first element in ShardLayout's unit buffer (UnitParam::unit_offset)
  int64_t numel = 0;       // its parameters' elements
  int64_t shard = 0;       // per rank: ceil(numel / W)
  int64_t begin = 0;       // first element in the gathered (and gradient) unit buffer: W·shard each
  int64_t at = 0;          // first element in this rank's device shard of the unit
};

// One bucket per parameter when `split`, else one for the whole unit (then shard == u.shard).
std::vector<ShardBucket> make_shard_buckets(const ShardUnit& u, int world, bool split);
// Σ W·shard: the gathered unit buffer's length.
int64_t gathered_numel(const std::vector<ShardBucket>& buckets, int world);
// Σ shard: a rank's device shard length.
int64_t device_shard_numel(const std::vector<ShardBucket>& buckets);
// The bucket holding ShardLayout unit element k (k < the unit's numel).
const ShardBucket& bucket_of(const std::vector<ShardBucket>& buckets, int64_t k);

// Upload: every rank q's flat shard elements [a, a + n) were all-gathered into g (W·n, rank order;
// flat shard length S). Calls copy(src, dst, count): g[src, src + count) are this rank's device
// shard elements [dst, dst + count).
template <typename Fn>
void for_each_flat_to_bucket(const std::vector<ShardBucket>& buckets, int world, int rank, int64_t S,
                             int64_t a, int64_t n, Fn&& copy) {
  for (int q = 0; q < world; ++q) {
    const int64_t k0 = q * S + a, k1 = k0 + n;  // flat unit elements held at g[q·n, q·n + n)
    for (const ShardBucket& b : buckets) {
      const int64_t mine0 = b.flat_begin + rank * b.shard;  // this rank's chunk, in flat elements
      const int64_t mine1 = std::min(mine0 + b.shard, b.flat_begin + b.numel);
      const int64_t lo = std::max(k0, mine0), hi = std::min(k1, mine1);
      if (lo < hi) copy(q * n + (lo - k0), b.at + (lo - mine0), hi - lo);
    }
  }
}

// Download: every rank q's device shard elements [a, a + n) were all-gathered into g (W·n, rank
// order). Calls copy(src, dst, count): g[src, src + count) are this rank's flat shard elements
// [dst, dst + count) (flat shard length S; its padding is not written).
template <typename Fn>
void for_each_bucket_to_flat(const std::vector<ShardBucket>& buckets, int world, int rank, int64_t S,
                             int64_t a, int64_t n, Fn&& copy) {
  for (int q = 0; q < world; ++q) {
    for (const ShardBucket& b : buckets) {
      const int64_t p0 = std::max(a, b.at), p1 = std::min(a + n, b.at + b.shard);  // device shard elements
      if (p0 >= p1) continue;
      // Rank q's chunk of b, as flat unit elements, without the bucket's padding.
      const int64_t k0 = b.flat_begin + q * b.shard + (p0 - b.at);
      const int64_t k1 = std::min(k0 + (p1 - p0), b.flat_begin + b.numel);
      const int64_t lo = std::max(k0, rank * S), hi = std::min(k1, (rank + 1) * S);
      if (lo < hi) copy(q * n + (p0 - a) + (lo - k0), lo - rank * S, hi - lo);
    }
  }
}

}  // namespace pylon::cuda
