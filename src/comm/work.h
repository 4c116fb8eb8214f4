// Handle of an asynchronous collective. wait() blocks until the collective has completed (and, under link
// emulation, until its modelled network time has passed), rethrows its error, and counts the time the
// caller spent blocked as exposed communication. A device backend may override wait() to order the caller's
// stream after the collective instead of blocking the host (NcclCommunicator).
#pragma once

#include <chrono>
#include <condition_variable>
#include <exception>
#include <memory>
#include <mutex>
#include <string>

namespace fedshard::comm {

class Work {
 public:
  using Clock = std::chrono::steady_clock;
  explicit Work(std::string what) : what_(std::move(what)) {}
  virtual ~Work() = default;

  virtual void wait();
  bool completed() const;
  const std::string& what() const { return what_; }

  // Called by the executing side.
  void finish(Clock::time_point release_at = Clock::time_point{});
  void fail(std::exception_ptr e);

  static std::shared_ptr<Work> done(std::string what);

 private:
  std::string what_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool finished_ = false;
  bool waited_ = false;
  std::exception_ptr error_;
  Clock::time_point release_at_{};
};

using WorkHandle = std::shared_ptr<Work>;

}  // namespace fedshard::comm
