// Linear warmup to the peak, then cosine decay to a floor at the last step (the paper's schedule:
// 10% warmup then cosine).
#pragma once

#include <cmath>
#include <cstdint>

namespace fedshard::train {

struct LrSchedule {
  double peak = 3e-4;
  double floor = 3e-5;
  int64_t warmup = 0;
  int64_t total = 1;

  // step counts from 1 (the first optimizer step).
  double at(int64_t step) const {
    if (warmup > 0 && step <= warmup) return peak * static_cast<double>(step) / static_cast<double>(warmup);
    if (total <= warmup) return peak;
    const double progress = static_cast<double>(step - warmup) / static_cast<double>(total - warmup);
    return floor + (peak - floor) * 0.5 * (1.0 + std::cos(M_PI * std::min(1.0, progress)));
  }
};

}  // namespace fedshard::train
