// What a run's steps measured, summed one way (torchtitan's MetricsProcessor): a step's tokens per second and MFU,
// the warm-up rule (which steps a mean leaves out), the mean step time (the failure watch's bound), the bytes each
// tier carried. The trainer's step lines, progress line and summary and `fedshard report`'s table all read it.
#pragma once

#include <ATen/ATen.h>

#include <array>
#include <cstdint>
#include <vector>

#include "comm/ledger.h"
#include "comm/tier.h"

namespace fedshard::train {

struct StepSample {
  int64_t step = 0;
  double seconds = 0;
  double tokens = 0;  // the (virtual) world's tokens of the step: throughput is the real ranks'
  std::array<double, comm::kNumTiers> bytes{};  // sent for the step, per tier
  bool profiled = false;  // train.profile_steps: the profiler's overhead is in `seconds`
};

class StepStats {
 public:
  // The warm-up rule: the first kWarmupSteps steps of a stretch (a launch, a resume, the world after a membership
  // change: one-time allocation, autotuning, caches filling) are left out of the means where the stretch has at
  // least kMinStretch steps; a profiled step always is.
  static constexpr int64_t kWarmupSteps = 2, kMinStretch = 5;

  static double tok_per_s(double tokens, double seconds) { return tokens / seconds; }
  // Model FLOPs utilization of one rank: 3x the forward's FLOPs (forward and backward) at its share of the tokens.
  static double mfu(double rank_tok_per_s, double forward_flops_per_token, double peak_flops) {
    return 3.0 * forward_flops_per_token * rank_tok_per_s / peak_flops;
  }

  // The bytes this rank sent for a step, per tier: what its collectives sent during it (`during`, less what the step
  // excludes), the federation lane's counted as that lane completed them since the previous step's account (its
  // rounds complete when they do, also between steps, so no round's bytes fall between two steps). `now`: the
  // ledger at the end of the step.
  std::array<double, comm::kNumTiers> step_bytes(const comm::LedgerSnapshot& during, const comm::LedgerSnapshot& now);
  // Bytes the federation lane sent before the first step counted.
  void count_lane_from(const comm::LedgerSnapshot& now);

  void add(const StepSample& s);
  // Ends the stretch of steps going on (at a resume, a membership change, the run's end): where it was short, its
  // warm-up steps are timed after all.
  void end_stretch();

  // Over the timed steps (of a stretch still going, those after its warm-up).
  int64_t timed_steps() const { return timed_.steps; }
  double tok_per_s() const { return timed_.tokens / timed_.seconds; }
  double seconds_per_token() const { return timed_.tokens > 0 ? timed_.seconds / timed_.tokens : 0; }
  double mean_step_seconds() const { return timed_.steps > 0 ? timed_.seconds / timed_.steps : 0; }
  std::array<double, comm::kNumTiers> mean_bytes() const;
  // Over every step, warm-up included.
  const std::array<double, comm::kNumTiers>& total_bytes() const { return total_bytes_; }

 private:
  struct Sums {
    int64_t steps = 0;
    double seconds = 0, tokens = 0;
    std::array<double, comm::kNumTiers> bytes{};
    void add(const StepSample& s);
  };
  Sums timed_;
  std::vector<StepSample> warming_;  // the current stretch's warm-up steps, timed if it ends short
  int64_t stretch_steps_ = 0;
  std::array<double, comm::kNumTiers> total_bytes_{};
  std::array<double, comm::kNumTiers> lane_accounted_{};  // the federation lane's bytes accounted to steps so far
};

// Peak float32 matmul rate of this rank with its thread count: the denominator of MFU on CPUs, which have no
// datasheet number that a small GEMM reaches.
double measure_matmul_flops(at::Device device);

}  // namespace fedshard::train
