#include "comm/work.h"

#include <ATen/record_function.h>

#include <thread>

#include "comm/ledger.h"
#include "util/error.h"

namespace fedshard::comm {

void Work::wait() {
  // train.profile_steps shows the host's blocked time as this op (it is no LibTorch op of its own).
  RECORD_FUNCTION("fedshard::comm_wait", std::vector<c10::IValue>());
  const auto start = Clock::now();
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [&] { return finished_; });
  if (error_) {
    auto e = error_;
    lock.unlock();
    try {
      std::rethrow_exception(e);
    } catch (const PeerLost& ex) {
      throw PeerLost(cat(what_, " failed: ", ex.what()), ex.revoked());
    } catch (const std::exception& ex) {
      throw std::runtime_error(cat(what_, " failed: ", ex.what()));
    }
  }
  const auto release = release_at_;
  const bool first = !waited_;
  waited_ = true;
  lock.unlock();
  if (release > Clock::now()) std::this_thread::sleep_until(release);
  if (first) Ledger::instance().add_exposed_wait(std::chrono::duration<double>(Clock::now() - start).count());
}

bool Work::completed() const {
  std::lock_guard<std::mutex> lock(mu_);
  return finished_ && Clock::now() >= release_at_;
}

void Work::finish(Clock::time_point release_at) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    finished_ = true;
    release_at_ = release_at;
  }
  cv_.notify_all();
}

void Work::fail(std::exception_ptr e) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    finished_ = true;
    error_ = std::move(e);
  }
  cv_.notify_all();
}

std::shared_ptr<Work> Work::done(std::string what) {
  auto w = std::make_shared<Work>(std::move(what));
  w->finish();
  return w;
}

}  // namespace fedshard::comm
