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
    record_instant("power cap holds the clocks");
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
  int x = 0, c = 0, m = 0, i = 0;
  for (const auto& e : doc["traceEvents"]) {
    x += e["ph"] == "X", c += e["ph"] == "C", m += e["ph"] == "M", i += e["ph"] == "i";
    if (e["name"] == "linear_forward") {
      EXPECT_EQ(e["args"]["shapes"], "[[8,4],[12,4]]");
    }
  }
  EXPECT_EQ(x, 5);
  EXPECT_EQ(c, 3);
  EXPECT_EQ(i, 1);  // the instant, not a slice
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

namespace pylon::profile {
namespace {

// `pylon trace merge OUT good IN` and `pylon trace analyze IN` of one bad trace file: both one
// error line holding `needle`, no OUT left behind.
void expect_both_refuse(pylon::testing::TempDir& tmp, const std::string& text, const std::string& needle) {
  std::ofstream(tmp.file("good.json")) << R"([{"ph":"X","name":"k","pid":0,"tid":0,"ts":0,"dur":1}])";
  std::ofstream(tmp.file("bad.json")) << text;
  auto r = pylon::testing::run_pylon("trace merge " + tmp.file("out.json") + " " + tmp.file("good.json") + " " +
                                     tmp.file("bad.json"), "", 60);
  pylon::testing::expect_clear_error(r, needle);
  EXPECT_NE(r.err.find("bad.json"), std::string::npos) << r.err;
  EXPECT_FALSE(std::ifstream(tmp.file("out.json"))) << "merge left a partial file for " << needle;
  r = pylon::testing::run_pylon("trace analyze --json " + tmp.file("bad.json"), "", 60);
  pylon::testing::expect_clear_error(r, needle);
}

std::string nested(int depth) { return std::string(static_cast<size_t>(depth), '[') + std::string(static_cast<size_t>(depth), ']'); }

// 100,000 levels of arrays overflowed the stack in nlohmann's recursive dump (merge writes each
// event; analyze quoted the event without ts in its error): SIGSEGV, and merge left a partial OUT.
// The parser refuses depth > 64 before anything recursive runs; 40 levels of args still merge.
TEST(ChromeTrace, DeeplyNestedJsonIsOneErrorLine) {
  pylon::testing::TempDir tmp;
  expect_both_refuse(tmp, R"({"traceEvents":[{"ph":"X","name":"a","ts":0,"dur":1,"args":{"x":)" + nested(100000) + "}}]}",
                     "nested deeper than 64 levels");
  expect_both_refuse(tmp, R"({"traceEvents":[{"ph":"X","name":"a","ts":0,"args":{"x":)" + nested(100000) + "}}]}",
                     "nested deeper than 64 levels");
  expect_both_refuse(tmp, nested(100000), "nested deeper than 64 levels");
  std::ofstream(tmp.file("args40.json")) << R"([{"ph":"X","name":"a","ts":0,"dur":1,"args":{"x":)" + nested(40) + "}}]";
  const auto r = pylon::testing::run_pylon("trace merge " + tmp.file("m.json") + " " + tmp.file("args40.json"));
  EXPECT_EQ(r.exit_code, 0) << r.err;
}

// Figures of the wrong type or out of range were merged as they were, or read as 0 (pid, tid,
// correlation) or clamped (a negative dur) by analyze; now one line naming the event and field.
TEST(ChromeTrace, BadFieldsAreOneErrorLineNamingTheEvent) {
  pylon::testing::TempDir tmp;
  const std::string ok = R"({"ph":"X","name":"k","ts":0,"dur":1},)";
  const std::vector<std::pair<std::string, std::string>> cases = {
      {R"({"ph":"X","name":"k","ts":0,"dur":-5})", R"(event 1: "dur" is -5;)"},
      {R"({"ph":"X","name":"k","ts":"5","dur":1})", R"(event 1: "ts" is "5";)"},
      {R"({"ph":"X","name":"k","ts":1e300,"dur":1})", R"(event 1: "ts" is 1e+300;)"},
      {R"({"ph":"X","name":"k","ts":0,"dur":true})", R"(event 1: "dur" is a boolean;)"},
      {R"({"ph":"X","name":"k","pid":18446744073709551615,"ts":0,"dur":1})", R"(event 1: "pid" is 18446744073709551615;)"},
      {R"({"ph":"X","name":"k","pid":1.5,"ts":0,"dur":1})", R"(event 1: "pid" is 1.5;)"},
      {R"({"ph":"X","name":"k","tid":[1],"ts":0,"dur":1})", R"(event 1: "tid" is an array;)"},
      {R"({"ph":"X","name":5,"ts":0,"dur":1})", R"(event 1: "name" is 5;)"},
      {R"({"ph":"X","name":"k","ts":0,"dur":1,"args":[]})", R"(event 1: "args" is an array;)"},
      {R"({"ph":"X","name":"k","ts":0,"dur":1,"args":{"correlation":"7"}})", R"(event 1: "args.correlation" is "7";)"},
      {R"({"ph":"s","name":"k","id":{},"ts":0})", R"(event 1: "id" is an object;)"},
  };
  for (const auto& [event, needle] : cases) expect_both_refuse(tmp, "[" + ok + event + "]", needle);
  expect_both_refuse(tmp, "", "an empty file");
  expect_both_refuse(tmp, R"([{"ph":"X","name":"k","ts":1e400,"dur":1}])", "a number too large for a double");
  expect_both_refuse(tmp, "[{\"ph\":\"X\",\"name\":\"k\xff\",\"ts\":0,\"dur\":1}]", "not valid JSON at byte");
}

// A pid of 2^63-1 in two inputs: the next free pid wraps instead of overflowing (UBSan's report at
// merge's ++pid), and flow ids of the second input move apart modulo 2^64; string ids get a prefix.
TEST(ChromeTrace, MergeWrapsPidsAndFlowIdsAtTheirLimits) {
  pylon::testing::TempDir tmp;
  const std::string text =
      R"([{"ph":"s","name":"launch","pid":9223372036854775807,"tid":1,"id":9223372036854775807,"ts":0},)"
      R"({"ph":"s","name":"launch","pid":9223372036854775807,"tid":"stream 7","id":"0x1f","ts":0}])";
  std::ofstream(tmp.file("a.json")) << text;
  std::ofstream(tmp.file("b.json")) << text;
  const auto r = pylon::testing::run_pylon("trace merge " + tmp.file("m.json") + " " + tmp.file("a.json") + " " +
                                           tmp.file("b.json"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto doc = read_json(tmp.file("m.json"));
  ASSERT_EQ(doc["traceEvents"].size(), 4u);
  EXPECT_EQ(doc["traceEvents"][0]["pid"], INT64_MAX);
  EXPECT_EQ(doc["traceEvents"][2]["pid"], INT64_MIN);
  EXPECT_EQ(doc["traceEvents"][2]["id"], INT64_MIN + (int64_t{1} << 40) - 1);
  EXPECT_EQ(doc["traceEvents"][3]["id"], "1:0x1f");
}

}  // namespace
}  // namespace pylon::profile
