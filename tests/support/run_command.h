// Runs the pylon executable through the shell for CLI tests: exit code, stdout and stderr; and the
// check every bad-input test makes of the result.
#pragma once

#include <gtest/gtest.h>
#include <sys/wait.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <string>

#include "support/temp_dir.h"

namespace pylon::testing {

struct CommandResult {
  int exit_code = -1;
  std::string out, err;
};

inline CommandResult run_pylon(const std::string& args) {
  TempDir tmp;
  const std::string cmd = std::string(PYLON_EXE) + " " + args + " >" + tmp.file("out") + " 2>" +
                          tmp.file("err") + " </dev/null";
  const int status = std::system(cmd.c_str());
  CommandResult r;
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  auto slurp = [](const std::string& p) {
    std::ifstream in(p);
    return std::string(std::istreambuf_iterator<char>(in), {});
  };
  r.out = slurp(tmp.file("out"));
  r.err = slurp(tmp.file("err"));
  return r;
}

// A clear error: exit code 1 and one line on stderr ("pylon CMD: error: ...") holding `needle`.
inline void expect_clear_error(const CommandResult& r, const std::string& needle) {
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  EXPECT_NE(r.err.find(needle), std::string::npos) << "stderr: " << r.err;
  EXPECT_NE(r.err.find("error:"), std::string::npos) << r.err;
}

}  // namespace pylon::testing
