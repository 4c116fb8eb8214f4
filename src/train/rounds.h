// The round protocol of federated training (DESIGN.md "Federation"): after each step, whether a round is due (the
// schedule), what this group votes, the round agreed, issued, arrived and applied over the lane (federation/lane.h),
// and where a peer is lost during it, the round held again without the lost groups (train/recovery.h); a stop
// between rounds; the round a group stopped at, held first after a resume; a round in flight settled before a
// checkpoint; the audit of the global model. The step learns of a round only through RoundResult, so another lane
// (a site's, through a round server) plugs in here without touching the step or the trainer.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "federation/lane.h"
#include "federation/schedule.h"
#include "train/checkpoint.h"
#include "train/config.h"
#include "train/group_states.h"
#include "train/recovery.h"
#include "train/run_log.h"
#include "train/token_count.h"

namespace fedshard::train {

struct RoundResult {
  bool agreed = false;      // the groups agreed (a round, or a stop between rounds): `agreement` holds it
  bool aggregated = false;  // a round took place
  bool stop = false;        // every group agreed to stop after this step (preemption)
  federation::Agreement agreement;
  std::vector<int> group_ids;  // the groups that agreed, in the order of the agreement's per-group fields
};

class Rounds {
 public:
  // This group's own view at a step, what it votes besides the round's counters: its last step, and (time-based
  // rounds) an evaluation or checkpoint its steps made due.
  using Wants = std::function<federation::Vote(int64_t step)>;
  Rounds(const TrainConfig& cfg, federation::Schedule schedule, Recovery& recovery, RunLog& log, TokenCount& tokens,
         Wants wants);

  // The engine's lane, this rank's held groups (emulation) and where it stands: the groups' ids, this rank's group,
  // whether it is the job's first rank (which reports what every rank refuses). Again after the engine is rebuilt.
  void attach(federation::Lane& lane, GroupStates* held, std::vector<int> group_ids, int group, bool first_rank);

  // Before the first step, after the last: the lane takes the federation's global model, and leaves.
  void start() { lane_->start(); }
  void leave() { lane_->leave(); }

  const federation::Schedule& schedule() const { return schedule_; }
  bool timed() const { return schedule_.timed(); }
  int64_t syncs() const { return schedule_.syncs(); }
  int64_t steps_since_sync() const { return schedule_.steps_since_sync(); }
  void restore(int64_t step, int64_t steps_since_sync, int64_t syncs, double round_time) {
    schedule_.restore(step, steps_since_sync, syncs, round_time);
  }

  // In a step, before the group agrees: this group's step counted; whether its time is up (time-based rounds, on its
  // first rank's clock: `first`); its non-finite flag, where a round is due or may be (undefined where none).
  void count_step() { schedule_.count_step(); }
  bool time_up(bool first, double step_seconds) { return timed() && first && schedule_.time_up(step_seconds); }
  at::Tensor nonfinite_flag(int64_t step) const;
  bool due(int64_t step, bool time_up) const { return schedule_.due(step, time_up); }

  // After the group agreed on `step`: the round if due (recovered where a peer is lost), else a stop between rounds
  // (`stop`: the group agreed on a preemption signal), else the round in flight moved along.
  RoundResult after_step(int64_t step, bool time_up, bool nonfinite, bool stop);
  // The round this group stopped at without holding it (another group stopped between rounds): held first after
  // the resume.
  bool pending() const { return pending_; }
  void set_pending(bool pending) { pending_ = pending; }
  RoundResult hold_pending(int64_t step);
  // Before a checkpoint: a round in flight settled, its averaging arrived everywhere (or, lost, dropped everywhere),
  // so that a loss during the writing finds every rank with the same round.
  void settle(int64_t step);
  // Runs fn on the latest global model (evaluation under overlap, where no step ends with the groups equal).
  void with_global_model(const std::function<void()>& fn) { lane_->with_global_model(fn); }
  // Runs fn on the global model plus what error feedback still owes (eval.backlog).
  void with_backlog_model(const std::function<void()>& fn) { lane_->with_backlog_model(fn); }
  // federation.audit: this rank's part of the global model's checksum after the round at `step`.
  void audit(int64_t step);
  // What a checkpoint after `r`'s step records of the rounds: the schedule's counters and, where the groups met at
  // different steps (time-based rounds, a stop between rounds), each group's step as of the agreement (of the groups
  // still here: after a loss since, the checkpoint is written again), so each goes on from its own.
  void record(const RoundResult& r, TrainingState& st) const;

 private:
  // Finishes the round in flight, agrees, issues this one and (unless it may stay in flight) waits until its
  // averaging has arrived, applying nothing; false where no round was issued (another group stopped between rounds).
  bool begin(int64_t step, bool nonfinite, bool stop, RoundResult& r);
  void end(int64_t step, RoundResult& r);
  federation::Vote vote(int64_t step, bool nonfinite, bool stop) const;

  const TrainConfig& cfg_;
  federation::Schedule schedule_;
  Recovery& recovery_;
  RunLog& log_;
  TokenCount& tokens_;
  Wants wants_;
  federation::Lane* lane_ = nullptr;
  GroupStates* held_ = nullptr;
  std::vector<int> group_ids_;
  int group_ = 0;
  bool first_rank_ = false;
  bool pending_ = false;
};

}  // namespace fedshard::train
