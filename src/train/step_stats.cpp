#include "train/step_stats.h"

#include <chrono>

namespace fedshard::train {

void StepStats::Sums::add(const StepSample& s) {
  ++steps;
  seconds += s.seconds;
  tokens += s.tokens;
  for (int t = 0; t < comm::kNumTiers; ++t) bytes[t] += s.bytes[t];
}

std::array<double, comm::kNumTiers> StepStats::step_bytes(const comm::LedgerSnapshot& during,
                                                          const comm::LedgerSnapshot& now) {
  constexpr int fed = static_cast<int>(comm::Lane::Federation);
  std::array<double, comm::kNumTiers> sent{};
  for (comm::Tier t : comm::kTiers) {
    const int i = static_cast<int>(t);
    sent[i] = during.sent_bytes(t) - during.lane_sent[fed][i] + now.lane_sent[fed][i] - lane_accounted_[i];
    lane_accounted_[i] = now.lane_sent[fed][i];
  }
  return sent;
}

void StepStats::count_lane_from(const comm::LedgerSnapshot& now) {
  lane_accounted_ = now.lane_sent[static_cast<int>(comm::Lane::Federation)];
}

void StepStats::add(const StepSample& s) {
  for (int t = 0; t < comm::kNumTiers; ++t) total_bytes_[t] += s.bytes[t];
  ++stretch_steps_;
  if (s.profiled) return;
  if (stretch_steps_ <= kWarmupSteps)
    warming_.push_back(s);
  else
    timed_.add(s);
}

void StepStats::end_stretch() {
  if (stretch_steps_ < kMinStretch)
    for (const auto& s : warming_) timed_.add(s);
  warming_.clear();
  stretch_steps_ = 0;
}

std::array<double, comm::kNumTiers> StepStats::mean_bytes() const {
  std::array<double, comm::kNumTiers> b{};
  for (int t = 0; t < comm::kNumTiers; ++t) b[t] = timed_.steps > 0 ? timed_.bytes[t] / timed_.steps : 0;
  return b;
}

double measure_matmul_flops(at::Device device) {
  using Clock = std::chrono::steady_clock;
  const int64_t n = device.is_cpu() ? 512 : 4096;
  auto a = at::randn({n, n}, at::TensorOptions().device(device)), b = at::randn({n, n}, a.options());
  at::mm(a, b).sum().item<float>();  // warm-up; item() waits for the device
  const int reps = 8;
  const auto t0 = Clock::now();
  at::Tensor c;
  for (int i = 0; i < reps; ++i) c = at::mm(a, b);
  c.sum().item<float>();
  return 2.0 * n * n * n * reps / std::chrono::duration<double>(Clock::now() - t0).count();
}

}  // namespace fedshard::train
