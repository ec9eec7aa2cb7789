// Reading Chrome trace files (pylon trace merge and analyze): the JSON parsed with a nesting limit,
// and each event's fields checked, with one-line errors that name the file and the event.
#pragma once

#include <cstddef>
#include <string>

#include <nlohmann/json.hpp>

namespace pylon::profile {

// Deeper JSON is refused while it is parsed, before anything recursive (dump, copy) walks it. A
// trace needs 5 levels: document, traceEvents, event, args, a value.
inline constexpr int kMaxTraceJsonDepth = 64;

// Timestamps and durations beyond this many µs (31,700 years) are refused: sums stay finite.
inline constexpr double kMaxTraceMicros = 1e18;

// The events of a Chrome trace file: its traceEvents array, or the file itself when it is a bare
// array (both are the format). Each passed check_trace_event. Throws pylon::Error naming the file:
// empty, not JSON (with the byte), nested deeper than kMaxTraceJsonDepth, no event list, a bad event.
nlohmann::json read_trace_events(const std::string& path);

// Event `index` of `path` (0-based in the file's list): an object with a string "ph"; when
// present, "name" and "cat" are strings, "pid" an integer, "tid" and "id" integers or strings (the
// format allows "tid": "stream 7"), "ts" a number within ±kMaxTraceMicros, "dur" a number in
// [0, kMaxTraceMicros], "args" an object whose "correlation" is an integer. Integers fit int64.
// Throws pylon::Error: "FILE: event 12: "dur" is -5; ...".
void check_trace_event(const nlohmann::json& e, size_t index, const std::string& path);

}  // namespace pylon::profile
