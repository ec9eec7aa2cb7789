// Chrome trace JSON: nlohmann's DOM parser behind a depth limit, and the per-event field checks.
#include "profile/trace_json.h"

#include <cmath>
#include <cstdint>
#include <limits>
#include <sstream>

#include "core/error.h"
#include "io/mapped_file.h"

namespace pylon::profile {
namespace {

using json = nlohmann::json;

struct TooDeep {};  // thrown out of the parser, caught below

// nlohmann's DOM builder behind a depth count: a container deeper than kMaxTraceJsonDepth stops
// the parse. (The callback parser, which also reports depth, rescans each finished container for
// discarded values: quadratic, 23 s for 100,000 events.)
class DepthLimitedSax {
 public:
  explicit DepthLimitedSax(json& result) : dom_(result, /*allow_exceptions=*/true) {}
  bool null() { return dom_.null(); }
  bool boolean(bool v) { return dom_.boolean(v); }
  bool number_integer(json::number_integer_t v) { return dom_.number_integer(v); }
  bool number_unsigned(json::number_unsigned_t v) { return dom_.number_unsigned(v); }
  bool number_float(json::number_float_t v, const json::string_t& s) { return dom_.number_float(v, s); }
  bool string(json::string_t& v) { return dom_.string(v); }
  bool binary(json::binary_t& v) { return dom_.binary(v); }
  bool key(json::string_t& v) { return dom_.key(v); }
  bool start_object(std::size_t n) { return enter() && dom_.start_object(n); }
  bool start_array(std::size_t n) { return enter() && dom_.start_array(n); }
  bool end_object() { return --depth_, dom_.end_object(); }
  bool end_array() { return --depth_, dom_.end_array(); }
  template <class Exception>  // the exception's own type (parse_error, out_of_range), not sliced
  bool parse_error(std::size_t at, const std::string& token, const Exception& e) {
    return dom_.parse_error(at, token, e);  // throws it
  }

 private:
  bool enter() {
    if (++depth_ > kMaxTraceJsonDepth) throw TooDeep{};
    return true;
  }
  nlohmann::detail::json_sax_dom_parser<json> dom_;
  int depth_ = 0;
};

// A field's value for an error line: numbers as numbers (inf too), strings quoted and cut short.
std::string describe(const json& v) {
  std::ostringstream os;
  if (v.is_number_unsigned()) {
    os << v.get<uint64_t>();
  } else if (v.is_number_integer()) {
    os << v.get<int64_t>();
  } else if (v.is_number_float()) {
    os << v.get<double>();
  } else if (v.is_string()) {
    const std::string& s = v.get_ref<const std::string&>();
    os << json(s.substr(0, 60)).dump(-1, ' ', false, json::error_handler_t::replace) << (s.size() > 60 ? "..." : "");
  } else {
    os << "a" << (v.is_object() || v.is_array() ? "n " : " ") << v.type_name();
  }
  return os.str();
}

bool fits_int64(const json& v) {
  return v.is_number_integer() &&
         (!v.is_number_unsigned() || v.get<uint64_t>() <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max()));
}

}  // namespace

json read_trace_events(const std::string& path) {
  const MappedFile file(path);  // a regular file, or one line saying what it is not
  PYLON_CHECK(file.size() > 0, path, ": not a Chrome trace (an empty file)");
  const char* text = reinterpret_cast<const char*>(file.data());
  json doc;
  try {
    DepthLimitedSax sax(doc);
    json::sax_parse(text, text + file.size(), &sax);
  } catch (const TooDeep&) {
    throw Error(detail::concat(path, ": not a Chrome trace (JSON nested deeper than ", kMaxTraceJsonDepth,
                               " levels)"));
  } catch (const json::parse_error& e) {
    throw Error(detail::concat(path, ": not a Chrome trace (not valid JSON at byte ", e.byte, ")"));
  } catch (const json::out_of_range&) {  // 406: a number beyond a double's range, such as 1e400
    throw Error(detail::concat(path, ": not a Chrome trace (a number too large for a double)"));
  }
  json events;
  if (doc.is_array())
    events = std::move(doc);
  else if (doc.is_object() && doc.contains("traceEvents"))
    events = std::move(doc["traceEvents"]);
  PYLON_CHECK(events.is_array(), path, ": not a Chrome trace (no traceEvents array)");
  for (size_t i = 0; i < events.size(); ++i) check_trace_event(events[i], i, path);
  return events;
}

void check_trace_event(const json& e, size_t index, const std::string& path) {
  PYLON_CHECK(e.is_object() && e.contains("ph") && e["ph"].is_string(), path, ": event ", index,
              ": not a Chrome trace (an event without a \"ph\" phase)");
  auto fail = [&](const char* key, const json& v, const char* rule) {
    throw Error(detail::concat(path, ": event ", index, ": \"", key, "\" is ", describe(v), "; ", rule));
  };
  for (const char* key : {"name", "cat"})
    if (e.contains(key) && !e[key].is_string()) fail(key, e[key], "it must be a string");
  if (e.contains("pid") && !fits_int64(e["pid"])) fail("pid", e["pid"], "it must be an integer of 64 bits");
  for (const char* key : {"tid", "id"})
    if (e.contains(key) && !fits_int64(e[key]) && !e[key].is_string())
      fail(key, e[key], "it must be an integer of 64 bits or a string");
  if (e.contains("ts")) {
    const json& ts = e["ts"];
    if (!ts.is_number() || !(std::fabs(ts.get<double>()) <= kMaxTraceMicros))
      fail("ts", ts, "it must be a number of µs within ±1e18");
  }
  if (e.contains("dur")) {
    const json& dur = e["dur"];
    if (!dur.is_number() || !(dur.get<double>() >= 0 && dur.get<double>() <= kMaxTraceMicros))
      fail("dur", dur, "it must be a number of µs in [0, 1e18]");
  }
  if (e.contains("args")) {
    const json& args = e["args"];
    if (!args.is_object()) fail("args", args, "it must be an object");
    if (args.contains("correlation") && !fits_int64(args["correlation"]))
      fail("args.correlation", args["correlation"], "it must be an integer of 64 bits");
  }
}

}  // namespace pylon::profile
