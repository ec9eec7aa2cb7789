// Runs the pylon executable through the shell for CLI tests: exit code, stdout and stderr.
#pragma once

#include <sys/wait.h>

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

}  // namespace pylon::testing
