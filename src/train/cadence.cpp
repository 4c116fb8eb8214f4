#include "train/cadence.h"

#include <algorithm>

namespace fedshard::train {

Cadence::Cadence(const TrainConfig& cfg, bool federated, bool checkpoints)
    : steps_(cfg.steps), eval_every_(cfg.eval_every), checkpoint_every_(cfg.checkpoint_every),
      eval_after_sync_(cfg.eval_after_sync), federated_(federated), checkpoints_(checkpoints),
      timed_(federated && timed_rounds(cfg)) {}

bool Cadence::timed_rounds(const TrainConfig& cfg) { return cfg.round.rfind("seconds:", 0) == 0; }

Decision Cadence::decide(const StepOutcome& s, const Carried& c) const {
  Decision d;
  d.carried = c;
  if (timed_) {
    // The groups' steps differ: what is due is what the round agreed, and only a round decides.
    d.last = s.aggregated && s.any_last;
    d.evaluate = s.aggregated && (s.any_evaluate || d.last || eval_after_sync_);
    d.checkpoint = s.stop || (s.aggregated && (s.any_checkpoint || d.last));
    if (!s.aggregated && !s.stop) {
      d.carried.evaluation_wanted = wants_evaluation(s.step, c);
      d.carried.checkpoint_wanted = wants_checkpoint(s.step, c);
    }
  } else {
    d.last = last_step(s.step);
    // Under federation only a round makes the global model: a due evaluation waits for the next one.
    const bool due = c.evaluation || d.last || every(eval_every_, s.step) || (s.aggregated && eval_after_sync_);
    d.evaluate = due && (!federated_ || s.aggregated);
    d.carried.evaluation = due && !d.evaluate;
    d.checkpoint = s.stop || every(checkpoint_every_, s.step) || d.last;
  }
  d.checkpoint = d.checkpoint && checkpoints_;
  if (d.evaluate) d.carried.evaluation_wanted = false;
  if (d.checkpoint) d.carried.checkpoint_wanted = false;
  return d;
}

bool Cadence::finished(int64_t step, const std::vector<int64_t>& group_steps,
                       const std::vector<bool>& pending_rounds) const {
  if (std::find(pending_rounds.begin(), pending_rounds.end(), true) != pending_rounds.end()) return false;
  if (group_steps.empty()) return step >= steps_;
  const auto [lo, hi] = std::minmax_element(group_steps.begin(), group_steps.end());
  return (timed_ ? *hi : *lo) >= steps_;
}

}  // namespace fedshard::train
