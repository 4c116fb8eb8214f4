// In-job recovery (docs/robustness.md; ULFM: comm/survivors.h), asked once where work may lose a peer (torchft's
// Manager): the one retry policy (work until every rank agrees it succeeded; where a peer was lost, the change applied
// and the work again over the kept groups), a loss in a group's own collectives, the step's group agreement kept for
// a recovery, both sides of the rejoin protocol (the kept ranks' rejoin and a replacement's join), and the failure
// watch. Who is in the job is train/membership.h's; what a change does to the run, the trainer's (Rebuild). In a job
// that is not recovered in the job, every piece of work just runs.
#pragma once

#include <ATen/ATen.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <vector>

#include "comm/topology.h"
#include "train/engine.h"
#include "train/join_plan.h"
#include "train/membership.h"
#include "train/run_log.h"
#include "train/setup.h"
#include "util/faults.h"

namespace fedshard::train {

class Recovery {
 public:
  // Where the run is at a step, as a membership change needs it.
  struct Point {
    int64_t syncs = 0;           // rounds held through the step
    std::vector<int> group_ids;  // of the groups training
    int64_t round_step = 0;      // the step of the last round (the step itself without rounds)
    int64_t round_tokens = 0;    // the run's tokens through round_step
    int64_t tokens = 0;          // the run's tokens through the step
  };
  // The trainer's side of a membership change.
  class Rebuild {
   public:
    virtual ~Rebuild() = default;
    virtual Engine& engine() = 0;
    virtual Point point(int64_t step) const = 0;
    // The job goes on over `layout`'s groups (`group_ids`; the membership's base communicator) from the step after
    // `step`, with `tokens` trained through it: the engine rebuilt over them, this rank's state handed over, the data
    // dealt over them. Nothing is read from disk and no process restarts.
    virtual void rebuild(const comm::Layout& layout, std::vector<int> group_ids, int64_t step, int64_t tokens) = 0;
  };

  // `setup`: the run's (recovers_in_job reads it as the job is now); built before the engine, whose communicators
  // the membership's base communicator spans.
  Recovery(const TrainSetup& setup, const Faults& faults, RunLog& log, Rebuild& run);
  Membership& membership() { return membership_; }
  bool recoverable() const { return recovers_in_job(setup_); }

  // The failure watch (comm/failure_watch.h) on the membership's base communicator, after the engine is (re)built;
  // told of progress and of how long a recovery may take.
  void watch();
  void progress(double recovery_seconds);

  // The one retry policy: `work` (collectives) until every rank agrees (`how`) that it succeeded everywhere; where a
  // peer was lost during it, `on_loss`, then the change applied, then `work` again over the kept groups. `during`
  // names the work in group_lost lines ("round", "checkpoint", ...).
  void until_done(int64_t step, const char* during, Agreement how, const std::function<void()>& work,
                  const std::function<void()>& on_loss = {});
  // `work` once: false where a peer was lost during it (on_loss, then the change applied).
  bool attempt(int64_t step, const char* during, Agreement how, const std::function<void()>& work,
               const std::function<void()>& on_loss = {});
  // `work`: a step and what follows it. A loss outside an agreement (in a group's own collectives) is agreed on at
  // the kept groups' next agreement, applied, and ends this rank with an Error (it leaves with its group before that:
  // LeftJob): a kept rank cannot take its step again (its optimizer may have stepped).
  void outside_agreement(int64_t step, const std::function<void()>& work);

  // The step's group agreement: a mean all-reduce of `flags` over `group`, kept in a recoverable job. A kept peer
  // that has finished it may go on to the step's first agreement across groups (a round, an evaluation, a checkpoint,
  // the summary), see a loss there and revoke every communicator it holds, this group's among them, before this
  // rank has its result (revoked, no member lost). This rank then joins that recovery, after which every kept rank
  // agrees once more over its rebuilt group, and `flags` holds that agreement. A member of this group lost is a loss
  // in the group's own step.
  void agree_in_group(int64_t step, at::Tensor flags, comm::Communicator& group);

  // After the round at `step`, federation.rejoin_after rounds after a loss: grows the job by replacements for every
  // rank of the lost groups, rebuilds the run over it, and sends every replacement the state of the rank at its
  // position in the first group (the global model, which every group holds after the round, that rank's inner and
  // outer optimizer state); a group_joined line. Where the replacements cannot start, says so (rejoin_failed) and
  // goes on as before; where a rank is lost during the transfer, every replacement leaves and the kept ranks recover
  // from the loss, so the lost groups rejoin later. `peak_flops`: what the replacements take for MFU.
  void rejoin_if_due(int64_t step, double peak_flops);
  // A replacement's side: receives its state from the rank at its position in the first group; returns the bytes
  // received. Where a rank is lost meanwhile, this process ends as a lost one.
  int64_t join(const JoinPlan& plan);
  // federation.audit after a rejoin: this rank's whole state's checksum and the bytes of state it sent or received.
  void audit_join(int64_t step, int64_t state_bytes);

 private:
  using Clock = std::chrono::steady_clock;
  Membership::Position position(int64_t step, const char* during) const;
  // apply_loss, and for another loss meanwhile, that change too (both losses in one group_lost line).
  void apply_surviving(int64_t step, MembershipChange change, Clock::time_point t0);
  // A loss: the run rebuilt over the kept groups from the last round (the lost groups' steps since never reached the
  // global model), a group_lost line.
  void apply_loss(int64_t step, const MembershipChange& change, Clock::time_point t0);
  void rejoin(int64_t step, double peak_flops);

  const TrainSetup& setup_;
  const Faults& faults_;
  RunLog& log_;
  Rebuild& run_;
  Membership membership_;
  at::Tensor group_sent_;    // in a recoverable job: what this rank put into its group's agreement of the step
  at::Tensor group_agreed_;  // that agreement's result, as agreed again after the last recovery
};

}  // namespace fedshard::train
