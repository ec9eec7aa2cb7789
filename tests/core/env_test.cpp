// Environment variables: one place reads them (core/env.cpp), a malformed value is one line naming
// it, and every variable src/ reads is documented in docs/environment.md.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <regex>
#include <set>
#include <string>

#include "core/env.h"
#include "core/error.h"

namespace pylon {
namespace {

namespace fs = std::filesystem;

struct ScopedEnv {  // sets a variable for one scope
  ScopedEnv(const char* name, const char* value) : name_(name) { ::setenv(name, value, 1); }
  ~ScopedEnv() { ::unsetenv(name_); }
  const char* name_;
};

TEST(Env, IntegersParseOrNameTheVariable) {
  ::unsetenv("PYLON_ENV_TEST");
  EXPECT_EQ(env_int("PYLON_ENV_TEST", 7, 0, 10), 7);
  EXPECT_FALSE(env_text("PYLON_ENV_TEST"));
  {
    ScopedEnv e("PYLON_ENV_TEST", "");
    EXPECT_EQ(env_int("PYLON_ENV_TEST", 7, 0, 10), 7);  // empty is unset
  }
  {
    ScopedEnv e("PYLON_ENV_TEST", "3");
    EXPECT_EQ(env_int("PYLON_ENV_TEST", 7, 0, 10), 3);
    EXPECT_EQ(*env_text("PYLON_ENV_TEST"), "3");
  }
  for (const char* bad : {"x", "3x", "11", "-1", "99999999999999999999999", "1e3", " 3"}) {
    ScopedEnv e("PYLON_ENV_TEST", bad);
    try {
      env_int("PYLON_ENV_TEST", 7, 0, 10);
      ADD_FAILURE() << bad << " was accepted";
    } catch (const Error& err) {
      const std::string msg = err.what();
      EXPECT_NE(msg.find("PYLON_ENV_TEST"), std::string::npos) << msg;
      EXPECT_NE(msg.find("0 to 10"), std::string::npos) << msg;
      EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
    }
  }
}

// Every quoted upper-case name passed to env_text / env_int (or rendezvous's env) in src/.
std::set<std::string> variables_read_by_src(std::set<std::string>* getenv_files) {
  const std::regex read(R"(\benv(?:_text|_int)?\(\s*"([A-Z_][A-Z0-9_]*)\")");
  const std::regex getenv_call(R"(\bgetenv\s*\()");
  std::set<std::string> names;
  for (const auto& entry : fs::recursive_directory_iterator(PYLON_SOURCE_DIR)) {
    if (!entry.is_regular_file()) continue;
    std::ifstream in(entry.path());
    const std::string text{std::istreambuf_iterator<char>(in), {}};
    for (std::sregex_iterator it(text.begin(), text.end(), read), end; it != end; ++it) names.insert((*it)[1].str());
    if (std::regex_search(text, getenv_call))
      getenv_files->insert(fs::relative(entry.path(), PYLON_SOURCE_DIR).string());
  }
  return names;
}

// The backticked names of docs/environment.md's table's first column.
std::set<std::string> documented_variables() {
  std::ifstream in(std::string(PYLON_DOCS_DIR) + "/environment.md");
  std::set<std::string> out;
  const std::regex name(R"(`([A-Z_][A-Z0-9_]*)`)");
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("| `", 0) != 0) continue;
    const std::string first = line.substr(0, line.find(" | ", 2));
    for (std::sregex_iterator it(first.begin(), first.end(), name), end; it != end; ++it) out.insert((*it)[1].str());
  }
  return out;
}

TEST(Env, EveryVariableSrcReadsIsDocumented) {
  std::set<std::string> getenv_files;
  const std::set<std::string> read = variables_read_by_src(&getenv_files);
  EXPECT_GT(read.size(), 10u) << "found too few variables under " << PYLON_SOURCE_DIR;
  EXPECT_EQ(getenv_files, std::set<std::string>{"core/env.cpp"}) << "getenv outside core/env.cpp";
  const std::set<std::string> documented = documented_variables();
  for (const std::string& v : read) EXPECT_TRUE(documented.count(v)) << v << " is read in src/ but not in docs/environment.md";
}

}  // namespace
}  // namespace pylon
