// A small flag parser for the commands: `--name value` or `--name=value`, typed, with help text.
// Unknown flags, missing values, malformed numbers and numbers outside a flag's range are errors
// (pylon::Error), never ignored. Every numeric flag declares its range; --help prints it.
#pragma once

#include <cstdint>
#include <functional>
#include <set>
#include <string>
#include <vector>

namespace pylon {

// The values a numeric flag accepts: lo..hi, each end closed or open; no `hi` = no upper bound
// but the type's. --help and docs/cli.md show text(): "[0, 1)", ">= 1", "> 0".
struct Range {
  double lo = 0, hi = 0;
  bool lo_open = false, hi_open = false, has_hi = false;
  static Range at_least(double lo) { return {lo, 0, false, false, false}; }
  static Range above(double lo) { return {lo, 0, true, false, false}; }
  static Range closed(double lo, double hi) { return {lo, hi, false, false, true}; }
  static Range half_open(double lo, double hi) { return {lo, hi, false, true, true}; }  // [lo, hi)
  static Range open_closed(double lo, double hi) { return {lo, hi, true, false, true}; }  // (lo, hi]
  bool contains(double v) const;
  std::string text() const;
};

class ArgParser {
 public:
  ArgParser(std::string command, std::string summary);

  // A value outside `range` is an error naming the flag and the range. A float flag also refuses
  // a value that float cannot hold as written (1e-300 would become 0, 1e39 infinity).
  void add(const std::string& name, int* out, Range range, const std::string& help);
  void add(const std::string& name, int64_t* out, Range range, const std::string& help);
  void add(const std::string& name, float* out, Range range, const std::string& help);
  void add(const std::string& name, double* out, Range range, const std::string& help);
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
    std::string name, help, default_text, range_text;
    bool is_switch = false;
    std::function<void(const std::string&)> set;
  };
  void add_flag(Flag f);
  std::string command_, summary_;
  std::vector<Flag> flags_;
  std::set<std::string> given_;
};

}  // namespace pylon
