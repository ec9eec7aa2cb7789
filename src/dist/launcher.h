// `pylon train --nproc-per-node N`: the torchrun of Pylon. Re-executes this program N times with
// RANK, LOCAL_RANK, WORLD_SIZE (= N·nnodes), LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT set and
// watches the ranks: when one is killed, the others get SIGTERM (then SIGKILL after a grace
// period); when one exits with an error, the others first get a moment to end by themselves.
// Output: rank 0 writes progress and metrics to the launcher's stdout directly; its stderr lines
// are passed on as they are and every line of the other ranks goes to stderr prefixed "[rank r] ",
// except each rank's error line ("pylon CMD: error: ..."), which is held: at the end the launcher
// prints each distinct error once with the ranks that reported it ("rank 0 (and ranks 1-3, the
// same error): ..."), then, unless those lines tell the whole story, one line naming the first
// rank that failed, how it ended and the ranks it stopped.
#pragma once

#include <string>
#include <vector>

namespace pylon {

struct LaunchOptions {
  int nproc_per_node = 1, nnodes = 1, node_rank = 0;
  // Empty / 0: MASTER_ADDR / MASTER_PORT from the environment; on one node they default to
  // 127.0.0.1 and a port the OS picks, which the launcher holds (ReservedPort) until the job ends
  // so that no one else takes it before rank 0 binds it; with several nodes they are required.
  std::string master_addr;
  int master_port = 0;
  std::vector<std::string> args;  // argv[1..] of every rank: the command and its flags
  double grace_seconds = 5;       // SIGTERM -> SIGKILL
  // After a rank exits with an error, how long the others may take to end by themselves (they may
  // be reporting the same error) before they are stopped. A killed rank stops them at once.
  double settle_seconds = 3;
};

// Runs the ranks of this node to completion. Returns 0 when every rank succeeded, 128 + signal
// when the launcher was interrupted (SIGINT, SIGTERM, SIGHUP; the ranks are stopped first).
// Throws pylon::Error with the last line of a failure's summary (above).
int launch_ranks(const LaunchOptions& options);

// For ranks that another launcher started (torchrun, mpirun, srun): unless OMP_NUM_THREADS /
// OPENBLAS_NUM_THREADS say otherwise, use this rank's share of the cores, cores / local_world
// (at least 1), so that ranks sharing a machine do not oversubscribe it. (`--nproc-per-node`
// passes the same share to its ranks through those variables.)
void share_cores_among_local_ranks(int local_world);

// argv[first..argc) without the named flags and their values ("--name v" or "--name=v").
std::vector<std::string> strip_flags(int argc, char** argv, int first,
                                     const std::vector<std::string>& names);

}  // namespace pylon
