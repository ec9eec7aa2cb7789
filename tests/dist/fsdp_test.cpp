// FSDP on one rank and across threads: MiniLLM calls its unit hooks in the promised order; the
// sharded step equals the plain model's step bit for bit at world 1; prefetching changes no bit;
// NaN poisoning of freed units really exposes a read of one; sharded checkpoints reload exactly at other world sizes and refuse
// other models and missing shards.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <cstdint>
#include <mutex>
#include <random>
#include <string>
#include <vector>

#include "core/error.h"
#include "dist/fsdp.h"
#include "dist/shard_layout.h"
#include "io/safetensors.h"
#include "model/minillm.h"
#include "model/weights.h"
#include "support/temp_dir.h"
#include "support/thread_ranks.h"
#include "train/checkpoint.h"

namespace pylon {
namespace {

ModelConfig small_model(const Preset& preset = find_preset("causal")) {
  ModelConfig c;
  c.preset = preset;
  c.vocab = 29, c.dim = 12, c.heads = 2, c.layers = 2;
  return c;
}

void tokens(std::vector<int32_t>& in, std::vector<int32_t>& tg, int vocab) {
  for (size_t i = 0; i < in.size(); ++i) {
    in[i] = static_cast<int32_t>((i * 7 + 3) % vocab);
    tg[i] = static_cast<int32_t>((i * 5 + 1) % vocab);
  }
}

class Recorder final : public UnitHooks {
 public:
  void before_forward(int u) override { log += "F" + std::to_string(u) + " "; }
  void after_forward(int u) override { log += "f" + std::to_string(u) + " "; }
  void before_backward(int u) override { log += "B" + std::to_string(u) + " "; }
  void after_backward(int u) override { log += "b" + std::to_string(u) + " "; }
  std::string log;
};

TEST(Fsdp, MiniLlmCallsUnitHooksInOrder) {
  MiniLLM model(small_model());
  std::vector<float> params(model.table().total), grads(params.size(), 0.f);
  init_params(model.table(), 1, params.data());
  std::vector<int32_t> in(2 * 5), tg(in.size());
  tokens(in, tg, 29);
  Recorder r;
  model.forward(params.data(), in.data(), tg.data(), 2, 5, &r);
  EXPECT_EQ(r.log, "F-1 F0 f0 F1 f1 f-1 ");
  r.log.clear();
  model.backward(params.data(), grads.data(), 0.1f, &r);
  EXPECT_EQ(r.log, "B-1 B1 b1 B0 b0 b-1 ");
}

// World 1 through the FSDP hooks: the model reads the shards and writes the gradient shards, with
// the same loss and gradients, bit for bit, as the plain model.
TEST(Fsdp, SingleRankStepEqualsPlainModel) {
  const ModelConfig config = small_model(find_preset("seed"));
  MiniLLM model(config);
  const ParamTable& table = model.table();
  std::vector<float> params(table.total), grads(table.total, 0.f);
  init_params(table, 3, params.data());
  std::vector<int32_t> in(2 * 6), tg(in.size());
  tokens(in, tg, config.vocab);
  const float want_loss = model.forward(params.data(), in.data(), tg.data(), 2, 6);
  model.backward(params.data(), grads.data(), 1.f / 12);

  const auto comm = make_single_rank_communicator();
  const ShardLayout layout(table, 1);
  for (bool reshard : {true, false}) {
    FsdpModel fsdp(layout, *comm, {reshard, /*poison_resharded=*/true});
    fsdp.init_params(3);
    const float loss = model.forward(fsdp.params(), in.data(), tg.data(), 2, 6, &fsdp);
    model.backward(fsdp.params(), fsdp.grads(), 1.f / 12, &fsdp);
    EXPECT_EQ(loss, want_loss);
    for (const ShardUnit& u : layout.units())
      for (const UnitParam& p : u.params)
        for (int64_t i = 0; i < p.numel; ++i)
          ASSERT_EQ(fsdp.shards()[u.id + 1].grad[p.unit_offset + i], grads[p.flat_offset + i])
              << table.params[p.param].name << "[" << i << "] reshard " << reshard;
  }
}

// Two ranks: with the collectives on the worker thread (prefetch) or blocking, the same bits;
// every unit is freed (NaN-poisoned) after the step; a backward that skipped the re-gather of a
// resharded unit reads NaN.
TEST(Fsdp, PrefetchChangesNoBitAndPoisonCatchesStaleReads) {
  const ModelConfig config = small_model(find_preset("causal"));
  const ParamTable table = param_table(config);
  std::vector<int32_t> in(2 * 6), tg(in.size());
  tokens(in, tg, config.vocab);
  std::mutex mutex;
  std::vector<std::vector<float>> results(4);  // [prefetch · 2 + rank]: loss, then grad shards
  testing::run_thread_ranks(2, [&](Communicator& comm) {
    const ShardLayout layout(table, 2);
    MiniLLM model(config);
    for (bool prefetch : {false, true}) {
      FsdpOptions options;
      options.poison_resharded = true, options.prefetch = prefetch;
      FsdpModel fsdp(layout, comm, options);
      fsdp.init_params(3);
      std::vector<float> out = {model.forward(fsdp.params(), in.data(), tg.data(), 2, 6, &fsdp)};
      model.backward(fsdp.params(), fsdp.grads(), 1.f / 12, &fsdp);
      for (const UnitShards& s : fsdp.shards()) out.insert(out.end(), s.grad.begin(), s.grad.end());
      for (const float* p : fsdp.params())
        ASSERT_TRUE(std::isnan(*p)) << "a parameter slot still holds a value after the step";
      {
        std::lock_guard<std::mutex> lock(mutex);
        results[(prefetch ? 2 : 0) + comm.rank()] = out;
      }
      model.forward(fsdp.params(), in.data(), tg.data(), 2, 6, &fsdp);
      std::vector<float> stale(table.total, 0.f);
      model.backward(fsdp.params(), param_pointers(table, stale.data()), 1.f / 12, nullptr);
      bool nan = false;
      for (float g : stale) nan = nan || std::isnan(g);
      EXPECT_TRUE(nan) << "poisoned slots did not show a read of a resharded unit";
      fsdp.sync();
    }
  });
  EXPECT_EQ(results[0], results[2]) << "rank 0: prefetch changed the step";
  EXPECT_EQ(results[1], results[3]) << "rank 1: prefetch changed the step";
}

// A value for the test checkpoint: unit u, element i of its parameters back to back.
float marker(int unit, int64_t i, int what) { return static_cast<float>(what * 100000 + unit * 10000) + static_cast<float>(i) * 0.5f; }

// Element k of the unit's parameter p, counted over its parameters back to back.
int64_t unit_element(const ShardUnit& u, const UnitParam& p, int64_t k) {
  int64_t before = 0;
  for (const UnitParam& q : u.params) {
    if (q.param == p.param) break;
    before += q.numel;
  }
  return before + k;
}

TEST(Fsdp, CheckpointsReloadExactlyAtAnyWorldSize) {
  testing::TempDir tmp;
  const ModelConfig config = small_model();  // root 2·29·12 = 696, blocks 1800: uneven for 5 and 7
  const ParamTable table = param_table(config);
  const std::string dir = tmp.file("ckpt");
  testing::run_thread_ranks(3, [&](Communicator& comm) {
    const ShardLayout layout(table, 3);
    FsdpModel fsdp(layout, comm, {});
    for (const ShardUnit& u : layout.units()) {
      UnitShards& s = fsdp.shards()[u.id + 1];
      for_each_piece(u, comm.rank(), [&](const UnitParam& p, int64_t b, int64_t e, int64_t at) {
        for (int64_t k = b; k < e; ++k) {
          const size_t x = static_cast<size_t>(at + k - b);
          const int64_t i = unit_element(u, p, k);
          s.param[x] = marker(u.id, i, 0), s.m[x] = marker(u.id, i, 1), s.v[x] = marker(u.id, i, 2);
        }
      });
    }
    save_checkpoint(dir, {config, 5, {{"note", "test"}}, ""}, fsdp);
  });
  for (const auto& e : std::filesystem::directory_iterator(dir))
    EXPECT_EQ(e.path().filename().string().find(".tmp"), std::string::npos) << e.path();
  const CheckpointInfo info = read_checkpoint_info(dir);
  EXPECT_EQ(info.step, 5);
  EXPECT_EQ(info.world, 3);
  EXPECT_EQ(info.config.dim, 12);
  EXPECT_EQ(info.trainer["note"], "test");

  // The exported full model holds every parameter at its place.
  const ShardLayout three(table, 3);
  std::vector<float> full(table.total);
  load_weights(SafetensorsReader(info.folder + "/model.safetensors"), table, full.data());
  for (const ShardUnit& u : three.units())
    for (const UnitParam& p : u.params)
      for (int64_t i = 0; i < p.numel; ++i)
        ASSERT_EQ(full[p.flat_offset + i], marker(u.id, unit_element(u, p, i), 0));

  for (int world : {1, 2, 3, 4, 5, 7}) {
    const ShardLayout layout(table, world);
    for (int r = 0; r < world; ++r) {
      std::vector<UnitShards> shards;
      load_checkpoint_shards(info, layout, r, shards);
      for (const ShardUnit& u : layout.units()) {
        const UnitShards& s = shards[u.id + 1];
        ASSERT_EQ(s.param.size(), static_cast<size_t>(u.shard));
        std::vector<bool> held(static_cast<size_t>(u.shard), false);
        for_each_piece(u, r, [&](const UnitParam& p, int64_t b, int64_t e, int64_t at) {
          for (int64_t k = b; k < e; ++k) {
            const size_t x = static_cast<size_t>(at + k - b);
            const int64_t i = unit_element(u, p, k);
            held[x] = true;
            ASSERT_EQ(s.param[x], marker(u.id, i, 0)) << world << " " << r << " " << u.name;
            ASSERT_EQ(s.m[x], marker(u.id, i, 1));
            ASSERT_EQ(s.v[x], marker(u.id, i, 2));
          }
        });
        for (size_t x = 0; x < held.size(); ++x)  // padding rows
          if (!held[x]) {
            ASSERT_EQ(s.param[x], 0.f) << world << " " << r << " " << u.name << " padding " << x;
          }
      }
    }
  }

  // Another model, or a shard file gone: clear errors naming the problem.
  ModelConfig other = config;
  other.layers = 3;
  std::vector<UnitShards> shards;
  EXPECT_THROW(load_checkpoint_shards(info, ShardLayout(param_table(other), 2), 0, shards), Error);
  other = config;
  other.vocab = 31;
  try {
    load_checkpoint_shards(info, ShardLayout(param_table(other), 2), 0, shards);
    FAIL() << "a different vocab loaded";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("a different model"), std::string::npos) << e.what();
  }
  CheckpointInfo flat = info;  // an earlier Pylon's flat shards: a clear error, and the way out
  flat.layout["format"] = "pylon-fsdp-flat-v1";
  try {
    load_checkpoint_shards(flat, ShardLayout(table, 2), 0, shards);
    FAIL() << "flat shards loaded as dim-0 chunks";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--init-from"), std::string::npos) << e.what();
  }
  std::filesystem::remove(info.folder + "/" + shard_file_name(1, 3));
  EXPECT_THROW(read_checkpoint_info(dir), Error);
  try {
    load_checkpoint_shards(info, ShardLayout(table, 2), 0, shards);
    FAIL() << "a missing shard loaded";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("shard-00001-of-00003.safetensors: missing"), std::string::npos)
        << e.what();
  }
}

// 2000 seeded mutations of a checkpoint's layout.json (leaves set to edge values or to other
// leaves' values, keys removed, a unit repeated or dropped): loading it at another world size
// gives every rank its shards or one pylon::Error line, never a crash or another exception.
TEST(Fsdp, CheckpointLayoutMutationFuzz) {
  testing::TempDir tmp;
  const ModelConfig config = small_model();
  const ParamTable table = param_table(config);
  const std::string dir = tmp.file("ckpt");
  testing::run_thread_ranks(3, [&](Communicator& comm) {
    const ShardLayout layout(table, 3);
    FsdpModel fsdp(layout, comm, {});
    save_checkpoint(dir, {config, 1, {}, ""}, fsdp);
  });
  const CheckpointInfo info = read_checkpoint_info(dir);
  const nlohmann::json flat = info.layout.flatten();
  std::vector<std::string> leaves;
  for (auto it = flat.begin(); it != flat.end(); ++it) leaves.push_back(it.key());
  const std::vector<nlohmann::json> edges = {0,   1,   -1,  2,       3,   int64_t{1} << 31, int64_t{1} << 62,
                                             (uint64_t{1} << 63) + 5, INT64_MIN, 1.5, -1e300, "",  "x", nullptr, true};
  const ShardLayout two(table, 2);
  std::mt19937_64 rng(20261201);
  int loaded = 0, rejected = 0;
  for (int iter = 0; iter < 2000; ++iter) {
    nlohmann::json h = flat;
    const int edits = 1 + static_cast<int>(rng() % 3);
    for (int e = 0; e < edits; ++e) {
      const std::string& leaf = leaves[rng() % leaves.size()];
      switch (rng() % 3) {
        case 0: h[leaf] = edges[rng() % edges.size()]; break;
        case 1: h[leaf] = flat[leaves[rng() % leaves.size()]]; break;
        case 2: h.erase(leaf); break;
      }
    }
    CheckpointInfo c = info;
    c.layout = h.unflatten();
    if (rng() % 10 == 0 && c.layout["units"].is_array() && !c.layout["units"].empty()) {
      nlohmann::json& units = c.layout["units"];
      const size_t i = rng() % units.size();
      if (rng() % 2) units.push_back(units[i]);
      else units.erase(units.begin() + static_cast<std::ptrdiff_t>(i));
    }
    for (int r = 0; r < 2; ++r) {
      std::vector<UnitShards> shards;
      try {
        load_checkpoint_shards(c, two, r, shards);
        ++loaded;
      } catch (const Error& e) {
        EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos) << "mutation " << iter << ": " << e.what();
        ++rejected;
      }
    }
  }
  EXPECT_GT(rejected, 1000);
  std::printf("[ fsdp ] layout mutations: %d loads, %d rejected\n", loaded, rejected);
}

}  // namespace
}  // namespace pylon
