// The tracer: ranges nest and carry their args, a disabled tracer records nothing, the schedule
// keeps exactly the active steps, and the table's self and total times on a known nested trace.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <string>
#include <thread>

#include "profile/table.h"
#include "profile/tracer.h"

namespace pylon::profile {
namespace {

class TracerTest : public ::testing::Test {
 protected:
  void SetUp() override { clear(), set_enabled(false); }
  void TearDown() override { clear(), set_enabled(false); }
};

std::vector<RangeEvent> all_ranges() {
  std::vector<RangeEvent> out;
  for (const auto& t : snapshot(0, "test").threads) out.insert(out.end(), t.ranges.begin(), t.ranges.end());
  return out;
}

TEST_F(TracerTest, DisabledRecordsNothing) {
  { PYLON_RANGE("op", "never"); }
  record_counter("bytes", 1);
  EXPECT_TRUE(snapshot(0, "test").threads.empty());
}

TEST_F(TracerTest, RangesNestWithArgsAndThreads) {
  set_enabled(true);
  {
    PYLON_RANGE("layer", "outer");
    PYLON_RANGE_SHAPES("op", "inner", {2, 3}, {4});
  }
  std::thread([] { PYLON_RANGE("op", "other_thread"); }).join();
  const Trace t = snapshot(3, "rank 3");
  EXPECT_EQ(t.pid, 3);
  ASSERT_EQ(t.threads.size(), 2u);
  const auto& main = t.threads[0].ranges;
  ASSERT_EQ(main.size(), 2u);
  EXPECT_STREQ(main[0].name, "outer");  // sorted by begin, outer first
  EXPECT_STREQ(main[1].name, "inner");
  EXPECT_EQ(args_json(main[1].args), R"({"shapes":"[[2,3],[4]]"})");
  EXPECT_EQ(args_json(main[0].args), "");
  EXPECT_LE(main[0].begin_ns, main[1].begin_ns);
  EXPECT_GE(main[0].end_ns, main[1].end_ns);
  EXPECT_NE(t.threads[0].tid, t.threads[1].tid);
}

// A range that began before a clear belongs to what the clear dropped (a warm-up step's).
TEST_F(TracerTest, ClearDropsRangesThatBeganBeforeIt) {
  set_enabled(true);
  {
    PYLON_RANGE("op", "straddling");
    std::thread([] { PYLON_RANGE("op", "before"); }).join();
    clear();
    PYLON_RANGE("op", "after");
  }
  set_enabled(false);
  const auto ranges = all_ranges();
  ASSERT_EQ(ranges.size(), 1u);
  EXPECT_STREQ(ranges[0].name, "after");
}

// NCCL launches collectives from threads of its own that record while the schedule clears the
// warm-up: a clear must not write to their buffers (a data race; a sanitizer build catches it).
TEST_F(TracerTest, ClearWhileAnotherThreadRecords) {
  set_enabled(true);
  std::atomic<bool> stop{false};
  std::atomic<int64_t> written{0};
  std::thread writer([&] {
    while (!stop.load()) {
      { PYLON_RANGE("op", "writer"); }
      ++written;
    }
  });
  for (int i = 0; i < 2000; ++i) clear();
  const int64_t last_clear = now_ns();
  clear();
  // Until the writer has recorded a whole range after the last clear (a fixed 5 ms sleep failed on
  // a loaded 2-core CI machine: the writer was not scheduled in it). Bounded: 10 s.
  const int64_t seen = written.load();
  for (int i = 0; i < 10000 && written.load() < seen + 2; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  stop = true;
  writer.join();
  set_enabled(false);
  const auto ranges = all_ranges();
  EXPECT_FALSE(ranges.empty());
  for (const RangeEvent& e : ranges) ASSERT_GE(e.begin_ns, last_clear);
}

TEST_F(TracerTest, ScheduleRecordsExactlyTheActiveSteps) {
  StepScheduler s({/*wait=*/2, /*warmup=*/1, /*active=*/3});
  for (int64_t k = 0; k < 9; ++k) {
    s.step(k);
    Range r("step", "train_step");
    if (r.on()) r.set_int("step", k);
  }
  set_enabled(false);
  std::vector<std::string> steps;
  for (const auto& e : all_ranges()) steps.push_back(args_json(e.args));
  EXPECT_EQ(steps, (std::vector<std::string>{R"({"step":3})", R"({"step":4})", R"({"step":5})"}));
}

// Schedules at the flags' limits: no signed overflow (UBSan reported wait + warmup and
// wait + warmup + active), and a step that far is never reached, so nothing records.
TEST_F(TracerTest, ScheduleAtTheLimitsOfItsFlags) {
  const Schedule far{INT64_MAX, 1, INT64_MAX};
  EXPECT_EQ(far.first_active(), INT64_MAX);
  EXPECT_EQ((Schedule{1, INT64_MAX, 1}.first_active()), INT64_MAX);
  StepScheduler s(far);
  for (int64_t k : {int64_t{0}, int64_t{1}, INT64_MAX - 1}) {
    s.step(k);
    EXPECT_FALSE(enabled()) << k;
    EXPECT_FALSE(s.active(k)) << k;
  }
  EXPECT_TRUE(s.active(INT64_MAX));
  StepScheduler late({/*wait=*/0, /*warmup=*/0, /*active=*/INT64_MAX});
  EXPECT_TRUE(late.active(0));
  EXPECT_TRUE(late.active(INT64_MAX - 1));
  set_enabled(false);
}

// outer [0, 100) holds a [10, 40) and b [50, 60); a holds b [20, 30). Another thread: b [0, 5).
Trace synthetic_trace() {
  auto ev = [](const char* name, int64_t b, int64_t e, int64_t shape = 0) {
    RangeArgs a;
    if (shape) a.shapes = 1, a.dims[0] = 1, a.values[0] = shape;
    return RangeEvent{"op", name, b * 1000, e * 1000, a};
  };
  Trace t;
  t.threads.push_back({1, "main",
                       {ev("outer", 0, 100), ev("a", 10, 40), ev("b", 20, 30, 1),
                        ev("b", 50, 60, 2)},
                       {}});
  t.threads.push_back({2, "worker", {ev("b", 0, 5, 2)}, {}});
  return t;
}

// Records queued before the window (correlation below every traced launch) go; a record whose
// launch was not traced but came later (a library's driver-level fill), and one without a
// correlation, stay.
// The key is compared by its text: here a copy of kCorrelationArg at another address (a pointer
// comparison passed only where the linker merged the two strings).
TEST(DropRecordsLaunchedBefore, KeepsTheWindowsOwnWork) {
  Trace t;
  RangeEvent launch{"cuda_runtime", "cudaLaunchKernel", 100, 110, {}};
  static const std::string key_copy = kCorrelationArg;
  ASSERT_NE(static_cast<const void*>(key_copy.c_str()), static_cast<const void*>(kCorrelationArg));
  launch.args.key = key_copy.c_str();
  ThreadTrace th{1, "main", {}, {}};
  for (int64_t corr : {12, 10}) {
    launch.args.values[0] = corr;
    th.ranges.push_back(launch);
  }
  t.threads.push_back(th);
  for (int64_t corr : {4, 9, 10, 11, 12, 0})
    t.device.push_back({"k" + std::to_string(corr), "kernel", 120, 130, corr, 0, 7, 0});
  drop_records_launched_before(t);
  std::vector<std::string> kept;
  for (const DeviceRecord& d : t.device) kept.push_back(d.name);
  EXPECT_EQ(kept, (std::vector<std::string>{"k10", "k11", "k12", "k0"}));

  Trace untraced;  // no launch ranges at all: nothing can be told apart, nothing goes
  untraced.device = t.device;
  drop_records_launched_before(untraced);
  EXPECT_EQ(untraced.device.size(), 4u);
}

TEST_F(TracerTest, TableSelfAndTotalTimes) {
  const auto stats = op_stats(synthetic_trace());
  ASSERT_EQ(stats.size(), 3u);
  EXPECT_EQ(stats[0].name, "outer");  // sorted by total time
  EXPECT_DOUBLE_EQ(stats[0].total_cpu_us, 100);
  EXPECT_DOUBLE_EQ(stats[0].self_cpu_us, 60);  // minus a (30) and the second b (10)
  EXPECT_EQ(stats[1].name, "a");
  EXPECT_DOUBLE_EQ(stats[1].total_cpu_us, 30);
  EXPECT_DOUBLE_EQ(stats[1].self_cpu_us, 20);
  EXPECT_EQ(stats[2].name, "b");
  EXPECT_EQ(stats[2].calls, 3);
  EXPECT_DOUBLE_EQ(stats[2].total_cpu_us, 25);
  EXPECT_DOUBLE_EQ(stats[2].self_cpu_us, 25);
  double self_sum = 0;  // self times partition the top-level time: 100 + 5
  for (const auto& s : stats) {
    self_sum += s.self_cpu_us;
    EXPECT_EQ(s.total_device_us, 0);  // until CUPTI
  }
  EXPECT_DOUBLE_EQ(self_sum, 105);
  const std::string table = format_table(stats);
  EXPECT_NE(table.find("outer"), std::string::npos) << table;
  EXPECT_NE(table.find("Self CPU time total: 105.000us"), std::string::npos) << table;
}

TEST_F(TracerTest, TableGroupsByShapes) {
  const auto stats = op_stats(synthetic_trace(), /*group_by_shapes=*/true);
  ASSERT_EQ(stats.size(), 4u);
  int64_t b_calls_shape2 = 0;
  for (const auto& s : stats)
    if (s.name == "b" && s.shapes == "[[2]]") b_calls_shape2 = s.calls;
  EXPECT_EQ(b_calls_shape2, 2);
}

}  // namespace
}  // namespace pylon::profile
