// TCP sockets for the rendezvous store: an RAII file descriptor, and connect/read/write that take a
// deadline (poll-based), so no call can block past it. Errors are pylon::Error naming what failed.
#pragma once

#include <chrono>
#include <cstddef>
#include <string>

namespace pylon {

using Clock = std::chrono::steady_clock;

// Owns a file descriptor; move-only; closes it on destruction.
class Fd {
 public:
  Fd() = default;
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() { reset(); }
  Fd(Fd&& o) noexcept : fd_(o.release()) {}
  Fd& operator=(Fd&& o) noexcept {
    if (this != &o) reset(o.release());
    return *this;
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;

  int get() const { return fd_; }
  explicit operator bool() const { return fd_ >= 0; }
  int release() {
    const int fd = fd_;
    fd_ = -1;
    return fd;
  }
  void reset(int fd = -1);

 private:
  int fd_ = -1;
};

bool is_loopback_host(const std::string& host);

// A listening socket on host:port (port 0: any free port); every interface unless host is a
// loopback address. `what` names the purpose in errors.
Fd listen_tcp(const std::string& host, int port, const std::string& what);
int local_port(int fd);              // the port a bound socket got
std::string local_address(int fd);   // numeric address of this end of a connected socket

// Connects to host:port, retrying refused connections (the server may not be up yet) until the
// deadline. Throws pylon::Error with the last failure when the deadline passes.
Fd connect_tcp(const std::string& host, int port, Clock::time_point deadline, const std::string& what);

// Returns false on an orderly close before the first byte (read_exact only); throws on errors,
// on a close in the middle and on the deadline.
bool read_exact(int fd, void* data, size_t n, Clock::time_point deadline, const std::string& what);
void write_all(int fd, const void* data, size_t n, Clock::time_point deadline, const std::string& what);

}  // namespace pylon
