// The rank launcher: fork/exec of /proc/self/exe per rank, output forwarding (the ranks' error
// lines held back and grouped at the end), a watch loop over waitpid(WNOHANG) and poll(2) with a
// 100 ms tick, and teardown on failure or interruption.
#include "dist/launcher.h"

#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <thread>
#include <utility>

#include <omp.h>
#ifdef PYLON_HAVE_BLAS
#include <cblas.h>
#endif

#include "core/env.h"
#include "core/error.h"
#include "dist/launch_report.h"
#include "dist/socket.h"

extern char** environ;

namespace pylon {
namespace {

volatile sig_atomic_t g_signal = 0;
extern "C" void on_signal(int signo) { g_signal = signo; }

// Catches SIGINT, SIGTERM and SIGHUP for the launcher's lifetime (the ranks, after exec, have the
// default actions again), restoring the previous handlers on destruction.
class SignalGuard {
 public:
  SignalGuard() {
    g_signal = 0;
    struct sigaction sa{};
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    for (size_t i = 0; i < kSignals.size(); ++i)
      PYLON_CHECK(::sigaction(kSignals[i], &sa, &old_[i]) == 0, "sigaction failed: ", std::strerror(errno));
  }
  ~SignalGuard() {
    for (size_t i = 0; i < kSignals.size(); ++i) ::sigaction(kSignals[i], &old_[i], nullptr);
  }
  SignalGuard(const SignalGuard&) = delete;
  SignalGuard& operator=(const SignalGuard&) = delete;

 private:
  static constexpr std::array<int, 3> kSignals{SIGINT, SIGTERM, SIGHUP};
  std::array<struct sigaction, 3> old_{};
};

// One rank's process. Owning: a child still running at destruction is killed and reaped.
class RankProcess {
 public:
  // `output`: the read end of the rank's output pipe; `prefix` goes before each forwarded line;
  // a line starting with `error_prefix` is the rank's error report, held for the launcher's summary.
  RankProcess(int rank, pid_t pid, Fd output, std::string prefix, std::string error_prefix)
      : rank_(rank), pid_(pid), output_(std::move(output)), prefix_(std::move(prefix)),
        error_prefix_(std::move(error_prefix)) {}
  ~RankProcess() {
    if (pid_ > 0 && running()) {
      ::kill(pid_, SIGKILL);
      int status = 0;
      while (::waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
      }
    }
  }
  RankProcess(RankProcess&& o) noexcept
      : rank_(o.rank_), pid_(std::exchange(o.pid_, -1)), output_(std::move(o.output_)),
        prefix_(std::move(o.prefix_)), error_prefix_(std::move(o.error_prefix_)),
        partial_(std::move(o.partial_)), report_(std::move(o.report_)), status_(o.status_) {}
  RankProcess(const RankProcess&) = delete;
  RankProcess& operator=(const RankProcess&) = delete;

  int rank() const { return rank_; }
  pid_t pid() const { return pid_; }
  bool running() const { return !status_.has_value(); }
  int status() const { return *status_; }
  bool failed() const { return status_ && !(WIFEXITED(*status_) && WEXITSTATUS(*status_) == 0); }
  bool signalled() const { return status_ && WIFSIGNALED(*status_); }
  // It failed because a peer of its collectives ended (pylon's kExitPeerLost): a consequence.
  bool lost_peer() const { return status_ && WIFEXITED(*status_) && WEXITSTATUS(*status_) == kExitPeerLost; }

  // Reaps the process if it ended; true when it did just now.
  bool poll_exit() {
    if (!running()) return false;
    int status = 0;
    const pid_t r = ::waitpid(pid_, &status, WNOHANG);
    if (r == 0 || (r < 0 && errno == EINTR)) return false;
    PYLON_CHECK(r == pid_, "waitpid(", pid_, ") failed: ", std::strerror(errno));
    status_ = status;
    return true;
  }
  void signal(int signo) {
    if (running()) ::kill(pid_, signo);
  }

  // The rank's error line without its prefix, if it printed one (main's last words on a failure).
  const std::optional<std::string>& report() const { return report_; }

  // Forwards the complete lines the rank wrote to stderr with its prefix (and a last partial line
  // at EOF or when `flush` is set), except its error line, which is held. Closes the pipe at EOF.
  void forward_output(bool flush) {
    if (!output_) return;
    char buf[4096];
    bool eof = false;
    for (;;) {
      const ssize_t n = ::read(output_.get(), buf, sizeof buf);
      if (n > 0) {
        partial_.append(buf, static_cast<size_t>(n));
      } else if (n < 0 && errno == EINTR) {
        continue;
      } else {
        eof = n == 0 || (errno != EAGAIN && errno != EWOULDBLOCK);  // a read error ends it too
        break;
      }
    }
    size_t start = 0;
    for (size_t nl; (nl = partial_.find('\n', start)) != std::string::npos; start = nl + 1)
      line(partial_.substr(start, nl - start));
    partial_.erase(0, start);
    if ((eof || flush) && !partial_.empty()) {
      line(partial_);
      partial_.clear();
    }
    std::fflush(stderr);
    if (eof) output_.reset();
  }
  int output_fd() const { return output_.get(); }

 private:
  void line(const std::string& text) {
    if (text.rfind(error_prefix_, 0) != 0) {
      std::fprintf(stderr, "%s%s\n", prefix_.c_str(), text.c_str());
      return;
    }
    if (report_)  // a second error line (not main's way): the earlier one is passed on as it was
      std::fprintf(stderr, "%s%s%s\n", prefix_.c_str(), error_prefix_.c_str(), report_->c_str());
    report_ = text.substr(error_prefix_.size());
  }

  int rank_;
  pid_t pid_;
  Fd output_;  // read end of the rank's output pipe: stderr for rank 0, stdout+stderr for the others
  std::string prefix_, error_prefix_;
  std::string partial_;
  std::optional<std::string> report_;
  std::optional<int> status_;
};

std::string describe_exit(int status) {
  if (WIFEXITED(status)) return "exited with status " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) {
    const int s = WTERMSIG(status);
    const char* name = ::strsignal(s);
    return "was killed by signal " + std::to_string(s) + " (" + (name ? name : "?") + ")";
  }
  return "ended with wait status " + std::to_string(status);
}

int cpu_count() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (::sched_getaffinity(0, sizeof set, &set) == 0) return std::max(1, CPU_COUNT(&set));
  return std::max(1u, std::thread::hardware_concurrency());
}

// The environment of one rank: ours, minus the variables we set, plus them.
std::vector<std::string> rank_environment(const std::vector<std::pair<std::string, std::string>>& set) {
  std::vector<std::string> env;
  for (char** e = environ; *e; ++e) {
    const std::string kv = *e;
    const std::string key = kv.substr(0, kv.find('='));
    bool replaced = false;
    for (const auto& [k, v] : set) replaced = replaced || k == key;
    if (!replaced) env.push_back(kv);
  }
  for (const auto& [k, v] : set) env.push_back(k + "=" + v);
  return env;
}

std::vector<char*> c_strings(std::vector<std::string>& v) {
  std::vector<char*> out;
  for (auto& s : v) out.push_back(s.data());
  out.push_back(nullptr);
  return out;
}

}  // namespace

void share_cores_among_local_ranks(int local_world) {
  if (local_world <= 1) return;
  const int share = std::max(1, cpu_count() / local_world);
  if (!env_text("OMP_NUM_THREADS")) omp_set_num_threads(share);
#ifdef PYLON_HAVE_BLAS
  if (!env_text("OPENBLAS_NUM_THREADS")) openblas_set_num_threads(share);
#endif
}

std::vector<std::string> strip_flags(int argc, char** argv, int first,
                                     const std::vector<std::string>& names) {
  std::vector<std::string> out;
  for (int i = first; i < argc; ++i) {
    const std::string arg = argv[i];
    bool drop = false;
    for (const auto& n : names) {
      if (arg == "--" + n) {
        drop = true;
        ++i;  // its value
      } else if (arg.rfind("--" + n + "=", 0) == 0) {
        drop = true;
      }
      if (drop) break;
    }
    if (!drop) out.push_back(arg);
  }
  return out;
}

int launch_ranks(const LaunchOptions& o) {
  PYLON_CHECK(o.nproc_per_node >= 1, "--nproc-per-node must be >= 1, got ", o.nproc_per_node);
  PYLON_CHECK(o.nnodes >= 1, "--nnodes must be >= 1, got ", o.nnodes);
  PYLON_CHECK(o.node_rank >= 0 && o.node_rank < o.nnodes, "--node-rank ", o.node_rank,
              " is outside 0..", o.nnodes - 1);
  PYLON_CHECK(!env_text("RANK") && !env_text("WORLD_SIZE"),
              "--nproc-per-node/--nnodes in a process that already has RANK/WORLD_SIZE: started by "
              "another launcher? (drop one of them)");
  std::string addr = o.master_addr.empty() ? env_text("MASTER_ADDR").value_or("") : o.master_addr;
  int port = o.master_port;
  if (port == 0) port = static_cast<int>(env_int("MASTER_PORT", 0, 1, 65535));
  std::optional<ReservedPort> reserved;  // a port of our choosing, held until the job ends
  if (o.nnodes > 1) {
    PYLON_CHECK(!addr.empty() && port > 0, "--nnodes ", o.nnodes, " needs --master-addr and "
                "--master-port (or MASTER_ADDR/MASTER_PORT): node 0's address and a port open on it");
  } else {
    if (addr.empty()) addr = "127.0.0.1";
    if (port == 0) {  // the OS picks it and no one else gets it while rank 0 starts and binds it
      reserved.emplace(addr, "choosing the master port");
      port = reserved->port();
    }
  }
  PYLON_CHECK(port >= 1 && port <= 65535, "master port ", port, " is outside 1..65535");

  const int world = o.nproc_per_node * o.nnodes;
  // Ranks share this machine's cores: give each its share of threads unless the user chose.
  const std::string threads = std::to_string(std::max(1, cpu_count() / o.nproc_per_node));
  std::vector<RankProcess> ranks;
  ranks.reserve(static_cast<size_t>(o.nproc_per_node));
  const pid_t launcher = ::getpid();
  const std::string command = o.args.empty() ? "" : o.args.front();
  const std::string error_prefix = "pylon " + command + ": error: ";  // main's words for an error
  const SignalGuard signals;
  for (int local = 0; local < o.nproc_per_node; ++local) {
    const int rank = o.node_rank * o.nproc_per_node + local;
    std::vector<std::pair<std::string, std::string>> vars{
        {"RANK", std::to_string(rank)},           {"LOCAL_RANK", std::to_string(local)},
        {"WORLD_SIZE", std::to_string(world)},    {"LOCAL_WORLD_SIZE", std::to_string(o.nproc_per_node)},
        {"GROUP_RANK", std::to_string(o.node_rank)}, {"MASTER_ADDR", addr},
        {"MASTER_PORT", std::to_string(port)}};
    for (const char* v : {"OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS"})
      if (!env_text(v)) vars.emplace_back(v, threads);
    std::vector<std::string> env = rank_environment(vars);
    std::vector<std::string> args{"pylon"};
    args.insert(args.end(), o.args.begin(), o.args.end());
    std::vector<char*> argv = c_strings(args), envp = c_strings(env);

    // Rank 0's stdout is ours (progress, metrics); its stderr and every other rank's output come
    // through a pipe, so that the ranks' error lines can be grouped.
    int pipe_fds[2] = {-1, -1};
    PYLON_CHECK(::pipe2(pipe_fds, O_CLOEXEC) == 0, "pipe2 failed: ", std::strerror(errno));
    Fd read_end(pipe_fds[0]), write_end(pipe_fds[1]);
    std::fflush(stdout);
    std::fflush(stderr);
    const pid_t pid = ::fork();
    PYLON_CHECK(pid >= 0, "fork of rank ", rank, " failed: ", std::strerror(errno));
    if (pid == 0) {  // the rank: only async-signal-safe calls until exec
      ::prctl(PR_SET_PDEATHSIG, SIGTERM);  // the launcher dying (even by SIGKILL) ends the rank
      if (::getppid() != launcher) ::_exit(1);
      if ((rank > 0 && ::dup2(write_end.get(), STDOUT_FILENO) < 0) ||
          ::dup2(write_end.get(), STDERR_FILENO) < 0) {
        const char msg[] = "pylon launcher: dup2 of a rank's output pipe failed\n";
        [[maybe_unused]] const ssize_t n = ::write(STDERR_FILENO, msg, sizeof msg - 1);
        ::_exit(127);
      }
      ::execve("/proc/self/exe", argv.data(), envp.data());
      const char msg[] = "pylon launcher: execve(/proc/self/exe) failed\n";
      [[maybe_unused]] const ssize_t n = ::write(STDERR_FILENO, msg, sizeof msg - 1);
      ::_exit(127);
    }
    write_end.reset();
    PYLON_CHECK(::fcntl(read_end.get(), F_SETFL, O_NONBLOCK) == 0, "fcntl failed: ", std::strerror(errno));
    ranks.emplace_back(rank, pid, std::move(read_end), rank > 0 ? "[rank " + std::to_string(rank) + "] " : "",
                       error_prefix);
  }

  // Watch: forward output, reap, and on the first failure or a signal stop everyone. A rank that
  // exited with an error gives the others `settle_seconds` to end by themselves first: they may be
  // about to report the same error (every rank scans its data, say) or fail on the connections it
  // closed; a killed rank, or a signal to the launcher, stops them at once.
  const RankProcess* failure = nullptr;
  int interrupted = 0;
  bool stopping = false, killed = false;
  Clock::time_point stop_at, kill_at;
  std::optional<Clock::time_point> drain_until;  // once every rank ended: bounded wait for EOFs
  std::vector<int> stopped;                      // ranks still running when the launcher stopped them
  for (;;) {
    std::vector<pollfd> fds;
    for (const auto& r : ranks)
      if (r.output_fd() >= 0) fds.push_back({r.output_fd(), POLLIN, 0});
    bool running = false;
    for (const auto& r : ranks) running = running || r.running();
    if (!running && fds.empty()) break;
    if (!running && !drain_until) drain_until = Clock::now() + std::chrono::seconds(2);
    if (drain_until && Clock::now() > *drain_until) break;  // a grandchild holds a pipe open
    const int rc = ::poll(fds.data(), fds.size(), 100);
    PYLON_CHECK(rc >= 0 || errno == EINTR, "poll failed: ", std::strerror(errno));
    for (auto& r : ranks) r.forward_output(!running);
    if (g_signal && !interrupted && !failure) interrupted = g_signal;  // Ctrl-C kills ranks too
    // Among ranks that ended in the same tick, a killed one is the likelier cause, and one that lost
    // a peer the least likely; a rank that lost a peer gives way to a cause that ends after it.
    std::vector<const RankProcess*> ended;
    for (auto& r : ranks)
      if (r.poll_exit() && r.failed()) ended.push_back(&r);
    const auto likelihood = [](const RankProcess* r) { return r->signalled() ? 0 : r->lost_peer() ? 2 : 1; };
    std::stable_sort(ended.begin(), ended.end(),
                     [&](const RankProcess* a, const RankProcess* b) { return likelihood(a) < likelihood(b); });
    if (!interrupted && !ended.empty() && (!failure || (failure->lost_peer() && !ended.front()->lost_peer()))) {
      const bool first = !failure;
      failure = ended.front();
      const double settle = failure->signalled() ? 0.0 : o.settle_seconds;
      const auto at = Clock::now() + std::chrono::milliseconds(static_cast<int64_t>(settle * 1000));
      stop_at = first ? at : std::min(stop_at, at);
    }
    if (!stopping && (interrupted || (failure && (g_signal || Clock::now() >= stop_at)))) {
      stopping = true;
      for (auto& r : ranks)
        if (r.running()) stopped.push_back(r.rank());
      for (auto& r : ranks) r.signal(SIGTERM);
      kill_at = Clock::now() + std::chrono::milliseconds(static_cast<int64_t>(o.grace_seconds * 1000));
    }
    if (stopping && !killed && Clock::now() >= kill_at) {
      killed = true;
      for (auto& r : ranks) r.signal(SIGKILL);
    }
  }

  // The errors the ranks reported, each once with the ranks that reported it; then, unless those
  // lines tell the whole story, how the first failure ended (main prints the last line). Ranks that
  // failed only because they lost a peer to another cause are named on that line, not given theirs;
  // so are, after a rank was killed, the ranks stopped while they were ending on what it did.
  std::vector<int> lost;
  for (const auto& r : ranks)
    if (failure && !failure->lost_peer() && r.lost_peer()) lost.push_back(r.rank());
  const std::string lost_text =
      lost.empty() ? "" : "; " + std::string(lost.size() > 1 ? "ranks " : "rank ") + format_rank_list(lost) +
                              " lost " + (lost.size() > 1 ? "their connections" : "its connection") + " to it";
  const auto consequence = [&](int rank) {
    return std::find(lost.begin(), lost.end(), rank) != lost.end() ||
           (failure && failure->signalled() && std::find(stopped.begin(), stopped.end(), rank) != stopped.end());
  };
  std::vector<RankReport> reports;
  for (const auto& r : ranks)
    if (r.report() && !consequence(r.rank())) reports.push_back({r.rank(), *r.report()});
  const std::vector<std::string> errors = group_rank_errors(reports);
  const auto print_errors = [&](size_t n) {
    for (size_t i = 0; i < n; ++i) std::fprintf(stderr, "%s%s\n", error_prefix.c_str(), errors[i].c_str());
    std::fflush(stderr);
  };
  if (interrupted) {
    print_errors(errors.size());
    std::fprintf(stderr, "pylon: interrupted by signal %d (%s); stopped all %d ranks\n",
                 static_cast<int>(interrupted), ::strsignal(interrupted), o.nproc_per_node);
    return 128 + interrupted;
  }
  if (failure) {
    const std::string stopped_text = "; stopped the rank" + std::string(stopped.size() > 1 ? "s " : " ") +
                                     format_rank_list(stopped) + " still running then";
    // Every rank that failed by itself exited with an error it reported: those lines tell what
    // happened; the ranks still running (stopped) are named at the end of the first failure's line.
    bool reported = true;
    for (const auto& r : ranks) {
      const bool was_stopped = std::find(stopped.begin(), stopped.end(), r.rank()) != stopped.end();
      reported = reported && (!r.failed() || was_stopped || consequence(r.rank()) || (r.report() && !r.signalled()));
    }
    if (reported) {
      const size_t last = stopped.empty() && lost.empty() ? errors.size() - 1 : rank_error_line(reports, failure->rank());
      for (size_t i = 0; i < errors.size(); ++i)
        if (i != last) std::fprintf(stderr, "%s%s\n", error_prefix.c_str(), errors[i].c_str());
      std::fflush(stderr);
      throw Error(errors[last] + lost_text + (stopped.empty() ? "" : stopped_text));
    }
    // A rank killed, or failed without an error line: how the first failure ended, last.
    print_errors(errors.size());
    throw Error("rank " + std::to_string(failure->rank()) + " (pid " + std::to_string(failure->pid()) + ") " +
                describe_exit(failure->status()) + lost_text +
                (stopped.empty() ? (lost.empty() ? std::string("; no other rank was still running") : std::string())
                                 : stopped_text));
  }
  print_errors(errors.size());  // not expected: a rank that printed an error line and exited 0
  return 0;
}

}  // namespace pylon
