// The run's token count (the metrics' "tokens"): the tokens trained before this stretch of the run (a launch, or
// the world since its last membership change), then the world's tokens per step; under time-based rounds, whose
// groups take different numbers of steps, all groups' as of the last round plus this group's since.
#pragma once

#include <cstdint>

namespace fedshard::train {

class TokenCount {
 public:
  explicit TokenCount(bool timed_rounds) : timed_(timed_rounds) {}
  // Tokens per step of the (virtual) world and of this rank's group (every virtual rank of its held groups).
  void set_rates(int64_t world_per_step, int64_t group_per_step) {
    world_per_step_ = world_per_step;
    group_per_step_ = group_per_step;
  }
  int64_t world_per_step() const { return world_per_step_; }
  int64_t group_per_step() const { return group_per_step_; }

  // The count goes on from step + 1, with `tokens` trained through `step`.
  void restart(int64_t step, int64_t tokens) {
    start_step_ = step + 1;
    before_start_ = agreed_ = tokens;
    step_agreed_ = step;
  }
  int64_t start_step() const { return start_step_; }
  // Time-based rounds: the round after `step` summed every group's tokens since the stretch started.
  void agreed(int64_t step, double launch_tokens) {
    agreed_ = before_start_ + static_cast<int64_t>(launch_tokens);
    step_agreed_ = step;
  }
  // What this group trained on since the stretch started, through `step` (its vote at a round).
  double group_tokens(int64_t step) const { return static_cast<double>((step - start_step_ + 1) * group_per_step_); }
  // The run's tokens through `step`.
  int64_t through(int64_t step) const {
    if (timed_) return agreed_ + (step - step_agreed_) * group_per_step_;
    return before_start_ + (step - start_step_ + 1) * world_per_step_;
  }

 private:
  bool timed_;
  int64_t world_per_step_ = 0, group_per_step_ = 0;
  int64_t start_step_ = 1;
  int64_t before_start_ = 0;
  int64_t agreed_ = 0, step_agreed_ = 0;
};

}  // namespace fedshard::train
