// One thread per process that executes collectives in submission order. Every rank submits the same
// sequence of collectives, so a single FIFO keeps the order consistent across communicators (no deadlock),
// and the training thread computes while a collective is in flight.
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>

namespace fedshard::comm {

class CommThread {
 public:
  CommThread();
  ~CommThread();  // drains the queue, then joins
  CommThread(const CommThread&) = delete;
  CommThread& operator=(const CommThread&) = delete;

  void submit(std::function<void()> task);
  // Returns once every task submitted before it has run (tasks run in order).
  void drain();

 private:
  void run();
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> queue_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace fedshard::comm
