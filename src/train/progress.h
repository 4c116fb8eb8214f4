// The live one-line progress display: redrawn in place on a terminal, a plain line every ~5% otherwise
// (logs of batch jobs stay short).
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

namespace fedshard::train {

class Progress {
 public:
  explicit Progress(int64_t total_steps);
  void update(int64_t step, double loss, double lr, double tok_per_s, const std::string& extra);
  void finish();

 private:
  int64_t total_;
  bool tty_;
  std::chrono::steady_clock::time_point start_;
  int64_t first_step_ = -1;
  std::chrono::steady_clock::time_point first_time_;
};

}  // namespace fedshard::train
