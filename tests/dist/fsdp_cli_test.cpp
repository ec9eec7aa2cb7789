// FSDP through the real executable, the way users launch it: `pylon train --nproc-per-node N` at
// world sizes 1-4 and 8 against one rank and the PyTorch golden; checkpoints resharded 4 -> 3 -> 1;
// bit-identical resume; a killed or hung rank ending the job in bounded time with a message that
// names it; torchrun-style variables, two "nodes" over loopback and mpirun.
//
// Tolerances: N ranks change only the fp32 summation order of the gradients (partial sums per
// rank, then the ring reduce-scatter) and of the loss (per-rank means, then an all-reduce), so
// losses agree to a few ulps per step; over these short runs the observed gap is ~1e-7 relative,
// and the bound is the golden test's 2e-5 (grad norms 1e-4).
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>
#include <cstring>
#include <iterator>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "dist/socket.h"
#include "io/token_file.h"
#include "support/metrics_check.h"
#include "io/safetensors.h"
#include "support/rewrite_weights.h"
#include "support/run_command.h"
#include "support/temp_dir.h"

namespace pylon {
namespace {

using Outcome = testing::CommandResult;
using testing::pylon_command;
using testing::read_file;
using testing::run_pylon;
using testing::run_together;

std::vector<nlohmann::json> metrics(const std::string& path) {
  std::vector<nlohmann::json> rows;
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);) rows.push_back(nlohmann::json::parse(line));
  return rows;
}

std::string last_line(const std::string& text) {
  std::string t = text;
  while (!t.empty() && t.back() == '\n') t.pop_back();
  const size_t nl = t.rfind('\n');
  return nl == std::string::npos ? t : t.substr(nl + 1);
}

// A seed-preset model whose units do not divide evenly: root 2·53·25 = 2650 elements (uneven for
// 3 and 4 ranks), blocks 7650 (uneven for 4); embed and head straddle rank boundaries.
class FsdpCli : public ::testing::Test {
 protected:
  void SetUp() override {
    std::vector<uint32_t> ids(3000);
    for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<uint32_t>((i * i + 3 * i) % 53);
    write_token_file(tmp_.file("data.bin"), ids, TokenWidth::u16);
  }
  // A run with 12 rows per optimizer step split as `world` ranks x `batch` rows x `accum`, of the
  // model `model` names (the seed preset above by default).
  std::string train(int world, int batch, int steps, const std::string& extra,
                    const std::string& model = "--preset seed --dim 25 --heads 5") const {
    return "train " + model + " --vocab 53 --layers 2 --seq 8 --steps " +
           std::to_string(steps) + " --batch " + std::to_string(batch) +
           " --lr 3e-3 --lr-schedule cosine --warmup 2 --grad-clip 1 --weight-decay 0.1 --seed 5 "
           "--log-every 0 --data " + tmp_.file("data.bin") +
           (world > 1 ? " --nproc-per-node " + std::to_string(world) : "") + " " + extra;
  }
  std::string file(const std::string& name) const { return tmp_.file(name); }

  static void expect_same_curve(const std::vector<nlohmann::json>& got,
                                const std::vector<nlohmann::json>& want, size_t want_from,
                                const std::string& what) {
    ASSERT_LE(want_from + got.size(), want.size()) << what;
    ASSERT_FALSE(got.empty()) << what;
    for (size_t i = 0; i < got.size(); ++i) {
      const auto& w = want[want_from + i];
      EXPECT_EQ(got[i]["step"], w["step"]) << what;
      const double l = got[i]["loss"], wl = w["loss"];
      EXPECT_NEAR(l, wl, 2e-5 * std::fabs(wl)) << what << ", step " << w["step"];
      const double n = got[i]["grad_norm"], wn = w["grad_norm"];
      EXPECT_NEAR(n, wn, 1e-4 * wn) << what << ", grad norm, step " << w["step"];
    }
  }

  testing::TempDir tmp_;
};

TEST_F(FsdpCli, WorldSizesOneToFourGiveTheOneRankCurve) {
  ASSERT_EQ(run_pylon(train(1, 12, 6, "--metrics " + file("w1.jsonl"))).exit_code, 0);
  const auto one = metrics(file("w1.jsonl"));
  ASSERT_EQ(one.size(), 6u);
  struct Case { int world, batch; std::string extra, name; };
  for (const Case& c : {Case{2, 6, "", "2 ranks"}, Case{3, 4, "", "3 ranks"}, Case{4, 3, "", "4 ranks"},
                        Case{2, 3, "--grad-accum 2", "2 ranks x 2 micro-steps"},
                        Case{4, 1, "--grad-accum 3 --no-sync", "4 ranks x 3 no-sync micro-steps"}}) {
    const std::string m = file("w" + std::to_string(c.world) + ".jsonl");
    const Outcome r = run_pylon(train(c.world, c.batch, 6, c.extra + " --metrics " + m));
    ASSERT_EQ(r.exit_code, 0) << c.name << ": " << r.err;
    EXPECT_EQ(r.err, "") << c.name;
    const auto rows = metrics(m);
    expect_same_curve(rows, one, 0, c.name);
    testing::expect_rows_follow_schema(rows, c.world, false, {});
  }
}

// The llama preset over 1, 2 and 3 ranks: grouped-query heads, q/k/v biases and a tied head
// (the embedding's gradient gathers the head's too), shards uneven over 3 ranks.
TEST_F(FsdpCli, LlamaWorldSizesGiveTheOneRankCurve) {
  const std::string llama = "--preset llama --dim 24 --heads 4 --kv-heads 2 --ffn-dim 40 --qkv-bias --tie-embeddings";
  const Outcome first = run_pylon(train(1, 12, 6, "--metrics " + file("l1.jsonl"), llama));
  ASSERT_EQ(first.exit_code, 0) << first.err;
  const auto one = metrics(file("l1.jsonl"));
  ASSERT_EQ(one.size(), 6u);
  for (const int world : {2, 3}) {
    const std::string m = file("l" + std::to_string(world) + ".jsonl");
    const Outcome r = run_pylon(train(world, 12 / world, 6, "--metrics " + m, llama));
    ASSERT_EQ(r.exit_code, 0) << world << " ranks: " << r.err;
    expect_same_curve(metrics(m), one, 0, "llama, " + std::to_string(world) + " ranks");
  }
}

// Eight ranks (the largest world the scaling run uses; uneven shards: root 2650, blocks 7650)
// against one rank with the same 24 rows per step.
TEST_F(FsdpCli, EightRanksGiveTheOneRankCurve) {
  ASSERT_EQ(run_pylon(train(1, 24, 4, "--metrics " + file("one.jsonl"))).exit_code, 0);
  const Outcome r = run_pylon(train(8, 3, 4, "--metrics " + file("eight.jsonl")));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto rows = metrics(file("eight.jsonl"));
  expect_same_curve(rows, metrics(file("one.jsonl")), 0, "8 ranks");
  EXPECT_EQ(rows.back()["peak_mem_bytes_per_rank"].size(), 8u);
}

// Reshard after forward on (default), off (ZeRO-2), with freed units poisoned with NaN, and with
// the collectives on the compute thread: the same arithmetic, so the same bits.
TEST_F(FsdpCli, ReshardModesGiveIdenticalLosses) {
  std::vector<std::vector<nlohmann::json>> runs;
  for (const char* mode : {"", "--no-reshard", "--check-reshard", "--no-prefetch"}) {
    const std::string m = file(std::string("mode") + std::to_string(runs.size()) + ".jsonl");
    const Outcome r = run_pylon(train(3, 4, 3, std::string(mode) + " --metrics " + m));
    ASSERT_EQ(r.exit_code, 0) << mode << ": " << r.err;
    runs.push_back(metrics(m));
  }
  for (size_t k = 1; k < runs.size(); ++k)
    for (size_t i = 0; i < runs[0].size(); ++i) EXPECT_EQ(runs[k][i]["loss"], runs[0][i]["loss"]);
}

// The PyTorch golden runs at every world size their global batch divides into (seed_small: 2
// rows per step; causal_small: 3 rows x 2 micro-steps = 6), compared like golden_test.cpp.
TEST_F(FsdpCli, MatchesThePyTorchGoldenOnSeveralRanks) {
  struct Case { std::string golden; int world, batch, accum; std::string extra; };
  for (const Case& c : {Case{"seed_small", 2, 1, 1, ""}, Case{"causal_small", 2, 3, 1, ""},
                        Case{"causal_small", 3, 2, 1, ""}, Case{"causal_small", 3, 1, 2, "--no-sync"},
                        Case{"causal_small", 2, 1, 3, ""}}) {
    const std::string dir = std::string(PYLON_GOLDEN_DIR) + "/" + c.golden;
    std::ifstream in(dir + "/expected.json");
    const auto e = nlohmann::json::parse(in);
    const std::string m = file(c.golden + std::to_string(c.world) + ".jsonl");
    const std::string args =
        "train --preset " + e["preset"].get<std::string>() + " --vocab " + e["vocab"].dump() +
        " --dim " + e["dim"].dump() + " --layers " + e["layers"].dump() + " --heads " + e["heads"].dump() +
        " --batch " + std::to_string(c.batch) + " --grad-accum " + std::to_string(c.accum) +
        " --seq " + e["seq"].dump() + " --steps " + e["steps"].dump() + " --lr " + e["lr"].dump() +
        " --weight-decay " + e["weight_decay"].dump() + " --beta1 " + e["beta1"].dump() +
        " --beta2 " + e["beta2"].dump() + " --adam-eps " + e["eps"].dump() + " --grad-clip " +
        e["grad_clip"].dump() + " --lr-schedule " + e["lr_schedule"].get<std::string>() +
        " --warmup " + e["warmup"].dump() + " --min-lr-frac " + e["min_lr_frac"].dump() +
        " --init-from " + dir + "/init.safetensors --data " + dir + "/tokens.bin --log-every 0" +
        " --nproc-per-node " + std::to_string(c.world) + " --metrics " + m + " " + c.extra;
    ASSERT_EQ(c.world * c.batch * c.accum, e["batch"].get<int>() * e["grad_accum"].get<int>());
    const Outcome r = run_pylon(args);
    ASSERT_EQ(r.exit_code, 0) << c.golden << ": " << r.err;
    const auto rows = metrics(m);
    ASSERT_EQ(rows.size(), e["losses"].size());
    for (size_t i = 0; i < rows.size(); ++i) {
      const double want = e["losses"][i], got = rows[i]["loss"];
      EXPECT_NEAR(got, want, 2e-5 * want) << c.golden << " on " << c.world << " ranks, step " << i + 1;
      const double want_norm = e["grad_norms"][i], got_norm = rows[i]["grad_norm"];
      EXPECT_NEAR(got_norm, want_norm, 1e-4 * want_norm) << c.golden << ", grad norm, step " << i + 1;
    }
  }
}

TEST_F(FsdpCli, CheckpointsReshardedFourToThreeToOneContinueTheCurve) {
  const Outcome full = run_pylon(train(4, 3, 9, "--save " + file("w4") + " --save-every 3 --metrics " + file("full.jsonl")));
  ASSERT_EQ(full.exit_code, 0) << full.err;
  const auto want = metrics(file("full.jsonl"));
  ASSERT_EQ(want.size(), 9u);
  EXPECT_TRUE(std::filesystem::exists(file("w4/step_000003/shard-00003-of-00004.safetensors")));
  EXPECT_TRUE(std::filesystem::exists(file("w4/step_000003/layout.json")));

  const Outcome three = run_pylon(train(3, 4, 9, "--resume " + file("w4/step_000003") + " --save " + file("w3") +
                                           " --save-every 3 --metrics " + file("w3.jsonl")));
  ASSERT_EQ(three.exit_code, 0) << three.err;
  EXPECT_NE(three.out.find("resumed at step 3"), std::string::npos) << three.out;
  expect_same_curve(metrics(file("w3.jsonl")), want, 3, "4 -> 3 ranks");

  const Outcome one = run_pylon(train(1, 12, 9, "--resume " + file("w3/step_000006") + " --save " + file("w1") +
                                            " --metrics " + file("w1.jsonl")));
  ASSERT_EQ(one.exit_code, 0) << one.err;
  expect_same_curve(metrics(file("w1.jsonl")), want, 6, "3 -> 1 rank");

  // The exported full model serves eval straight from a save directory.
  const Outcome eval = run_pylon("eval --model " + file("w1") + " --data " + file("data.bin") +
                       " --batch 4 --seq 8 --steps 2 --json");
  ASSERT_EQ(eval.exit_code, 0) << eval.err;
  EXPECT_TRUE(std::isfinite(nlohmann::json::parse(last_line(eval.out))["loss"].get<double>()));
}

TEST_F(FsdpCli, ResumeAtTheSameWorldSizeIsBitIdentical) {
  ASSERT_EQ(run_pylon(train(3, 4, 6, "--save " + file("a") + " --save-every 3 --metrics " + file("a.jsonl"))).exit_code, 0);
  const Outcome r = run_pylon(train(3, 4, 6, "--resume " + file("a") + "/step_000003 --save " + file("b") +
                                       " --metrics " + file("b.jsonl")));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto a = metrics(file("a.jsonl")), b = metrics(file("b.jsonl"));
  ASSERT_EQ(a.size(), 6u);
  ASSERT_EQ(b.size(), 3u);
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(b[i]["loss"], a[3 + i]["loss"]) << "step " << 4 + i;  // bitwise
    EXPECT_EQ(b[i]["grad_norm"], a[3 + i]["grad_norm"]) << "step " << 4 + i;
  }
  for (const char* f : {"model.safetensors", "shard-00000-of-00003.safetensors",
                        "shard-00001-of-00003.safetensors", "shard-00002-of-00003.safetensors"})
    EXPECT_EQ(read_file(file(std::string("a/step_000006/") + f)), read_file(file(std::string("b/step_000006/") + f))) << f;
}

// A corrupted shard of a checkpoint resumed on several ranks (issue 38): the launcher checks every
// shard against checksums.json first, so the job is one line naming the file, not an error on each
// rank that reads it and a collective failure on the others.
TEST_F(FsdpCli, CorruptedShardIsOneLineBeforeTheRanksStart) {
  ASSERT_EQ(run_pylon(train(2, 6, 3, "--save " + file("a"))).exit_code, 0);
  const std::string shard = file("a/step_000003/shard-00001-of-00002.safetensors");
  std::string bytes = read_file(shard);
  bytes[bytes.size() - 7] ^= 0x01;
  std::ofstream(shard, std::ios::binary | std::ios::trunc) << bytes;
  testing::expect_clear_error(run_pylon(train(3, 4, 6, "--resume " + file("a"))),
                              "shard-00001-of-00002.safetensors: checksum mismatch");
}

// NaN in --init-from weights on several ranks: the rank that read it died behind the collective
// failure it caused on the others, and its line naming the tensor was lost. The launcher reads
// every tensor first.
TEST_F(FsdpCli, NanInitWeightsAreOneLineBeforeTheRanksStart) {
  ASSERT_EQ(run_pylon(train(2, 6, 1, "--save " + file("a"))).exit_code, 0);
  const std::string saved = file("a/step_000001/model.safetensors");
  testing::rewrite_weights(saved, file("inf.safetensors"), SafetensorsReader(saved).metadata(),
                           {"layers.1.ffn.2.weight", 7, std::numeric_limits<float>::infinity()});
  testing::expect_clear_error(run_pylon(train(2, 6, 2, "--init-from " + file("inf.safetensors"))),
                              "tensor layers.1.ffn.2.weight holds Inf at element 7");
}

TEST_F(FsdpCli, KilledRankEndsTheJobNamingIt) {
  const Outcome r = run_pylon(train(3, 4, 6, "--save " + file("ckpt")),
                    "PYLON_TEST_CRASH_RANK=1 PYLON_TEST_CRASH_STEP=2");
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_LT(r.seconds, 30);
  const std::string line = last_line(r.err);
  EXPECT_EQ(line.rfind("pylon train: error: rank 1 (pid ", 0), 0u) << r.err;
  EXPECT_NE(line.find("was killed by signal 6 (Aborted)"), std::string::npos) << r.err;
  // The peers' "a peer died" errors are consequences: named on that line, not lines of their own.
  size_t error_lines = 0;
  for (size_t at = r.err.find("error:"); at != std::string::npos; at = r.err.find("error:", at + 1)) ++error_lines;
  EXPECT_EQ(error_lines, 1u) << r.err;
  EXPECT_FALSE(std::filesystem::exists(file("ckpt/latest")));
}

// A rank started by hand whose peer dies: its collective fails with one line and exit code 4
// (kExitPeerLost), which tells a launcher that it is a consequence, not a cause.
TEST_F(FsdpCli, RankThatLosesItsPeerExitsWithFour) {
  const ReservedPort reserved;  // rank 0 binds it
  const std::string env = "LOCAL_WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=" + std::to_string(reserved.port()) +
                          " WORLD_SIZE=2 RANK=";
  const auto runs = run_together({{env + "0", train(1, 6, 4, "--dist-timeout 60")},
                                  {env + "1 PYLON_TEST_CRASH_RANK=1 PYLON_TEST_CRASH_STEP=2", train(1, 6, 4, "--dist-timeout 60")}});
  EXPECT_EQ(runs[0].exit_code, 4) << runs[0].err;
  EXPECT_EQ(std::count(runs[0].err.begin(), runs[0].err.end(), '\n'), 1) << runs[0].err;
  EXPECT_NE(runs[0].err.find("failed (a peer died or closed its connection)"), std::string::npos) << runs[0].err;
}

// Rank 0's error (grouped by the launcher, with its rank in front) and how the job ended (rank 1 did
// not end by itself and was stopped), in one line: the only error line after the test hook's own.
TEST_F(FsdpCli, HungRankMakesThePeersTimeOut) {
  const Outcome r = run_pylon(train(2, 6, 6, "--dist-timeout 1"), "PYLON_TEST_HANG_RANK=1 PYLON_TEST_HANG_STEP=2");
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_LT(r.seconds, 30);
  EXPECT_EQ(last_line(r.err), "pylon train: error: rank 0: collective all_gather timed out after 1 s (rank 1 never "
                              "reached it: hung or stopped); stopped the rank 1 still running then")
      << r.err;
  size_t error_lines = 0;
  for (size_t at = r.err.find("error:"); at != std::string::npos; at = r.err.find("error:", at + 1)) ++error_lines;
  EXPECT_EQ(error_lines, 1u) << r.err;
}

// An error every rank hits (each rank scans the data for ids outside --vocab) is one line naming
// the ranks, not rank 0's line, a "[rank r]" copy per rank and the launcher's summary (issue 38).
TEST_F(FsdpCli, ErrorEveryRankHitsIsOneLine) {
  const std::string error = file("data.bin") + ": token at position 5 has id 40, outside the vocabulary of 40";
  for (const int world : {2, 4}) {
    std::string args = train(world, 3, 2, "");
    args.replace(args.find("--vocab 53"), 10, "--vocab 40");
    const Outcome r = run_pylon(args);
    const std::string others = world == 2 ? "rank 1" : "ranks 1-3";
    EXPECT_EQ(r.err, "pylon train: error: rank 0 (and " + others + ", the same error): " + error + "\n")
        << world << " ranks";
    testing::expect_clear_error(r, error);
    EXPECT_EQ(r.out, "") << world << " ranks";
  }
}

// Ranks started by hand each parse their own flags. Found by scripts/hostile.py: a rank with another
// --dim or --vocab handed Gloo buffers of other sizes and died in std::terminate (SIGABRT); one
// with another --heads trained a different model without a word; one told WORLD_SIZE=3 among
// ranks told 2 failed Gloo's internal check (exit 3).
TEST_F(FsdpCli, HandLaunchedRanksThatDisagreeAreOneErrorEach) {
  const std::string common = "LOCAL_WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=";
  const std::string model = "--preset seed --dim 25 --heads 5";
  for (const auto& [extra, other_model] : std::vector<std::pair<std::string, std::string>>{
           {"", "--preset seed --dim 50 --heads 5"},  // other sizes: Gloo aborted
           {"", "--preset seed --dim 25 --heads 1"},  // the same shapes: another model, silently
           {"--grad-accum 2", model}}) {
    SCOPED_TRACE(extra + other_model);
    const ReservedPort reserved;  // rank 0 binds it
    const std::string env = common + std::to_string(reserved.port()) + " WORLD_SIZE=2 RANK=";
    const auto runs = run_together({{env + "0", train(1, 6, 4, "--dist-timeout 20", model)},
                                    {env + "1", train(1, 6, 4, "--dist-timeout 20 " + extra, other_model)}});
    for (int r = 0; r < 2; ++r) testing::expect_clear_error(runs[r], "rank 1 got other flags than rank 0");
  }
  const ReservedPort reserved;
  const std::string env = common + std::to_string(reserved.port()) + " RANK=";
  const auto runs = run_together({{env + "0 WORLD_SIZE=2", train(1, 6, 4, "--dist-timeout 3")},
                                  {env + "1 WORLD_SIZE=3", train(1, 6, 4, "--dist-timeout 3")}});
  testing::expect_clear_error(runs[1], "says 3 ranks, but rank 0 was started with 2");
  EXPECT_EQ(runs[0].exit_code, 1) << runs[0].err;  // it waits for a rank 1 that gave up: its timeout
}

// torchrun-style: the ranks are started by someone else with RANK/WORLD_SIZE/MASTER_*. Rank 0
// binds MASTER_PORT; the test holds that port from the OS until the job is over (as the launcher
// does), so that no parallel test takes it first.
TEST_F(FsdpCli, TorchrunStyleVariables) {
  ASSERT_EQ(run_pylon(train(1, 12, 4, "--metrics " + file("one.jsonl"))).exit_code, 0);
  const ReservedPort reserved;
  const std::string port = std::to_string(reserved.port());
  const auto runs = run_together({
      {"RANK=0 LOCAL_RANK=0 WORLD_SIZE=2 LOCAL_WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=" + port,
       train(1, 6, 4, "--metrics " + file("two.jsonl"))},
      {"RANK=1 LOCAL_RANK=1 WORLD_SIZE=2 LOCAL_WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=" + port,
       train(1, 6, 4, "")},
  });
  ASSERT_EQ(runs[0].exit_code, 0) << runs[0].err;
  ASSERT_EQ(runs[1].exit_code, 0) << runs[1].err;
  EXPECT_EQ(runs[1].out, "");  // progress is rank 0's alone
  expect_same_curve(metrics(file("two.jsonl")), metrics(file("one.jsonl")), 0, "torchrun-style");
}

// What srun gives each task of a one-node step (no Slurm here: the variables set by hand). Rank 0's
// address defaults to this host on one node; the port is given (and held) so parallel tests do not
// collide.
TEST_F(FsdpCli, SrunStyleVariables) {
  ASSERT_EQ(run_pylon(train(1, 12, 4, "--metrics " + file("one.jsonl"))).exit_code, 0);
  const ReservedPort reserved;
  const std::string common = "SLURM_STEP_NUM_TASKS=2 SLURM_STEP_NUM_NODES=1 SLURM_NTASKS=2 SLURM_NNODES=1 "
                             "MASTER_PORT=" + std::to_string(reserved.port());
  const auto runs = run_together({
      {"SLURM_PROCID=0 SLURM_LOCALID=0 " + common, train(1, 6, 4, "--metrics " + file("srun.jsonl"))},
      {"SLURM_PROCID=1 SLURM_LOCALID=1 " + common, train(1, 6, 4, "")},
  });
  ASSERT_EQ(runs[0].exit_code, 0) << runs[0].err;
  ASSERT_EQ(runs[1].exit_code, 0) << runs[1].err;
  EXPECT_NE(runs[0].out.find("2 ranks"), std::string::npos) << runs[0].out;
  expect_same_curve(metrics(file("srun.jsonl")), metrics(file("one.jsonl")), 0, "srun-style");
}

TEST_F(FsdpCli, TwoNodesOverLoopback) {
  ASSERT_EQ(run_pylon(train(1, 12, 4, "--metrics " + file("one.jsonl"))).exit_code, 0);
  const ReservedPort reserved;  // node 0's rank 0 binds it
  const std::string node = " --nnodes 2 --nproc-per-node 1 --master-addr 127.0.0.1 --master-port " +
                           std::to_string(reserved.port());
  // The two "nodes" share this machine's cores: one thread each, as on a shared box.
  const std::string threads = "OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1";
  const auto runs = run_together({{threads, train(1, 6, 4, "--node-rank 0 --metrics " + file("nodes.jsonl") + node)},
                                  {threads, train(1, 6, 4, "--node-rank 1" + node)}});
  ASSERT_EQ(runs[0].exit_code, 0) << runs[0].err;
  ASSERT_EQ(runs[1].exit_code, 0) << runs[1].err;
  EXPECT_NE(runs[0].out.find("2 ranks"), std::string::npos) << runs[0].out;
  expect_same_curve(metrics(file("nodes.jsonl")), metrics(file("one.jsonl")), 0, "two nodes");
}

TEST_F(FsdpCli, MpirunLaunch) {
  if (std::system("command -v mpirun >/dev/null 2>&1") != 0) GTEST_SKIP() << "no mpirun (openmpi-bin)";
  ASSERT_EQ(run_pylon(train(1, 12, 3, "--metrics " + file("one.jsonl"))).exit_code, 0);
  testing::TempDir tmp;
  const ReservedPort reserved;
  const std::string cmd = "OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 timeout -k 5 120 "
                          "mpirun --oversubscribe -np 2 -x MASTER_PORT=" + std::to_string(reserved.port()) +
                          " " + PYLON_EXE + " " + train(1, 6, 3, "--metrics " + file("mpi.jsonl")) +
                          " >" + tmp.file("out") + " 2>" + tmp.file("err") + " </dev/null";
  const int status = std::system(cmd.c_str());
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << read_file(tmp.file("err"));
  EXPECT_NE(read_file(tmp.file("out")).find("2 ranks"), std::string::npos);
  expect_same_curve(metrics(file("mpi.jsonl")), metrics(file("one.jsonl")), 0, "mpirun");
}

// Processes whose command line mentions `needle` (the test's unique temporary folder).
int processes_mentioning(const std::string& needle) {
  int n = 0;
  for (const auto& e : std::filesystem::directory_iterator("/proc")) {
    const std::string name = e.path().filename().string();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::string cmd = read_file((e.path() / "cmdline").string());
    for (auto& c : cmd) c = c == '\0' ? ' ' : c;
    n += cmd.find(needle) != std::string::npos && cmd.find("bash -c") == std::string::npos;
  }
  return n;
}

// Ctrl-C (SIGINT to the launcher) stops every rank and exits 130; a launcher killed outright
// takes its ranks with it (PR_SET_PDEATHSIG).
// The signal comes once the ranks train (rank 0 has written a metrics row: the launcher's handlers
// were installed before it started them), not after a fixed sleep that a loaded machine outlasts.
TEST_F(FsdpCli, InterruptedOrKilledLauncherLeavesNoRanks) {
  for (const char* sig : {"INT", "KILL"}) {
    std::filesystem::remove(file("m.jsonl"));
    const std::string script = std::string(PYLON_EXE) + " " + train(3, 4, 1000000, "--metrics " + file("m.jsonl")) +
                               " >/dev/null 2>" + file("err") + " & pid=$!; " +
                               "for i in $(seq 1200); do [ -s " + file("m.jsonl") + " ] && break; sleep 0.1; done; " +
                               "date +%s.%N >" + file("t0") + "; kill -" + sig + " $pid; wait $pid; echo $? >" +
                               file("rc") + "; date +%s.%N >" + file("t1");
    ASSERT_EQ(std::system(("timeout -k 5 150 bash -c '" + script + "'").c_str()), 0);
    const int rc = std::atoi(read_file(file("rc")).c_str());
    EXPECT_EQ(rc, std::string(sig) == "INT" ? 130 : 137) << sig << ": " << read_file(file("err"));
    int left = 1;
    for (int i = 0; i < 50 && left; ++i) {
      left = processes_mentioning(file("data.bin"));
      if (left) std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    EXPECT_EQ(left, 0) << sig << ": ranks outlived their launcher";
    // From the signal to the launcher's exit: its teardown, not a readiness wait (30 s: ranks under
    // the sanitizers on a loaded machine).
    EXPECT_LT(std::atof(read_file(file("t1")).c_str()) - std::atof(read_file(file("t0")).c_str()), 30) << sig;
  }
}

TEST_F(FsdpCli, BadLaunchesAreClearErrors) {
  // Checked before any rank starts: one line, exit code 1.
  auto expect_error = [](const Outcome& r, const std::string& needle) {
    EXPECT_EQ(r.exit_code, 1) << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
    EXPECT_NE(r.err.find(needle), std::string::npos) << "stderr: " << r.err;
  };
  expect_error(run_pylon(train(1, 6, 2, "--nnodes 2 --node-rank 0")), "needs --master-addr and --master-port");
  expect_error(run_pylon(train(1, 6, 2, "--nnodes 2 --node-rank 2 --master-addr 127.0.0.1 --master-port 1234")),
               "--node-rank 2 is outside 0..1");
  expect_error(run_pylon(train(1, 6, 2, "--nproc-per-node 0")), "--nproc-per-node 0: must be in [1, 1024]");
  expect_error(run_pylon(train(9, 6, 2, "--device cuda")), "--device cuda");  // no machine here has 9 GPUs
  expect_error(run_pylon(train(2, 6, 2, ""), "RANK=0 WORLD_SIZE=2"), "already has RANK/WORLD_SIZE");
  expect_error(run_pylon(train(1, 6, 2, ""), "RANK=0 WORLD_SIZE=2 LOCAL_WORLD_SIZE=1"), "set MASTER_ADDR");
  expect_error(run_pylon(train(1, 6, 2, ""), "RANK=3 WORLD_SIZE=2"), "rank 3 is outside a world of 2");
  // A checkpoint of another model, and one with a shard file missing.
  ASSERT_EQ(run_pylon(train(2, 6, 2, "--save " + file("ckpt"))).exit_code, 0);
  std::string other = train(2, 6, 4, "--resume " + file("ckpt"));
  other.replace(other.find("--dim 25"), 8, "--dim 20");
  expect_error(run_pylon(other), "differs from the requested one");
  std::filesystem::remove(file("ckpt/step_000002/shard-00001-of-00002.safetensors"));
  expect_error(run_pylon(train(3, 4, 4, "--resume " + file("ckpt"))), "shard-00001-of-00002.safetensors: missing");
}

}  // namespace
}  // namespace pylon
