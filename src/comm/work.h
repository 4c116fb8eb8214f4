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
#include <stdexcept>
#include <string>

namespace fedshard::comm {

// A collective failed because a peer process died, or because a survivor revoked the communicator after
// seeing such a death. With an MPI that has ULFM the survivors can go on without the lost ranks
// (comm/survivors.h); without it the job ends.
class PeerLost : public std::runtime_error {
 public:
  explicit PeerLost(const std::string& what, bool revoked = false) : std::runtime_error(what), revoked_(revoked) {}
  // A survivor revoked the communicator: none of its members need have died.
  bool revoked() const { return revoked_; }

 private:
  bool revoked_;
};

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
