// When the federation groups aggregate and with what weight (DESIGN.md "Federation"): every K steps and at
// the last step; each group weighs in with the tokens it processed since the previous round, so groups of
// different sizes count in proportion to their data. Checkpoints save and restore its counters.
#pragma once

#include <cstdint>

namespace fedshard::federation {

class Schedule {
 public:
  // tokens_per_step: what this rank's group trains on per step (its ranks x batch x sequence length).
  Schedule(int64_t sync_every, int64_t last_step, int64_t tokens_per_step)
      : sync_every_(sync_every), last_step_(last_step), tokens_per_step_(tokens_per_step) {}

  void count_step() { ++steps_since_sync_; }
  bool due(int64_t step) const { return step % sync_every_ == 0 || step == last_step_; }
  double weight() const { return static_cast<double>(steps_since_sync_ * tokens_per_step_); }
  void count_sync() {
    steps_since_sync_ = 0;
    ++syncs_;
  }

  int64_t steps_since_sync() const { return steps_since_sync_; }
  int64_t syncs() const { return syncs_; }
  void restore(int64_t steps_since_sync, int64_t syncs) {
    steps_since_sync_ = steps_since_sync;
    syncs_ = syncs;
  }

 private:
  int64_t sync_every_;
  int64_t last_step_;
  int64_t tokens_per_step_;
  int64_t steps_since_sync_ = 0;
  int64_t syncs_ = 0;
};

}  // namespace fedshard::federation
