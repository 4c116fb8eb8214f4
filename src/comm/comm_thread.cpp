#include "comm/comm_thread.h"

#include <future>

namespace fedshard::comm {

CommThread::CommThread() : thread_([this] { run(); }) {}

CommThread::~CommThread() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void CommThread::submit(std::function<void()> task) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    queue_.push_back(std::move(task));
  }
  cv_.notify_one();
}

void CommThread::drain() {
  std::promise<void> done;
  auto ran = done.get_future();
  submit([&done] { done.set_value(); });
  ran.wait();
}

void CommThread::run() {
  for (;;) {
    std::function<void()> task;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
      if (queue_.empty()) return;
      task = std::move(queue_.front());
      queue_.pop_front();
    }
    task();  // tasks report their own errors through their Work handle
  }
}

}  // namespace fedshard::comm
