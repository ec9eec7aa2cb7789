// TCP sockets for the rendezvous store: an RAII file descriptor, a port held for a later listener,
// and connect/read/write that take a deadline (poll-based), so no call can block past it. Errors
// are pylon::Error naming what failed.
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
// loopback address. SO_REUSEADDR, so it may bind a port a ReservedPort holds. `what` names the
// purpose in errors.
Fd listen_tcp(const std::string& host, int port, const std::string& what);
int local_port(int fd);              // the port a bound socket got
std::string local_address(int fd);   // numeric address of this end of a connected socket

// A port the OS picked, held until destroyed for a process that binds it later (the launcher's
// MASTER_PORT for rank 0, a test's for its ranks). The socket is bound like listen_tcp's (same
// host rule, SO_REUSEADDR) but does not listen. On Linux that keeps the port from everyone who
// lets the OS choose (bind to port 0, the local end of a connect) and from binds without
// SO_REUSEADDR, while listen_tcp on this host and port still succeeds: a socket may bind where
// others hold the address with SO_REUSEADDR as long as none of them listens (socket(7)). Only a
// process that names this very port and sets SO_REUSEADDR could still take it.
class ReservedPort {
 public:
  explicit ReservedPort(const std::string& host = "127.0.0.1", const std::string& what = "reserving a port");
  int port() const { return port_; }

 private:
  Fd fd_;
  int port_ = 0;
};

// Connects to host:port, retrying refused connections (the server may not be up yet) until the
// deadline. Throws pylon::Error with the last failure when the deadline passes.
Fd connect_tcp(const std::string& host, int port, Clock::time_point deadline, const std::string& what);

// Returns false on an orderly close before the first byte (read_exact only); throws on errors,
// on a close in the middle and on the deadline.
bool read_exact(int fd, void* data, size_t n, Clock::time_point deadline, const std::string& what);
void write_all(int fd, const void* data, size_t n, Clock::time_point deadline, const std::string& what);

}  // namespace pylon
