// The GPU FSDP's bucketed device shards (host-only arithmetic, runs without a GPU): uploading
// ShardLayout's flat shards through chunked all-gathers gives every rank exactly its chunk of each
// bucket, and downloading gives the flat shards back, at worlds 1..4 with uneven sizes and
// chunk lengths that cut through buckets and shards.
#include <gtest/gtest.h>

#include <vector>

#include "dist/cuda/shard_buckets.h"

namespace pylon::cuda {
namespace {

ShardUnit unit_of(const std::vector<int64_t>& sizes, int world) {
  ShardUnit u;
  for (size_t i = 0; i < sizes.size(); ++i) {
    u.params.push_back({static_cast<int>(i), u.numel, 0, sizes[i]});
    u.numel += sizes[i];
  }
  u.padded = (u.numel + world - 1) / world * world;
  u.shard = u.padded / world;
  return u;
}

// All ranks' flat shards (padding zero) of a unit whose element k holds k + 1.
std::vector<std::vector<float>> flat_shards(const ShardUnit& u, int world) {
  std::vector<std::vector<float>> out(static_cast<size_t>(world), std::vector<float>(static_cast<size_t>(u.shard), 0.f));
  for (int64_t k = 0; k < u.numel; ++k)
    out[static_cast<size_t>(k / u.shard)][static_cast<size_t>(k % u.shard)] = static_cast<float>(k + 1);
  return out;
}

// What each rank's device shard must hold: chunk r of every bucket, padding zero.
std::vector<float> expected_device_shard(const std::vector<ShardBucket>& buckets, int rank) {
  std::vector<float> out(static_cast<size_t>(device_shard_numel(buckets)), 0.f);
  for (const ShardBucket& b : buckets)
    for (int64_t j = 0; j < b.shard; ++j) {
      const int64_t i = rank * b.shard + j;
      if (i < b.numel) out[static_cast<size_t>(b.at + j)] = static_cast<float>(b.flat_begin + i + 1);
    }
  return out;
}

// Every rank's elements [a, a + n) of `shards`, in rank order (an all-gather of one chunk).
std::vector<float> gather_chunk(const std::vector<std::vector<float>>& shards, int64_t a, int64_t n) {
  std::vector<float> g;
  for (const auto& s : shards) g.insert(g.end(), s.begin() + a, s.begin() + a + n);
  return g;
}

TEST(ShardBuckets, SplitRootOneBucketPerParameter) {
  const ShardUnit u = unit_of({7, 5}, 3);
  const auto b = make_shard_buckets(u, 3, true);
  ASSERT_EQ(b.size(), 2u);
  const std::vector<int64_t> first = {b[0].flat_begin, b[0].numel, b[0].shard, b[0].begin, b[0].at};
  const std::vector<int64_t> second = {b[1].flat_begin, b[1].numel, b[1].shard, b[1].begin, b[1].at};
  EXPECT_EQ(first, (std::vector<int64_t>{0, 7, 3, 0, 0}));
  EXPECT_EQ(second, (std::vector<int64_t>{7, 5, 2, 9, 3}));
  EXPECT_EQ(gathered_numel(b, 3), 15);
  EXPECT_EQ(device_shard_numel(b), 5);
  EXPECT_EQ(&bucket_of(b, 6), &b[0]);
  EXPECT_EQ(&bucket_of(b, 7), &b[1]);
  const auto whole = make_shard_buckets(u, 3, false);  // a block: the flat shard itself
  ASSERT_EQ(whole.size(), 1u);
  EXPECT_EQ(whole[0].shard, u.shard);
  EXPECT_EQ(gathered_numel(whole, 3), u.padded);
}

TEST(ShardBuckets, UploadAndDownloadConvertBetweenFlatAndBucketedShards) {
  for (int world = 1; world <= 4; ++world)
    for (const std::vector<int64_t>& sizes : {std::vector<int64_t>{7, 5}, {8, 8}, {1, 13, 2}, {11}})
      for (const bool split : {true, false}) {
        const ShardUnit u = unit_of(sizes, world);
        const auto buckets = make_shard_buckets(u, world, split);
        const auto flat = flat_shards(u, world);
        const int64_t S = u.shard, T = device_shard_numel(buckets);
        for (const int64_t chunk : {int64_t{1}, int64_t{3}, int64_t{1000}}) {
          const std::string what = "world " + std::to_string(world) + " sizes " + std::to_string(sizes.size()) +
                                   " split " + std::to_string(split) + " chunk " + std::to_string(chunk);
          std::vector<std::vector<float>> device(static_cast<size_t>(world));
          for (int r = 0; r < world; ++r) {
            std::vector<float>& d = device[static_cast<size_t>(r)];
            d.assign(static_cast<size_t>(T), 0.f);
            for (int64_t a = 0; a < S; a += chunk) {
              const int64_t n = std::min(chunk, S - a);
              const std::vector<float> g = gather_chunk(flat, a, n);
              for_each_flat_to_bucket(buckets, world, r, S, a, n, [&](int64_t src, int64_t dst, int64_t count) {
                ASSERT_LE(src + count, static_cast<int64_t>(g.size())) << what;
                ASSERT_LE(dst + count, T) << what;
                for (int64_t i = 0; i < count; ++i) d[static_cast<size_t>(dst + i)] = g[static_cast<size_t>(src + i)];
              });
            }
            EXPECT_EQ(d, expected_device_shard(buckets, r)) << what << " rank " << r;
          }
          for (int r = 0; r < world; ++r) {
            std::vector<float> back(static_cast<size_t>(S), 0.f);
            for (int64_t a = 0; a < T; a += chunk) {
              const int64_t n = std::min(chunk, T - a);
              const std::vector<float> g = gather_chunk(device, a, n);
              for_each_bucket_to_flat(buckets, world, r, S, a, n, [&](int64_t src, int64_t dst, int64_t count) {
                ASSERT_LE(src + count, static_cast<int64_t>(g.size())) << what;
                ASSERT_LE(dst + count, S) << what;
                for (int64_t i = 0; i < count; ++i) back[static_cast<size_t>(dst + i)] = g[static_cast<size_t>(src + i)];
              });
            }
            EXPECT_EQ(back, flat[static_cast<size_t>(r)]) << what << " rank " << r;
          }
        }
      }
}

}  // namespace
}  // namespace pylon::cuda
