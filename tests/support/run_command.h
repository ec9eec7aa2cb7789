// Runs the pylon executable through the shell for CLI tests: exit code, stdout and stderr; and the
// check every bad-input test makes of the result.
#pragma once

#include <gtest/gtest.h>
#include <sys/wait.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "support/temp_dir.h"

namespace pylon::testing {

struct CommandResult {
  int exit_code = -1;
  std::string out, err;
  double seconds = 0;  // wall time of the command
};

inline std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), {}};
}

// `env ENV timeout -k 5 T pylon ARGS >out 2>err </dev/null`: no test can hang, whatever the code
// under test does (a command past its time ends with exit code 124, or 137 when killed).
inline std::string pylon_command(const std::string& env, const std::string& args, const std::string& out,
                                 const std::string& err, int timeout_s) {
  return "env " + env + " timeout -k 5 " + std::to_string(timeout_s) + " " + PYLON_EXE + " " + args +
         " >" + out + " 2>" + err + " </dev/null";
}

inline CommandResult run_pylon(const std::string& args, const std::string& env = "", int timeout_s = 300) {
  TempDir tmp;
  const auto t0 = std::chrono::steady_clock::now();
  const int status = std::system(pylon_command(env, args, tmp.file("out"), tmp.file("err"), timeout_s).c_str());
  CommandResult r;
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  r.out = read_file(tmp.file("out"));
  r.err = read_file(tmp.file("err"));
  return r;
}

// Several commands at once (the ranks of a job started by hand), each `env ENV pylon ARGS` with a
// time limit of 120 s; their results in order.
inline std::vector<CommandResult> run_together(const std::vector<std::pair<std::string, std::string>>& env_args) {
  TempDir tmp;
  std::string script;
  for (size_t i = 0; i < env_args.size(); ++i) {
    const std::string n = std::to_string(i);
    script += "(" + pylon_command(env_args[i].first, env_args[i].second, tmp.file("out" + n), tmp.file("err" + n), 120) +
              "; echo $? >" + tmp.file("rc" + n) + ") & ";
  }
  script += "wait";
  const int status = std::system(("bash -c '" + script + "'").c_str());
  EXPECT_EQ(status, 0);
  std::vector<CommandResult> runs(env_args.size());
  for (size_t i = 0; i < runs.size(); ++i) {
    const std::string n = std::to_string(i);
    runs[i].exit_code = std::atoi(read_file(tmp.file("rc" + n)).c_str());
    runs[i].out = read_file(tmp.file("out" + n)), runs[i].err = read_file(tmp.file("err" + n));
  }
  return runs;
}

// The last non-empty line of a command's output (where `--json` prints its object).
inline std::string last_line(const std::string& out) {
  std::istringstream lines(out);
  std::string line, last;
  while (std::getline(lines, line))
    if (!line.empty()) last = line;
  return last;
}

// A clear error: exit code 1 and one line on stderr ("pylon CMD: error: ...") holding `needle`.
inline void expect_clear_error(const CommandResult& r, const std::string& needle) {
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  EXPECT_NE(r.err.find(needle), std::string::npos) << "stderr: " << r.err;
  EXPECT_NE(r.err.find("error:"), std::string::npos) << r.err;
}

}  // namespace pylon::testing
