#include "dist/collective_queue.h"

#include <utility>

namespace pylon {

CollectiveQueue::CollectiveQueue() : worker_([this] { run(); }) {}

CollectiveQueue::~CollectiveQueue() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  changed_.notify_all();
  worker_.join();
}

CollectiveQueue::Ticket CollectiveQueue::submit(std::function<void()> task) {
  std::lock_guard<std::mutex> lock(mutex_);
  tasks_.push_back(std::move(task));
  changed_.notify_all();
  return ++submitted_;
}

void CollectiveQueue::wait(Ticket t) {
  std::unique_lock<std::mutex> lock(mutex_);
  changed_.wait(lock, [&] { return done_ >= t || failure_; });
  if (failure_) std::rethrow_exception(failure_);
}

void CollectiveQueue::run() {
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
    changed_.wait(lock, [&] { return stopping_ || (!tasks_.empty() && !failure_); });
    if (stopping_) return;
    std::function<void()> task = std::move(tasks_.front());
    tasks_.pop_front();
    lock.unlock();
    std::exception_ptr error;
    try {
      task();
    } catch (...) {
      error = std::current_exception();
    }
    lock.lock();
    if (error) failure_ = error;
    else ++done_;
    changed_.notify_all();
  }
}

}  // namespace pylon
