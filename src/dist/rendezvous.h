// How the ranks of a job find each other: where this process sits (rank, world, local rank) from
// torchrun-style, OpenMPI or Slurm variables, and a small TCP key-value store that rank 0 serves
// on MASTER_ADDR:MASTER_PORT, through which the communicators exchange their addresses (Gloo's
// pair addresses now, NCCL's unique id later). Every wait in here has a deadline.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

namespace pylon {

constexpr int kDefaultMasterPort = 29500;  // torchrun's default

// Where this process sits in the job.
struct DistEnv {
  int rank = 0, world = 1;              // global
  int local_rank = 0, local_world = 1;  // on this node
  std::string master_addr = "127.0.0.1";
  int master_port = kDefaultMasterPort;
  bool one_node = true;                   // every rank runs on this machine
  std::string source = "single process";  // which variables described the job, for messages
};

// Reads, first match wins: RANK/WORLD_SIZE[/LOCAL_RANK/LOCAL_WORLD_SIZE] (torchrun, `pylon train
// --nproc-per-node`), OMPI_COMM_WORLD_RANK/SIZE/LOCAL_RANK/LOCAL_SIZE (mpirun),
// SLURM_PROCID/SLURM_STEP_NUM_TASKS (or SLURM_NTASKS)/SLURM_LOCALID (srun); none of them: a world
// of one. MASTER_ADDR/MASTER_PORT come from the environment, overridden by addr_flag / port_flag
// when given (non-empty / non-zero); they are required unless every rank is known to run on this
// node (local world == world), and then default to 127.0.0.1:29500. Throws pylon::Error for inconsistent or
// malformed values, naming the variable.
DistEnv dist_env_from_environment(const std::string& addr_flag = "", int port_flag = 0);

// The key-value store. Rank 0 constructs it with serve = true: it listens on host:port (only the
// loopback interface when host is a loopback address, every interface otherwise) and answers in a
// background thread until destroyed. Every rank, rank 0 included, connects as a client, retrying
// until `timeout` (rank 0 may start last). Not thread-safe: one user thread per process.
class TcpStore {
 public:
  // `who` prefixes every error message, e.g. "rank 3".
  TcpStore(const std::string& host, int port, bool serve, std::chrono::milliseconds timeout,
           std::string who);
  ~TcpStore();
  TcpStore(const TcpStore&) = delete;
  TcpStore& operator=(const TcpStore&) = delete;

  void set(const std::string& key, const std::vector<char>& value);
  // Waits (up to the timeout) until the key exists and returns its value.
  std::vector<char> get(const std::string& key);
  // Waits until every key exists; throws pylon::Error naming the missing keys after `timeout`.
  void wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout);
  void wait(const std::vector<std::string>& keys) { wait(keys, timeout_); }

  // This host's numeric address on the connection to the server: the interface that reaches
  // MASTER_ADDR, which the communicator then listens on.
  const std::string& local_address() const { return local_address_; }
  std::chrono::milliseconds timeout() const { return timeout_; }

 private:
  class Server;
  bool get_once(const std::string& key, std::vector<char>* value);
  std::string where() const;

  std::string host_, who_;
  int port_;
  std::chrono::milliseconds timeout_;
  std::unique_ptr<Server> server_;
  int fd_ = -1;
  std::string local_address_;
};

// Every rank must be told the same world size (ranks started by hand each read their own
// variables): rank 0 publishes its own, the others compare theirs with it and throw pylon::Error
// naming both. Before any communicator is built on the store: they assume one world size (Gloo's
// address exchange failed an internal check; NCCL would wait for ranks that never come).
void check_world_size(TcpStore& store, const DistEnv& env, const std::string& who);

}  // namespace pylon
