// Errors: user-facing failures (bad input, bad flags, bad files) vs internal invariants (bugs).
// Library code throws; only main() decides to print one line and exit non-zero.
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>

namespace pylon {

// A failure caused by the user's input: its message is one line that says what and where.
class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A collective failed because a peer died or closed its connection: this rank's error is a
// consequence of another rank's end. `pylon` exits with kExitPeerLost for it, so that a launcher
// can tell the cause from its consequences (docs/cli.md, "Exit codes").
class PeerLost : public Error {
 public:
  using Error::Error;
};
constexpr int kExitPeerLost = 4;

namespace detail {
template <typename... Args>
std::string concat(const Args&... args) {
  std::ostringstream os;
  (os << ... << args);
  return os.str();
}
[[noreturn]] void throw_internal(const char* cond, const char* file, int line, const std::string& msg);
}  // namespace detail

}  // namespace pylon

// User error: PYLON_CHECK(n > 0, "--steps must be positive, got ", n);
#define PYLON_CHECK(cond, ...)                                        \
  do {                                                                \
    if (!(cond)) throw ::pylon::Error(::pylon::detail::concat(__VA_ARGS__)); \
  } while (0)

// Internal invariant: a failure here is a bug in Pylon.
#define PYLON_ASSERT(cond, ...)                                                          \
  do {                                                                                   \
    if (!(cond))                                                                         \
      ::pylon::detail::throw_internal(#cond, __FILE__, __LINE__,                         \
                                      ::pylon::detail::concat("" __VA_OPT__(, ) __VA_ARGS__)); \
  } while (0)
