// `pylon roofline -- pylon CMD ...`: the range profiler around a command (with a stand-in profiler,
// so it runs without a GPU: start/stop pairing, a failing command, a command without kernels),
// and the command line's errors, each one line, before anything runs.
#include <gtest/gtest.h>

#include <string>

#include "core/error.h"
#include "profile/command_counters.h"
#include "support/run_command.h"

namespace pylon::profile {
namespace {

// Records what the profiler saw; stop returns `kernels`.
struct FakeProfiler {
  int starts = 0, stops = 0;
  std::vector<KernelCounters> kernels;
  CounterProfiler profiler() {
    return {[this] { ++starts; return 3; },
            [this] { ++stops; return kernels; }};
  }
};

KernelCounters kernel(const std::string& name) {
  KernelCounters k;
  k.name = name;
  k.launches = 2;
  k.seconds = 1e-3, k.sm_pct = 50, k.dram_pct = 80;
  return k;
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(RooflineCommand, CountsTheCommandsKernelsBetweenStartAndStop) {
  FakeProfiler fake;
  fake.kernels = {kernel("a"), kernel("b")};
  bool ran_inside = false;
  const CommandCounters c = count_command_kernels(
      "pylon train", [&] { ran_inside = fake.starts == 1 && fake.stops == 0; return 0; }, fake.profiler());
  EXPECT_TRUE(ran_inside);
  EXPECT_EQ(fake.stops, 1);
  EXPECT_EQ(c.passes, 3);
  ASSERT_EQ(c.kernels.size(), 2u);
  EXPECT_EQ(c.kernels[1].name, "b");
}

TEST(RooflineCommand, AFailingCommandIsOneErrorAndStopsTheProfiler) {
  FakeProfiler fake;
  fake.kernels = {kernel("a")};
  const std::string thrown = error_of([&] {
    count_command_kernels("pylon eval", []() -> int { throw Error("--model: no such file"); }, fake.profiler());
  });
  EXPECT_NE(thrown.find("`pylon eval` failed"), std::string::npos) << thrown;
  EXPECT_NE(thrown.find("--model: no such file"), std::string::npos) << thrown;
  EXPECT_EQ(fake.stops, 1);

  const std::string exited = error_of([&] { count_command_kernels("pylon eval", [] { return 2; }, fake.profiler()); });
  EXPECT_NE(exited.find("exited with status 2"), std::string::npos) << exited;
  EXPECT_EQ(fake.stops, 2);
}

TEST(RooflineCommand, ACommandWithoutKernelsIsAnError) {
  FakeProfiler fake;  // stop returns no kernel: a CPU run
  const std::string e = error_of([&] { count_command_kernels("pylon generate", [] { return 0; }, fake.profiler()); });
  EXPECT_NE(e.find("`pylon generate` launched no CUDA kernel"), std::string::npos) << e;
  EXPECT_EQ(fake.stops, 1);
}

TEST(RooflineCommand, AProfilerThatCannotStartRunsNothing) {
  bool ran = false;
  CounterProfiler refusing{[]() -> int { throw Error("counters not permitted"); },
                           [] { return std::vector<KernelCounters>{}; }};
  const std::string e = error_of([&] { count_command_kernels("pylon train", [&] { ran = true; return 0; }, refusing); });
  EXPECT_EQ(e, "counters not permitted");
  EXPECT_FALSE(ran);
}

TEST(RooflineCommand, CommandLineErrorsAreOneLineBeforeAnythingRuns) {
  const std::pair<std::string, std::string> cases[] = {
      {"roofline", "needs --ncu-csv FILE or -- pylon COMMAND"},
      {"roofline --", "expected `pylon <command> [flags]`"},
      {"roofline -- python train", "got `python`"},
      {"roofline --ncu-csv x.csv -- pylon train", "not both"},
      {"roofline --cache-control none --ncu-csv x.csv", "--cache-control"},  // unknown flag (removed)
      {"roofline -- pylon roofline --ncu-csv x.csv", "cannot profile `pylon roofline`"},
      {"roofline -- pylon tokenize --input x", "cannot profile `pylon tokenize`"},
      {"roofline -- pylon train --device cuda --nproc-per-node 2", "roofline profiles one process"},
      {"roofline -- pylon train --device cuda --nnodes=2", "drop --nnodes"},
      {"roofline -- pylon train --device cuda --profile /tmp/p", "drop --profile"},
  };
  for (const auto& [args, needle] : cases) {
    SCOPED_TRACE(args);
    pylon::testing::expect_clear_error(pylon::testing::run_pylon(args), needle);
  }
}

// Without a GPU the command never starts: no CUPTI in this build, or no device for it. On a GPU
// machine the command itself fails (no such model). Either way: one line, exit 1.
TEST(RooflineCommand, ACommandThatCannotRunIsOneError) {
  const auto r = pylon::testing::run_pylon("roofline -- pylon eval --model /nonexistent/model.bin --data /nonexistent");
  pylon::testing::expect_clear_error(r, "pylon roofline: error:");
}

}  // namespace
}  // namespace pylon::profile
