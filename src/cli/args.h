// A small flag parser for the commands: `--name value` or `--name=value`, typed, with help text.
// Unknown flags, missing values and malformed numbers are errors (pylon::Error), never ignored.
#pragma once

#include <cstdint>
#include <functional>
#include <set>
#include <string>
#include <vector>

namespace pylon {

class ArgParser {
 public:
  ArgParser(std::string command, std::string summary);

  void add(const std::string& name, int* out, const std::string& help);
  void add(const std::string& name, int64_t* out, const std::string& help);
  void add(const std::string& name, float* out, const std::string& help);
  void add(const std::string& name, double* out, const std::string& help);
  void add(const std::string& name, std::string* out, const std::string& help);
  void add_switch(const std::string& name, bool* out, const std::string& help);  // no value
  // Restricts a string flag to a set of values.
  void add_choice(const std::string& name, std::string* out, std::vector<std::string> choices,
                  const std::string& help);

  // Parses argv[first..argc). Returns false when --help was asked (help() has the text).
  bool parse(int argc, char** argv, int first = 2);
  bool given(const std::string& name) const { return given_.count(name) != 0; }
  std::string help() const;

 private:
  struct Flag {
    std::string name, help, default_text;
    bool is_switch = false;
    std::function<void(const std::string&)> set;
  };
  void add_flag(Flag f);
  std::string command_, summary_;
  std::vector<Flag> flags_;
  std::set<std::string> given_;
};

}  // namespace pylon
