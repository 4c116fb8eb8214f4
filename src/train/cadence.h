// When the job evaluates, checkpoints and ends: the one answer to each "is it due?" (torchtitan's
// CheckpointManager._should_save and Validator.should_validate, llm.c's last_step), a pure function of the
// config, the step and what the groups agreed at the round after it. What waits for a later step (an evaluation
// for the next round; under time-based rounds, what a group's steps made due until the groups next agree) is
// carried from one decision to the next by the caller.
#pragma once

#include <cstdint>
#include <vector>

#include "federation/lane.h"
#include "train/config.h"

namespace fedshard::train {

// What a step ended with, as far as the cadence reads it.
struct StepOutcome {
  int64_t step = 0;
  bool aggregated = false;  // a round took place after the step
  bool stop = false;        // every rank agreed to stop after it (preemption)
  // What the groups agreed at that round (federation::Agreement::any): some group's last step, an evaluation or a
  // checkpoint some group asked for.
  bool any_last = false, any_evaluate = false, any_checkpoint = false;
};

// What is due and not done yet, carried from one step's decision to the next.
struct Carried {
  bool evaluation = false;  // due, waiting for a round to make the global model (step rounds)
  // Time-based rounds: what this group's steps made due since the groups last agreed, voted at the next round.
  bool evaluation_wanted = false, checkpoint_wanted = false;
  bool operator==(const Carried& o) const {
    return evaluation == o.evaluation && evaluation_wanted == o.evaluation_wanted &&
           checkpoint_wanted == o.checkpoint_wanted;
  }
};

struct Decision {
  bool last = false;        // the job ends after this step
  bool evaluate = false;    // evaluate the global model now
  bool checkpoint = false;  // write a checkpoint now
  Carried carried;          // for the next step's decision
};

class Cadence {
 public:
  // federated: fl-* (only a round makes the global model an evaluation reads); checkpoints: the run keeps
  // checkpoints (emulated layouts keep none).
  Cadence(const TrainConfig& cfg, bool federated, bool checkpoints);

  // federation.round = seconds:T: rounds close by time, groups take different numbers of steps.
  static bool timed_rounds(const TrainConfig& cfg);
  bool timed() const { return timed_; }
  int64_t steps() const { return steps_; }

  // A group's own view at its step, what it votes at a round: its last step; an evaluation or a checkpoint, by
  // eval.every and checkpoint.every or carried from its steps since the last round.
  bool last_step(int64_t step) const { return step == steps_; }
  bool wants_evaluation(int64_t step, const Carried& c) const { return c.evaluation_wanted || every(eval_every_, step); }
  bool wants_checkpoint(int64_t step, const Carried& c) const { return c.checkpoint_wanted || every(checkpoint_every_, step); }
  // Those three as a round's vote carries them.
  federation::Vote vote(int64_t step, const Carried& c) const {
    federation::Vote v;
    v.last = last_step(step);
    v.checkpoint = wants_checkpoint(step, c);
    v.evaluate = wants_evaluation(step, c);
    return v;
  }

  // What follows step s.step, given what earlier steps left carried.
  Decision decide(const StepOutcome& s, const Carried& c) const;

  // Whether a checkpoint ends the run (resuming it would train nothing): step rounds end when every group has
  // trained train.steps, time-based ones at the round where the first group reaches it; a round that some group
  // stopped at without holding it is still to come. group_steps: each group's step (empty: all at `step`).
  bool finished(int64_t step, const std::vector<int64_t>& group_steps, const std::vector<bool>& pending_rounds) const;

 private:
  static bool every(int64_t period, int64_t step) { return period > 0 && step % period == 0; }

  int64_t steps_, eval_every_, checkpoint_every_;
  bool eval_after_sync_, federated_, checkpoints_, timed_;
};

}  // namespace fedshard::train
