// Deadline-bounded TCP helpers over poll(2); every syscall is checked and named in its error.
#include "dist/socket.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <memory>
#include <thread>

#include "core/error.h"

namespace pylon {
namespace {

struct AddrInfoDeleter {
  void operator()(addrinfo* a) const { freeaddrinfo(a); }
};
using AddrInfo = std::unique_ptr<addrinfo, AddrInfoDeleter>;

AddrInfo resolve(const std::string& host, int port, bool passive, const std::string& what) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = passive ? AI_PASSIVE : 0;
  addrinfo* out = nullptr;
  const std::string service = std::to_string(port);
  const int rc = getaddrinfo(passive ? nullptr : host.c_str(), service.c_str(), &hints, &out);
  PYLON_CHECK(rc == 0, what, ": cannot resolve '", host, "': ", gai_strerror(rc));
  return AddrInfo(out);
}

int remaining_ms(Clock::time_point deadline) {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
  return left.count() <= 0 ? 0 : static_cast<int>(std::min<int64_t>(left.count(), 1 << 30));
}

// Waits for `events` on fd; false when the deadline passed first.
bool wait_fd(int fd, short events, Clock::time_point deadline, const std::string& what) {
  for (;;) {
    pollfd p{fd, events, 0};
    const int rc = ::poll(&p, 1, remaining_ms(deadline));
    if (rc > 0) return true;
    if (rc == 0) return false;
    PYLON_CHECK(errno == EINTR, what, ": poll failed: ", std::strerror(errno));
  }
}

std::string numeric_host(const sockaddr* a, socklen_t len) {
  char host[NI_MAXHOST];
  const int rc = getnameinfo(a, len, host, sizeof host, nullptr, 0, NI_NUMERICHOST);
  PYLON_CHECK(rc == 0, "getnameinfo failed: ", gai_strerror(rc));
  return host;
}

}  // namespace

void Fd::reset(int fd) {
  if (fd_ >= 0) ::close(fd_);
  fd_ = fd;
}

bool is_loopback_host(const std::string& host) {
  return host == "localhost" || host == "::1" || host.rfind("127.", 0) == 0;
}

namespace {

// A socket bound to host:port with SO_REUSEADDR (the first address that binds), listening or not.
Fd bind_tcp(const std::string& host, int port, bool listen, const std::string& what) {
  const bool loopback = is_loopback_host(host);
  const AddrInfo ai = resolve(loopback ? host : "", port, !loopback, what);
  std::string last = "no address";
  for (const addrinfo* a = ai.get(); a; a = a->ai_next) {
    Fd fd(::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol));
    if (!fd) {
      last = std::string("socket: ") + std::strerror(errno);
      continue;
    }
    const int one = 1;
    PYLON_CHECK(::setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) == 0, what,
                ": setsockopt(SO_REUSEADDR) failed: ", std::strerror(errno));
    if (::bind(fd.get(), a->ai_addr, a->ai_addrlen) != 0) {
      last = std::string("bind: ") + std::strerror(errno);
      continue;
    }
    if (listen) PYLON_CHECK(::listen(fd.get(), 128) == 0, what, ": listen failed: ", std::strerror(errno));
    return fd;
  }
  throw Error(what + ": cannot " + (listen ? "listen on " : "bind ") + (loopback ? host : "*") + ":" +
              std::to_string(port) + ": " + last + (port ? " (is another job using this port?)" : ""));
}

}  // namespace

Fd listen_tcp(const std::string& host, int port, const std::string& what) {
  return bind_tcp(host, port, true, what);
}

ReservedPort::ReservedPort(const std::string& host, const std::string& what)
    : fd_(bind_tcp(host, 0, false, what)), port_(local_port(fd_.get())) {}

int local_port(int fd) {
  sockaddr_storage a{};
  socklen_t len = sizeof a;
  PYLON_CHECK(::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0,
              "getsockname failed: ", std::strerror(errno));
  if (a.ss_family == AF_INET6) return ntohs(reinterpret_cast<sockaddr_in6*>(&a)->sin6_port);
  return ntohs(reinterpret_cast<sockaddr_in*>(&a)->sin_port);
}

std::string local_address(int fd) {
  sockaddr_storage a{};
  socklen_t len = sizeof a;
  PYLON_CHECK(::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0,
              "getsockname failed: ", std::strerror(errno));
  return numeric_host(reinterpret_cast<sockaddr*>(&a), len);
}

Fd connect_tcp(const std::string& host, int port, Clock::time_point deadline, const std::string& what) {
  const std::string target = host + ":" + std::to_string(port);
  std::string last = "timed out";
  auto pause = std::chrono::milliseconds(10);
  do {
    const AddrInfo ai = resolve(host, port, false, what);
    for (const addrinfo* a = ai.get(); a; a = a->ai_next) {
      Fd fd(::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, a->ai_protocol));
      PYLON_CHECK(fd, what, ": socket failed: ", std::strerror(errno));
      int rc = ::connect(fd.get(), a->ai_addr, a->ai_addrlen);
      if (rc != 0 && errno == EINPROGRESS) {
        if (!wait_fd(fd.get(), POLLOUT, deadline, what)) break;
        int err = 0;
        socklen_t len = sizeof err;
        PYLON_CHECK(::getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &err, &len) == 0, what,
                    ": getsockopt(SO_ERROR) failed: ", std::strerror(errno));
        rc = err == 0 ? 0 : -1;
        errno = err;
      }
      if (rc == 0) {
        const int one = 1;
        PYLON_CHECK(::setsockopt(fd.get(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof one) == 0, what,
                    ": setsockopt(TCP_NODELAY) failed: ", std::strerror(errno));
        return fd;
      }
      last = std::strerror(errno);
    }
    std::this_thread::sleep_for(std::min(pause, std::chrono::milliseconds(remaining_ms(deadline))));
    pause = std::min(pause * 2, std::chrono::milliseconds(200));
  } while (Clock::now() < deadline);
  throw Error(what + ": cannot connect to " + target + ": " + last);
}

bool read_exact(int fd, void* data, size_t n, Clock::time_point deadline, const std::string& what) {
  auto* p = static_cast<char*>(data);
  size_t done = 0;
  while (done < n) {
    const ssize_t got = ::recv(fd, p + done, n - done, MSG_DONTWAIT);
    if (got > 0) {
      done += static_cast<size_t>(got);
      continue;
    }
    if (got == 0) {
      if (done == 0) return false;
      throw Error(what + ": connection closed in the middle of a message");
    }
    if (errno == EINTR) continue;
    PYLON_CHECK(errno == EAGAIN || errno == EWOULDBLOCK, what, ": recv failed: ", std::strerror(errno));
    PYLON_CHECK(wait_fd(fd, POLLIN, deadline, what), what, ": timed out waiting for a reply");
  }
  return true;
}

void write_all(int fd, const void* data, size_t n, Clock::time_point deadline, const std::string& what) {
  const auto* p = static_cast<const char*>(data);
  size_t done = 0;
  while (done < n) {
    const ssize_t put = ::send(fd, p + done, n - done, MSG_DONTWAIT | MSG_NOSIGNAL);
    if (put >= 0) {
      done += static_cast<size_t>(put);
      continue;
    }
    if (errno == EINTR) continue;
    PYLON_CHECK(errno == EAGAIN || errno == EWOULDBLOCK, what, ": send failed: ", std::strerror(errno));
    PYLON_CHECK(wait_fd(fd, POLLOUT, deadline, what), what, ": timed out sending");
  }
}

}  // namespace pylon
