// The --profile run: schedule, per-rank trace file, and rank 0's table, CSV and analysis.
#include "profile/session.h"

#include <fcntl.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>

#include "core/error.h"
#include "io/atomic_file.h"
#include "profile/analysis.h"
#include "profile/chrome_trace.h"
#include "profile/counter_profile.h"
#include "profile/device_trace.h"
#include "profile/roofline.h"
#include "profile/table.h"

namespace pylon::profile {
namespace {

// The process's current resident set from /proc/self/statm, read through a descriptor kept
// open (a fresh fopen per step cost ~8 µs, pread ~1 µs).
double resident_bytes(int fd) {
  char buf[128];
  const ssize_t n = fd < 0 ? -1 : ::pread(fd, buf, sizeof buf - 1, 0);
  if (n <= 0) return 0;
  buf[n] = 0;
  long long size = 0, resident = 0;
  if (std::sscanf(buf, "%lld %lld", &size, &resident) != 2) return 0;
  return static_cast<double>(resident) * static_cast<double>(::sysconf(_SC_PAGESIZE));
}

// Atomically; a name that is not valid UTF-8 (a kernel's, from CUPTI) gets U+FFFD, not an exception.
void write_json(const nlohmann::json& j, const std::string& path) {
  write_file_atomic(path, j.dump(1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n");
}

}  // namespace

void check_schedule(const ProfileOptions& options, int64_t steps) {
  const Schedule& s = options.schedule;
  PYLON_CHECK(s.wait >= 0 && s.warmup >= 0 && s.active > 0,
              "--profile-wait and --profile-warmup must be >= 0, --profile-active > 0");
  PYLON_CHECK(options.dir.empty() || s.first_active() < steps, "--profile: wait ", s.wait, " + warmup ",
              s.warmup, " steps leave no active step within the run's ", steps, " steps");
}

ProfileSession::ProfileSession(const ProfileOptions& options, int rank)
    : options_(options), rank_(rank), scheduler_(options.schedule), open_(!options.dir.empty()) {
  if (!open_) return;
  std::error_code ec;
  std::filesystem::create_directories(options_.dir, ec);
  PYLON_CHECK(!ec, options_.dir, ": cannot create the profile directory: ", ec.message());
  clear();
  set_thread_name("main");
  statm_fd_ = ::open("/proc/self/statm", O_RDONLY | O_CLOEXEC);  // -1: no memory track
}

void ProfileSession::write_roofline(const std::vector<KernelCounters>& kernels) const {
  DeviceCeilings c = datasheet_ceilings(current_device_name());
  if (c.dram_bytes_per_s <= 0) c.dram_bytes_per_s = implied_dram_bandwidth(kernels);
  const auto verdicts = judge_all(kernels, c);
  const std::string base = options_.dir + "/roofline" + (rank_ ? ".rank" + std::to_string(rank_) : std::string());
  write_json(roofline_json(verdicts, c), base + ".json");
  write_roofline_svg(verdicts, c, base + ".svg");
  if (rank_ == 0) {
    std::fputs(format_roofline_table(verdicts, c).c_str(), stdout);
    std::printf("wrote %s.json and %s.svg (CUPTI range profiler, one step, kernel replay: %d passes per "
                "kernel)\n", base.c_str(), base.c_str(), counter_passes_);
    std::fflush(stdout);
  }
}

ProfileSession::~ProfileSession() {
  if (open_) set_enabled(false);
  try {  // unwinding from another error already: release CUPTI quietly
    if (device_started_ && !device_stopped_) device_tracing_stop();
    if (counters_started_ && !counters_done_) counter_profiling_stop();
  } catch (const Error&) {
  }
  if (statm_fd_ >= 0) ::close(statm_fd_);
}

void ProfileSession::step(int64_t k) {
  if (!open_) return;
  scheduler_.step(k);
  if (options_.counters) {
    if (scheduler_.active(k) && !counters_started_) {
      counter_passes_ = counter_profiling_start(), counters_started_ = true;
    } else if (counters_started_ && !counters_done_) {  // one step of kernel replay is enough
      counters_done_ = true;
      write_roofline(counter_profiling_stop());
    }
  } else if (options_.device) {
    if (enabled() && !device_started_) device_tracing_start(), device_started_ = true;
    if (scheduler_.active(k) && !active_seen_) device_tracing_discard(), active_seen_ = true;
    if (!enabled() && active_seen_ && !device_stopped_) device_records_ = device_tracing_stop(), device_stopped_ = true;
    if (enabled()) record_counter("device_used_bytes", device_used_bytes());
  }
  record_counter("resident_bytes", resident_bytes(statm_fd_));
}

std::string ProfileSession::finish() {
  if (!open_) return "";
  record_counter("resident_bytes", resident_bytes(statm_fd_));
  if (options_.device) record_counter("device_used_bytes", device_used_bytes());
  set_enabled(false);
  open_ = false;
  if (device_started_ && !device_stopped_) device_records_ = device_tracing_stop(), device_stopped_ = true;
  if (counters_started_ && !counters_done_) counters_done_ = true, write_roofline(counter_profiling_stop());
  Trace trace = snapshot(rank_, "rank " + std::to_string(rank_));
  trace.device = std::move(device_records_);
  drop_records_launched_before(trace);  // the warmup step's tail, run while the window was open
  const std::string path = options_.dir + "/trace.rank" + std::to_string(rank_) + ".json";
  write_chrome_trace(trace, path);
  if (rank_ == 0) {
    const auto stats = op_stats(trace, /*group_by_shapes=*/false);
    write_csv(op_stats(trace, /*group_by_shapes=*/true), options_.dir + "/ops.csv");
    const Schedule& s = options_.schedule;
    std::printf("profile of rank 0 (schedule: wait %lld, warmup %lld, active %lld steps):\n%s",
                static_cast<long long>(s.wait), static_cast<long long>(s.warmup),
                static_cast<long long>(s.active), format_table(stats).c_str());
    // The analysis reads back the file just written: the same code as `pylon trace analyze`.
    try {
      const TraceAnalysis analysis = analyze_trace(read_trace_slices(path));
      std::fputs(format_analysis(analysis).c_str(), stdout);
      write_json(analysis_json(analysis), options_.dir + "/analysis.json");
    } catch (const Error& e) {  // a trace with nothing to analyse still is a finished run
      std::printf("no step analysis: %s\n", e.what());
    }
    std::printf("wrote %s, %s/ops.csv and %s/analysis.json\n", path.c_str(), options_.dir.c_str(),
                options_.dir.c_str());
    std::fflush(stdout);
  }
  clear();
  return path;
}

}  // namespace pylon::profile
