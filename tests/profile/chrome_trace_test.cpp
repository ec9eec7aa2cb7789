// Chrome trace files: what the tracer records is written by the format's rules, two ranks merge
// into two processes, and malformed input to `pylon trace merge` is one error line.
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <set>
#include <thread>

#include <nlohmann/json.hpp>

#include "profile/chrome_trace.h"
#include "profile/tracer.h"
#include "profile/trace_check.h"
#include "support/run_command.h"
#include "support/temp_dir.h"

namespace pylon::profile {
namespace {

using pylon::testing::check_chrome_trace;

nlohmann::json read_json(const std::string& path) {
  std::ifstream in(path);
  return nlohmann::json::parse(in);
}

// A recorded trace of one rank: nested ranges on two threads and a counter.
Trace recorded_trace(int rank) {
  clear();
  set_enabled(true);
  {
    PYLON_RANGE("step", "train_step");
    for (int i = 0; i < 3; ++i) {
      PYLON_RANGE_SHAPES("op", "linear_forward", {8, 4}, {12, 4});
      record_counter("bytes", 100.0 * i);
    }
    std::thread([] { PYLON_RANGE("data", "data_load"); }).join();
  }
  set_enabled(false);
  Trace t = snapshot(rank, "rank " + std::to_string(rank));
  clear();
  return t;
}

TEST(ChromeTrace, WrittenTraceFollowsTheFormat) {
  pylon::testing::TempDir tmp;
  write_chrome_trace(recorded_trace(0), tmp.file("t.json"));
  const auto doc = read_json(tmp.file("t.json"));
  EXPECT_EQ(check_chrome_trace(doc), "");
  int x = 0, c = 0, m = 0;
  for (const auto& e : doc["traceEvents"]) {
    x += e["ph"] == "X", c += e["ph"] == "C", m += e["ph"] == "M";
    if (e["name"] == "linear_forward") {
      EXPECT_EQ(e["args"]["shapes"], "[[8,4],[12,4]]");
    }
  }
  EXPECT_EQ(x, 5);
  EXPECT_EQ(c, 3);
  EXPECT_EQ(m, 4);  // process name, its sort index, two thread names
}

TEST(ChromeTrace, CheckerCatchesPartialOverlapAndMissingNames) {
  auto doc = nlohmann::json::parse(R"({"traceEvents":[
    {"name":"process_name","ph":"M","pid":0,"tid":0,"args":{"name":"r"}},
    {"name":"thread_name","ph":"M","pid":0,"tid":1,"args":{"name":"t"}},
    {"name":"a","ph":"X","pid":0,"tid":1,"ts":0,"dur":10},
    {"name":"b","ph":"X","pid":0,"tid":1,"ts":5,"dur":10}]})");
  EXPECT_NE(check_chrome_trace(doc).find("overlap"), std::string::npos);
  doc["traceEvents"][3]["dur"] = 5;
  EXPECT_EQ(check_chrome_trace(doc), "");
  doc["traceEvents"][3]["tid"] = 2;
  EXPECT_NE(check_chrome_trace(doc).find("thread_name"), std::string::npos);
}

TEST(ChromeTrace, MergeGivesAProcessPerRank) {
  pylon::testing::TempDir tmp;
  write_chrome_trace(recorded_trace(0), tmp.file("r0.json"));
  write_chrome_trace(recorded_trace(1), tmp.file("r1.json"));
  const auto r = pylon::testing::run_pylon("trace merge " + tmp.file("all.json") + " " + tmp.file("r0.json") +
                                           " " + tmp.file("r1.json"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto doc = read_json(tmp.file("all.json"));
  EXPECT_EQ(check_chrome_trace(doc), "");
  std::set<int64_t> pids, named;
  for (const auto& e : doc["traceEvents"]) {
    pids.insert(e["pid"].get<int64_t>());
    if (e["name"] == "process_name") named.insert(e["pid"].get<int64_t>());
  }
  EXPECT_EQ(pids, (std::set<int64_t>{0, 1}));
  EXPECT_EQ(named, pids);
}

TEST(ChromeTrace, MergeKeepsInputsApartWhenPidsCollide) {
  pylon::testing::TempDir tmp;
  write_chrome_trace(recorded_trace(0), tmp.file("a.json"));
  merge_chrome_traces(tmp.file("out.json"), {tmp.file("a.json"), tmp.file("a.json")});
  const auto doc = read_json(tmp.file("out.json"));
  std::set<int64_t> pids;
  for (const auto& e : doc["traceEvents"]) pids.insert(e["pid"].get<int64_t>());
  EXPECT_EQ(pids.size(), 2u);
}

TEST(ChromeTrace, MalformedMergeInputIsOneErrorLine) {
  pylon::testing::TempDir tmp;
  const std::vector<std::pair<std::string, std::string>> bad = {
      {"garbage", "not json {"}, {"truncated", "{\"traceEvents\":[{\"ph\":\"X\""},
      {"no_events", "{\"other\":1}"}, {"events_not_array", "{\"traceEvents\":3}"},
      {"event_without_ph", "{\"traceEvents\":[{\"name\":\"a\"}]}"}, {"empty", ""}};
  for (const auto& [name, text] : bad) {
    std::ofstream(tmp.file(name)) << text;
    const auto r = pylon::testing::run_pylon("trace merge " + tmp.file("out.json") + " " + tmp.file(name));
    EXPECT_EQ(r.exit_code, 1) << name << ": " << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << name << ": " << r.err;
    EXPECT_NE(r.err.find(name), std::string::npos) << r.err;
  }
  for (const std::string& args : std::vector<std::string>{"trace merge", "trace merge out.json", "trace split a b",
                                  "trace merge " + tmp.file("o.json") + " " + tmp.file("missing.json")}) {
    const auto r = pylon::testing::run_pylon(args);
    EXPECT_EQ(r.exit_code, 1) << args;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << args << ": " << r.err;
  }
}

}  // namespace
}  // namespace pylon::profile
