// train.profile_steps = "A:B": LibTorch's profiler over steps A..B on every rank, to see where a step's time
// goes (the operators on the CPU, the kernels on a GPU). Writes RUN/profile/rank<R>.txt, a table of the ops by
// self time with their share of the profiled steps' wall time, and RUN/profile/trace-rank<R>.json (a Chrome
// trace for chrome://tracing or Perfetto) where the LibTorch was built with Kineto.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

#include <c10/core/Device.h>

namespace fedshard::train {

struct StepRange {
  int64_t first = 0;  // 0: profiling off
  int64_t last = 0;
};

// "A:B" with 1 <= A <= B, or "" (off). Throws fedshard::Error naming the key on anything else.
StepRange parse_profile_steps(const std::string& text);

class StepProfiler {
 public:
  StepProfiler(StepRange range, std::string out_dir, int rank, c10::Device device);
  ~StepProfiler();
  StepProfiler(const StepProfiler&) = delete;
  StepProfiler& operator=(const StepProfiler&) = delete;

  void before_step(int64_t step);
  // Whether `step` was profiled (its time is the profiler's too, so throughput figures leave it out).
  bool after_step(int64_t step);
  // Writes what was recorded when the run ends inside the range (a time-based round, a preemption).
  void finish();

 private:
  void stop();

  StepRange range_;
  std::string out_dir_;
  int rank_;
  c10::Device device_;
  bool active_ = false;
  bool tried_ = false;
  int64_t steps_ = 0;
  std::chrono::steady_clock::time_point start_;
};

}  // namespace fedshard::train
