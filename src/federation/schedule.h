// When the federation groups aggregate, what, and with what weight (DESIGN.md "Federation"). Every K steps
// and at the last step; each group weighs in with the tokens it processed since the previous round of the
// same units, so groups of different sizes count in proportion to their data.
//
// federation.overlap: `none` finishes each round where it starts; `delayed` leaves it in flight until the
// next boundary K steps later; `streaming:F` splits the units into F fragments (unit u in fragment u mod F,
// Streaming DiLoCo's strided pattern) and starts one fragment's round every K/F steps, in flight until the
// next such boundary, so every fragment is still averaged every K steps. The last step's round covers every
// unit and finishes at once, so training ends on one global model. Checkpoints save the counters.
//
// federation.round = seconds:T: a group closes its round after the step that brings the wall time of its
// steps since the round nearest to T (so a group at half speed takes half the steps), on the clock of its
// first rank. Only the steps count: not the round's own communication, evaluations or checkpoints.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

namespace fedshard::federation {

struct Overlap {
  std::string mode = "none";  // none | delayed | streaming
  int64_t fragments = 1;
};
// "none", "delayed", "streaming:F"; throws fedshard::Error on anything else.
Overlap parse_overlap(const std::string& spec);

// federation.round: "steps" (every parallel.sync_every steps), "steps:K" (K must agree with sync_every) or
// "seconds:T"; returns T, 0 for step rounds. Throws fedshard::Error on anything else.
double parse_round_seconds(const std::string& spec, int64_t sync_every);

// federation.clock, what time-based rounds measure a step with: "wall" (its wall time, on the clock of the
// group's first rank) or "emulated:S" (S seconds times the group's train.slow factor, so which step closes a
// round does not depend on the machine: tests, and resumes compared number for number). Returns S, 0 for
// wall. Throws fedshard::Error on anything else.
double parse_clock(const std::string& spec);

class Schedule {
 public:
  // tokens_per_step: what this rank's group trains on per step (its ranks x batch x sequence length).
  // round_seconds: T of time-based rounds, 0 for rounds every sync_every steps.
  Schedule(int64_t sync_every, int64_t last_step, int64_t tokens_per_step, Overlap overlap, size_t units,
           double round_seconds = 0);

  void count_step() {
    for (auto& s : steps_since_) ++s;
  }
  bool timed() const { return round_seconds_ > 0; }
  double round_seconds() const { return round_seconds_; }
  // Time-based rounds: whether the round should close after the step just taken, which took step_seconds.
  bool time_up(double step_seconds) {
    steps_seconds_ += step_seconds;
    return steps_seconds_ + step_seconds / 2 >= round_seconds_;
  }
  // Whether a round starts after `step`; time_up: the group agreed its time is up (time-based rounds).
  bool due(int64_t step, bool time_up = false) const {
    return step == last_step_ || (timed() ? time_up : step % interval() == 0);
  }
  // The units of the round starting after `step` (due(step)).
  std::vector<size_t> units(int64_t step) const;
  // Whether a round may stay in flight (it finishes at the next due step at the latest); not the last.
  bool leave_in_flight(bool last) const { return overlap_.mode != "none" && !last; }
  // This group's weight for the round starting after `step`: tokens since those units were last averaged.
  double weight(int64_t step) const;
  void count_sync(int64_t step);

  int64_t steps_since_sync() const { return *std::max_element(steps_since_.begin(), steps_since_.end()); }
  int64_t syncs() const { return syncs_; }
  // Time-based rounds: the time of this round's steps so far (saved by checkpoints taken between rounds).
  double round_time() const { return steps_seconds_; }
  // From a checkpoint at `step`; fragments' counters follow from the step (their rounds are periodic).
  void restore(int64_t step, int64_t steps_since_sync, int64_t syncs, double round_time = 0);

 private:
  int64_t interval() const { return sync_every_ / overlap_.fragments; }
  // Fragment of the round after `step`, or -1 for all units.
  int64_t fragment(int64_t step) const;

  int64_t sync_every_;
  int64_t last_step_;
  int64_t tokens_per_step_;
  Overlap overlap_;
  size_t units_;
  std::vector<int64_t> steps_since_;  // per fragment
  int64_t syncs_ = 0;
  double round_seconds_;
  double steps_seconds_ = 0;  // time of this round's steps so far
};

}  // namespace fedshard::federation
