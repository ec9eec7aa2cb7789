// One worker thread that runs a rank's collectives in the order they were submitted, so the
// compute thread can go on while a unit is gathered (prefetch) or its gradient reduce-scattered.
// Collectives of one communicator must not run concurrently: while tasks are queued or running,
// only the queue may use it; drain() before calling the communicator from another thread.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>

namespace pylon {

class CollectiveQueue {
 public:
  using Ticket = int64_t;  // submission number, from 1; 0 = nothing

  CollectiveQueue();
  // Runs nothing more than the task in flight, then joins the worker.
  ~CollectiveQueue();
  CollectiveQueue(const CollectiveQueue&) = delete;
  CollectiveQueue& operator=(const CollectiveQueue&) = delete;

  Ticket submit(std::function<void()> task);
  // Blocks until task `t` and every task before it have run; rethrows the first failure among
  // them (later waits rethrow it too: after a failure the queue runs no more tasks).
  void wait(Ticket t);
  void drain() { wait(submitted_); }

 private:
  void run();

  std::mutex mutex_;
  std::condition_variable changed_;
  std::deque<std::function<void()>> tasks_;
  Ticket submitted_ = 0, done_ = 0;
  std::exception_ptr failure_;
  bool stopping_ = false;
  std::thread worker_;  // last: starts once the members above exist
};

}  // namespace pylon
