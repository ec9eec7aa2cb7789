// Rank discovery from launcher variables, and the rendezvous key-value store: a poll(2) server
// thread on rank 0 and a request/reply client on every rank.
//
// Wire format (all integers little-endian u32, keys and values raw bytes):
//   request  'S' klen key vlen value  -> reply u8 1
//   request  'G' klen key             -> reply u8 found, vlen value (vlen 0 when not found)
// Waiting for a key is the client's job (it polls with a growing pause up to its deadline), so the
// server never blocks on behalf of a client.
#include "dist/rendezvous.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <map>
#include <thread>

#include "core/env.h"
#include "core/error.h"
#include "dist/socket.h"

namespace pylon {
namespace {

bool env(const char* name) { return env_text(name).has_value(); }

// A launcher's variable that is set (env(name)): an integer from min_value to 2^24.
int env_int(const char* name, int min_value) {
  PYLON_ASSERT(env(name));
  return static_cast<int>(pylon::env_int(name, min_value, min_value, 1 << 24));
}

constexpr uint32_t kMaxMessage = 64u << 20;  // a corrupt length must not allocate the world

void put_u32(std::string& out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}
uint32_t get_u32(const unsigned char* b) {
  return b[0] | (b[1] << 8) | (b[2] << 16) | (static_cast<uint32_t>(b[3]) << 24);
}

bool read_u32(int fd, uint32_t* v, Clock::time_point deadline, const std::string& what) {
  unsigned char b[4];
  if (!read_exact(fd, b, 4, deadline, what)) return false;
  *v = get_u32(b);
  PYLON_CHECK(*v <= kMaxMessage, what, ": malformed message (length ", *v, ")");
  return true;
}

}  // namespace

DistEnv dist_env_from_environment(const std::string& addr_flag, int port_flag) {
  DistEnv e;
  if (env("RANK") || env("WORLD_SIZE")) {
    PYLON_CHECK(env("RANK") && env("WORLD_SIZE"), "RANK and WORLD_SIZE must be set together");
    e.rank = env_int("RANK", 0), e.world = env_int("WORLD_SIZE", 1);
    e.local_rank = env("LOCAL_RANK") ? env_int("LOCAL_RANK", 0) : 0;
    e.local_world = env("LOCAL_WORLD_SIZE") ? env_int("LOCAL_WORLD_SIZE", 1) : 1;
    e.one_node = e.local_world == e.world;
    e.source = "RANK/WORLD_SIZE";
  } else if (env("OMPI_COMM_WORLD_RANK")) {
    PYLON_CHECK(env("OMPI_COMM_WORLD_SIZE"), "OMPI_COMM_WORLD_RANK is set without OMPI_COMM_WORLD_SIZE");
    e.rank = env_int("OMPI_COMM_WORLD_RANK", 0), e.world = env_int("OMPI_COMM_WORLD_SIZE", 1);
    e.local_rank = env("OMPI_COMM_WORLD_LOCAL_RANK") ? env_int("OMPI_COMM_WORLD_LOCAL_RANK", 0) : 0;
    e.local_world = env("OMPI_COMM_WORLD_LOCAL_SIZE") ? env_int("OMPI_COMM_WORLD_LOCAL_SIZE", 1) : 1;
    e.one_node = e.local_world == e.world;
    e.source = "OpenMPI (OMPI_COMM_WORLD_*)";
  } else if (env("SLURM_PROCID") && (env("SLURM_STEP_NUM_TASKS") || env("SLURM_NTASKS"))) {
    // srun's step variables first: a batch script also sees SLURM_NTASKS without being a rank.
    const char* tasks = env("SLURM_STEP_NUM_TASKS") ? "SLURM_STEP_NUM_TASKS" : "SLURM_NTASKS";
    const char* nodes = env("SLURM_STEP_NUM_NODES") ? "SLURM_STEP_NUM_NODES" : "SLURM_NNODES";
    e.rank = env_int("SLURM_PROCID", 0), e.world = env_int(tasks, 1);
    e.local_rank = env("SLURM_LOCALID") ? env_int("SLURM_LOCALID", 0) : 0;
    e.one_node = env(nodes) && env_int(nodes, 1) == 1;
    e.local_world = e.one_node ? e.world : 1;
    e.source = std::string("Slurm (SLURM_PROCID/") + tasks + ")";
  }
  PYLON_CHECK(e.rank < e.world, e.source, ": rank ", e.rank, " is outside a world of ", e.world);
  PYLON_CHECK(e.local_rank < e.local_world || e.local_world == 1, e.source, ": local rank ",
              e.local_rank, " is outside the ", e.local_world, " ranks of this node");
  PYLON_CHECK(e.local_world <= e.world, e.source, ": ", e.local_world,
              " local ranks exceed the world of ", e.world);
  e.one_node = e.one_node || e.world == 1;

  if (!addr_flag.empty()) {
    e.master_addr = addr_flag;
  } else if (env("MASTER_ADDR")) {
    e.master_addr = *env_text("MASTER_ADDR");
  } else {
    PYLON_CHECK(e.one_node, e.source, " describes ", e.world,
                " ranks, not known to share one node: set MASTER_ADDR (or --master-addr) to rank 0's host");
  }
  if (port_flag != 0) {
    e.master_port = port_flag;
  } else if (env("MASTER_PORT")) {
    e.master_port = env_int("MASTER_PORT", 1);
  } else {
    PYLON_CHECK(e.one_node, e.source, " describes ", e.world,
                " ranks, not known to share one node: set MASTER_PORT (or --master-port)");
  }
  PYLON_CHECK(e.master_port >= 1 && e.master_port <= 65535, "master port ", e.master_port,
              " is outside 1..65535");
  return e;
}

// The server: one thread, poll over the listening socket, the clients and a wake pipe.
class TcpStore::Server {
 public:
  Server(const std::string& host, int port, std::string who)
      : listener_(listen_tcp(host, port, who + ": rendezvous server")), who_(std::move(who)) {
    int p[2];
    PYLON_CHECK(::pipe2(p, O_CLOEXEC) == 0, who_, ": pipe2 failed: ", std::strerror(errno));
    wake_read_.reset(p[0]);
    wake_write_.reset(p[1]);
    thread_ = std::thread([this] { run(); });
  }
  ~Server() {
    stop_ = true;
    const char c = 0;
    [[maybe_unused]] const ssize_t n = ::write(wake_write_.get(), &c, 1);  // poll wakes either way
    thread_.join();
  }
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

 private:
  void run() {
    std::vector<Fd> clients;
    while (!stop_) {
      std::vector<pollfd> fds{{wake_read_.get(), POLLIN, 0}, {listener_.get(), POLLIN, 0}};
      for (const auto& c : clients) fds.push_back({c.get(), POLLIN, 0});
      const int rc = ::poll(fds.data(), fds.size(), 1000);
      if (rc < 0 && errno != EINTR) return;  // cannot happen with valid fds; clients then time out
      if (rc <= 0) continue;
      std::vector<Fd> alive;
      for (size_t i = 0; i < clients.size(); ++i) {  // the polled ones: fds[2..]
        bool keep = true;
        if (fds[i + 2].revents & (POLLIN | POLLHUP | POLLERR)) {
          try {
            keep = serve_one(clients[i].get());
          } catch (const Error&) {
            keep = false;  // a broken client; it sees the closed connection
          }
        }
        if (keep) alive.push_back(std::move(clients[i]));
      }
      clients = std::move(alive);
      if (fds[1].revents & POLLIN) {
        Fd c(::accept4(listener_.get(), nullptr, nullptr, SOCK_CLOEXEC));
        if (c) clients.push_back(std::move(c));  // a failed accept: that client retries
      }
    }
  }

  // Answers one request; false when the client closed the connection.
  bool serve_one(int fd) {
    const auto deadline = Clock::now() + std::chrono::seconds(10);
    const std::string what = who_ + ": rendezvous server";
    char op = 0;
    if (!read_exact(fd, &op, 1, deadline, what)) return false;
    uint32_t klen = 0;
    PYLON_CHECK(read_u32(fd, &klen, deadline, what), what, ": truncated request");
    std::string key(klen, '\0');
    PYLON_CHECK(read_exact(fd, key.data(), klen, deadline, what), what, ": truncated");
    std::string reply;
    if (op == 'S') {
      uint32_t vlen = 0;
      PYLON_CHECK(read_u32(fd, &vlen, deadline, what), what, ": truncated request");
      std::vector<char> value(vlen);
      PYLON_CHECK(read_exact(fd, value.data(), vlen, deadline, what), what, ": truncated");
      data_[key] = std::move(value);
      reply.push_back(1);
    } else {
      PYLON_CHECK(op == 'G', what, ": unknown request '", op, "'");
      auto it = data_.find(key);
      reply.push_back(it != data_.end() ? 1 : 0);
      put_u32(reply, it != data_.end() ? static_cast<uint32_t>(it->second.size()) : 0);
      if (it != data_.end()) reply.append(it->second.begin(), it->second.end());
    }
    write_all(fd, reply.data(), reply.size(), deadline, what);
    return true;
  }

  Fd listener_, wake_read_, wake_write_;
  std::string who_;
  std::map<std::string, std::vector<char>> data_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

TcpStore::TcpStore(const std::string& host, int port, bool serve, std::chrono::milliseconds timeout,
                   std::string who)
    : host_(host), who_(std::move(who)), port_(port), timeout_(timeout) {
  if (serve) server_ = std::make_unique<Server>(host, port, who_);
  Fd fd = connect_tcp(host, port, Clock::now() + timeout_, where());
  local_address_ = pylon::local_address(fd.get());
  fd_ = fd.release();
}

TcpStore::~TcpStore() {
  if (fd_ >= 0) ::close(fd_);
  server_.reset();
}

std::string TcpStore::where() const {
  return who_ + ": rendezvous at " + host_ + ":" + std::to_string(port_);
}

void TcpStore::set(const std::string& key, const std::vector<char>& value) {
  std::string msg(1, 'S');
  put_u32(msg, static_cast<uint32_t>(key.size()));
  msg += key;
  put_u32(msg, static_cast<uint32_t>(value.size()));
  msg.append(value.begin(), value.end());
  const auto deadline = Clock::now() + timeout_;
  write_all(fd_, msg.data(), msg.size(), deadline, where());
  char ack = 0;
  PYLON_CHECK(read_exact(fd_, &ack, 1, deadline, where()) && ack == 1, where(),
              ": the server closed the connection (rank 0 exited?)");
}

bool TcpStore::get_once(const std::string& key, std::vector<char>* value) {
  std::string msg(1, 'G');
  put_u32(msg, static_cast<uint32_t>(key.size()));
  msg += key;
  const auto deadline = Clock::now() + timeout_;
  write_all(fd_, msg.data(), msg.size(), deadline, where());
  char found = 0;
  PYLON_CHECK(read_exact(fd_, &found, 1, deadline, where()), where(),
              ": the server closed the connection (rank 0 exited?)");
  uint32_t vlen = 0;
  PYLON_CHECK(read_u32(fd_, &vlen, deadline, where()), where(), ": truncated reply");
  std::vector<char> v(vlen);
  PYLON_CHECK(read_exact(fd_, v.data(), vlen, deadline, where()), where(), ": truncated reply");
  if (found && value) *value = std::move(v);
  return found != 0;
}

void TcpStore::wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) {
  const auto deadline = Clock::now() + timeout;
  auto pause = std::chrono::milliseconds(1);
  for (;;) {
    std::string missing;
    for (const auto& k : keys)
      if (!get_once(k, nullptr)) missing += (missing.empty() ? "'" : ", '") + k + "'";
    if (missing.empty()) return;
    PYLON_CHECK(Clock::now() < deadline, where(), ": timed out after ",
                static_cast<double>(timeout.count()) / 1000.0,
                " s waiting for ", missing, " (did every rank start? is the master reachable?)");
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::milliseconds(50));
  }
}

std::vector<char> TcpStore::get(const std::string& key) {
  wait({key}, timeout_);
  std::vector<char> v;
  PYLON_CHECK(get_once(key, &v), where(), ": key '", key, "' vanished");
  return v;
}

void check_world_size(TcpStore& store, const DistEnv& env, const std::string& who) {
  const std::string mine = std::to_string(env.world);
  if (env.rank == 0) {
    store.set("pylon/world", {mine.begin(), mine.end()});
    return;
  }
  const std::vector<char> value = store.get("pylon/world");
  const std::string theirs(value.begin(), value.end());
  PYLON_CHECK(theirs == mine, who, ": ", env.source, " says ", env.world, " ranks, but rank 0 was started with ",
              theirs, ": every rank must be given the same world size");
}

}  // namespace pylon
