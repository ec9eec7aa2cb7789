#include "cli/args.h"

#include <cerrno>
#include <cfloat>
#include <cmath>
#include <cstdlib>
#include <sstream>

#include "core/error.h"

namespace pylon {
namespace {

template <typename T>
std::string to_text(const T& v) {
  std::ostringstream os;
  os << v;
  return os.str();
}

int64_t parse_integer(const std::string& flag, const std::string& text) {
  errno = 0;
  char* end = nullptr;
  const long long v = std::strtoll(text.c_str(), &end, 10);
  PYLON_CHECK(!text.empty() && end && *end == '\0', "--", flag, ": expected an integer, got '", text, "'");
  PYLON_CHECK(errno != ERANGE, "--", flag, ": ", text, " is outside a 64-bit integer's range");
  return v;
}

double parse_real(const std::string& flag, const std::string& text) {
  errno = 0;
  char* end = nullptr;
  const double v = std::strtod(text.c_str(), &end);
  // strtod also reads hexadecimal ("0x10", "0x1p-3"): refused as the integer flags refuse them
  PYLON_CHECK(!text.empty() && end && *end == '\0' && !std::isnan(v) && text.find_first_of("xX") == std::string::npos,
              "--", flag, ": expected a number, got '", text, "'");
  PYLON_CHECK(errno != ERANGE && std::isfinite(v), "--", flag, ": ", text,
              " is out of a 64-bit float's range (", std::fabs(v) < 1 ? "it would become 0" : "infinite", ")");
  return v;
}

void check_range(const std::string& flag, const std::string& text, double v, const Range& range) {
  PYLON_CHECK(range.contains(v), "--", flag, " ", text, ": must be ", range.has_hi ? "in " : "", range.text());
}

// A bound as written in the range: integers without an exponent up to 2^53, else %g.
std::string bound_text(double v) {
  char text[32];
  if (std::fabs(v) < 9007199254740992.0 && v == std::floor(v))
    std::snprintf(text, sizeof(text), "%.0f", v);
  else
    std::snprintf(text, sizeof(text), "%g", v);
  return text;
}

}  // namespace

bool Range::contains(double v) const {
  if (lo_open ? !(v > lo) : !(v >= lo)) return false;
  return !has_hi || (hi_open ? v < hi : v <= hi);
}

std::string Range::text() const {
  if (!has_hi) return (lo_open ? "> " : ">= ") + bound_text(lo);
  return (lo_open ? "(" : "[") + bound_text(lo) + ", " + bound_text(hi) + (hi_open ? ")" : "]");
}

ArgParser::ArgParser(std::string command, std::string summary)
    : command_(std::move(command)), summary_(std::move(summary)) {}

void ArgParser::add_flag(Flag f) {
  for (const auto& g : flags_) PYLON_ASSERT(g.name != f.name, "flag defined twice: ", f.name);
  flags_.push_back(std::move(f));
}

void ArgParser::add(const std::string& name, int* out, Range range, const std::string& help) {
  add_flag({name, help, to_text(*out), range.text(), false, [out, name, range](const std::string& t) {
              const int64_t v = parse_integer(name, t);
              PYLON_CHECK(v >= INT32_MIN && v <= INT32_MAX, "--", name, ": ", t, " is outside a 32-bit integer's range");
              check_range(name, t, static_cast<double>(v), range);
              *out = static_cast<int>(v);
            }});
}
void ArgParser::add(const std::string& name, int64_t* out, Range range, const std::string& help) {
  add_flag({name, help, to_text(*out), range.text(), false, [out, name, range](const std::string& t) {
              const int64_t v = parse_integer(name, t);
              check_range(name, t, static_cast<double>(v), range);
              *out = v;
            }});
}
void ArgParser::add(const std::string& name, float* out, Range range, const std::string& help) {
  add_flag({name, help, to_text(*out), range.text(), false, [out, name, range](const std::string& t) {
              const double v = parse_real(name, t);
              PYLON_CHECK(std::fabs(v) <= FLT_MAX, "--", name, ": ", t, " is too large for a 32-bit float");
              PYLON_CHECK(v == 0 || std::fabs(v) >= FLT_MIN, "--", name, ": ", t,
                          " is too small for a 32-bit float (the smallest is ", FLT_MIN, ")");
              check_range(name, t, v, range);
              *out = static_cast<float>(v);
            }});
}
void ArgParser::add(const std::string& name, double* out, Range range, const std::string& help) {
  add_flag({name, help, to_text(*out), range.text(), false, [out, name, range](const std::string& t) {
              const double v = parse_real(name, t);
              check_range(name, t, v, range);
              *out = v;
            }});
}
void ArgParser::add(const std::string& name, std::string* out, const std::string& help) {
  add_flag({name, help, *out, "", false, [out](const std::string& t) { *out = t; }});
}
void ArgParser::add_switch(const std::string& name, bool* out, const std::string& help) {
  add_flag({name, help, "", "", true, [out](const std::string&) { *out = true; }});
}
void ArgParser::add_choice(const std::string& name, std::string* out,
                           std::vector<std::string> choices, const std::string& help) {
  std::string list;
  for (const auto& c : choices) list += (list.empty() ? "" : "|") + c;
  add_flag({name, help + " (" + list + ")", *out, "", false,
            [out, name, choices, list](const std::string& t) {
              bool ok = false;
              for (const auto& c : choices) ok = ok || c == t;
              PYLON_CHECK(ok, "--", name, ": expected one of ", list, ", got '", t, "'");
              *out = t;
            }});
}

bool ArgParser::parse(int argc, char** argv, int first) {
  for (int i = first; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "--help" || arg == "-h") return false;
    PYLON_CHECK(arg.size() > 2 && arg.rfind("--", 0) == 0, "unexpected argument '", arg, "' (flags look like --name value)");
    std::string name = arg.substr(2), value;
    bool has_value = false;
    if (auto eq = name.find('='); eq != std::string::npos) {
      value = name.substr(eq + 1);
      name = name.substr(0, eq);
      has_value = true;
    }
    const Flag* flag = nullptr;
    for (const auto& f : flags_)
      if (f.name == name) flag = &f;
    PYLON_CHECK(flag, "unknown flag --", name, " (see pylon ", command_,
                " --help)");
    PYLON_CHECK(!given_.count(name), "--", name, " given twice");
    if (flag->is_switch) {
      PYLON_CHECK(!has_value, "--", name, " takes no value");
    } else if (!has_value) {
      PYLON_CHECK(i + 1 < argc, "--", name, " needs a value");
      value = argv[++i];
    }
    flag->set(value);
    given_.insert(name);
  }
  return true;
}

std::string ArgParser::help() const {
  std::ostringstream os;
  os << "usage: pylon " << command_ << " [flags]\n" << summary_ << "\n\nflags:\n";
  for (const auto& f : flags_) {
    std::string left = "  --" + f.name + (f.is_switch ? "" : " X");
    if (left.size() < 26) left.resize(26, ' ');
    os << left << " " << f.help;
    if (!f.range_text.empty()) os << " [range: " << f.range_text << "]";
    if (!f.is_switch && !f.default_text.empty()) os << " [default: " << f.default_text << "]";
    os << "\n";
  }
  os << "  --help                   print this help\n";
  return os.str();
}

}  // namespace pylon
