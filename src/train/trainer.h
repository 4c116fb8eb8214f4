// The training loop (DESIGN.md): one optimizer step per iteration on every rank: read this rank's windows,
// forward/backward through the sharded model, clip by the global norm, AdamW on the local shard, the round after
// it under federation, then what the cadence says is due (evaluation, checkpoint, the end). Its parts: the
// start-up (train/setup.h), when things are due (train/cadence.h), who trains (train/membership.h), what the run
// writes (train/run_log.h), a rank's state (train/engine.h).
#pragma once

#include <array>
#include <chrono>
#include <memory>
#include <optional>
#include <vector>

#include "comm/topology.h"
#include "data/window_sampler.h"
#include "federation/schedule.h"
#include "train/cadence.h"
#include "train/engine.h"
#include "train/group_states.h"
#include "train/lr_schedule.h"
#include "train/membership.h"
#include "train/run_log.h"
#include "train/setup.h"
#include "train/step_profiler.h"
#include "train/stop_notice.h"
#include "util/faults.h"

namespace fedshard::train {

struct TrainSummary {
  int64_t steps = 0;
  double final_val_loss = 0;
  double final_val_ppl = 0;
  double unigram_val_ppl = 0;
  double tok_per_s = 0;
  bool preempted = false;  // stopped by a signal after writing a checkpoint; exit kPreemptedExit
  bool left = false;       // this rank's group lost a rank and left the job, which went on without it
  bool reporter = false;   // rank 0 of the ranks that trained to the end (not launch rank 0 after a lost group)
};

// The run's token count (the metrics' "tokens"): the tokens trained before this stretch of the run (a launch, or
// the world since its last membership change), then the world's tokens per step; under time-based rounds, whose
// groups take different numbers of steps, all groups' as of the last round plus this group's since.
struct TokenCount {
  int64_t start_step = 1;    // the stretch's first step
  int64_t before_start = 0;  // trained before it
  int64_t agreed = 0, step_agreed = 0;  // time-based rounds: all groups' through the last round, at this group's step
  // The count goes on from step + 1, with `tokens` trained through `step`.
  void restart(int64_t step, int64_t tokens) {
    start_step = step + 1;
    before_start = agreed = tokens;
    step_agreed = step;
  }
};

class Trainer {
 public:
  // Collective: builds the engine (communicators, sharded model, ...). `faults`: the robustness tests' plan.
  explicit Trainer(TrainSetup setup, const Faults& faults = Faults::none());
  TrainSummary run();

 private:
  struct StepResult;
  // Constructor parts: this rank's threads and device; what parallelize() gets; the federation schedule and the
  // emulated clock; where the data comes from; the resumed or joined state; the run's files.
  at::Device place_rank();
  EngineSpec engine_spec(at::Device device) const;
  void make_rounds();
  void make_sampler();
  void resume(const CheckpointMeta& meta);
  void open_run_files();
  nlohmann::json resolved_config() const;

  // One step: forward and backward, the optimizer, the group's agreement, the round after it.
  StepResult train_step(int64_t step);
  // Forward and backward over every micro-batch this rank plays for held group j (its virtual ranks x
  // train.grad_accum), gradients reduced once; returns the mean loss (a device scalar).
  at::Tensor forward_backward(int64_t step, size_t j);
  // The group's one all-reduce after a step: each held group's loss, the stop signal, "time is up" under
  // time-based rounds, a non-finite slice under federation.
  struct GroupAgreement {
    std::vector<double> losses;
    bool stop = false, time_up = false, nonfinite = false;
  };
  GroupAgreement agree_in_group(int64_t step, at::Tensor losses, double step_seconds);
  // After a recovery: the step's group agreement once more, over the rebuilt group (agree_in_group says why).
  void agree_in_group_again();
  // Under federation, after the group agreed: the round if due, else a stop between rounds, else progress.
  void after_step(int64_t step, const GroupAgreement& g, StepResult& r);
  void account_bytes(const comm::LedgerSnapshot& start, const comm::LedgerSnapshot& excluded, StepResult& r);

  // This group's vote at `step` (a round's, or a stop's between rounds).
  federation::Vote vote(int64_t step, bool nonfinite) const;
  // The round after `step`: finishes the one in flight, agrees, issues this one and (unless it may stay in flight)
  // waits until its averaging has arrived, applying nothing; false where no round was issued (another group
  // stopped between rounds). end_round applies it. Set r's round, stop and aggregated.
  bool begin_round(int64_t step, bool nonfinite, StepResult& r);
  void end_round(int64_t step, StepResult& r);
  void federate(int64_t step, bool nonfinite, StepResult& r);  // both, no recovery (a round held after a resume)
  // The round, and where ranks are lost before it is applied: the round again, without the lost groups.
  void federate_surviving(int64_t step, bool nonfinite, StepResult& r);

  // What follows a step (or, after a resume, the round this group stopped at): its line, the cadence's evaluation,
  // checkpoint, stop or end. `replayed`: that step was trained and logged before the checkpoint.
  enum class Next { Continue, Stop, End };
  Next conclude(const StepResult& r, bool replayed);
  void log_step(const StepResult& r);
  void save(const StepResult& r);  // a checkpoint after r's step (collective over the world)
  void evaluate_global(int64_t step);
  void evaluate_group(int64_t step);  // this group's own model, before the round (eval.group_model)
  TrainSummary finish(int64_t last_step, double wall_s, const comm::LedgerSnapshot& comm_total);
  nlohmann::json link_summary() const;  // null without link emulation

  // In-job recovery (train/membership.h): `work`, and where a peer is lost during it, the change applied; true
  // then (the caller does its part again, or says why it cannot).
  // `during` names the work in group_lost lines ("round", "checkpoint", ...).
  bool recovering(int64_t step, const char* during, Agreement how, const std::function<void()>& work,
                  const std::function<void()>& before = {});
  // apply_loss, and for another loss meanwhile, that change too.
  void apply_surviving(int64_t step, MembershipChange change, std::chrono::steady_clock::time_point t0);
  // `work` (a step and what follows it); a loss outside an agreement (in a group's own collectives) is agreed on at
  // the kept groups' next agreement, applied, and ends this rank with an Error (it leaves with its group before that:
  // LeftJob).
  Next lost_outside_agreement(int64_t step, const std::function<Next()>& work);
  bool recoverable() const;  // recovers_in_job, for the layout as it is now
  // The failure watch (comm/failure_watch.h) on the membership's base communicator; told of progress and of how
  // long a recovery may take (three rounds of the steps so far, at least 20 s).
  void watch_membership();
  void watch_progress();
  Membership::Position position(int64_t step, const char* during) const;
  // A loss: the engine rebuilt over the kept groups, the tokens counted from the last round, the data dealt over
  // the kept groups (as a relaunch of them would deal it), a group_lost line. Nothing is read from disk and no
  // process restarts.
  void apply_loss(int64_t step, const MembershipChange& change, std::chrono::steady_clock::time_point t0);
  // Collective over the kept ranks after the round at `step`, federation.rejoin_after rounds after a loss: grows
  // the job by replacements for every rank of the lost groups, rebuilds the engine over it, and sends every
  // replacement the state of the rank at its position in the first group (the global model, which every group
  // holds after the round, that rank's inner and outer optimizer state); a group_joined line. Where the
  // replacements cannot start, says so (rejoin_failed) and goes on as before; where a rank is lost during the
  // transfer, every replacement leaves and the kept ranks recover from the loss, so the lost groups rejoin later.
  void rejoin(int64_t step);
  // The replacement's side of rejoin(), from the constructor.
  void join(const JoinPlan& plan);
  // The engine rebuilt over `layout` (groups `group_ids`, the membership's base communicator), this rank's state
  // handed over to it, the data dealt over its groups.
  void rebuild(const comm::Layout& layout, std::vector<int> group_ids);
  void audit_round(int64_t step);  // federation.audit: this rank's part of the global model's checksum
  // and after a rejoin, its whole state's (train::state_checksum) and the bytes of state it sent or received
  void audit_join(int64_t step, int64_t state_bytes);

  // Tokens the whole run has trained on through `step` (the world may have changed at a resume).
  int64_t tokens_through(int64_t step) const;
  int64_t group_tokens_per_step() const;  // this rank's real group: every virtual rank of its held groups
  int64_t world_tokens_per_step() const;  // the virtual world's

  TrainSetup s_;
  const Faults& faults_;
  Cadence cadence_;
  Membership membership_;
  RunLog log_;
  int threads_ = 1;
  Engine engine_;
  comm::Topology* topo_ = nullptr;  // engine_'s
  parallel::ShardedModel* sharded_ = nullptr;
  std::optional<federation::Schedule> rounds_;  // fl-* only
  // Per held group (one without emulation): its data, and the sampler's reader of each virtual rank played.
  std::vector<std::shared_ptr<data::WindowSampler>> samplers_;
  std::vector<std::vector<int>> readers_;
  std::optional<GroupStates> held_;  // several groups per rank (parallel.emulate)
  std::optional<StepProfiler> profiler_;  // train.profile_steps
  LrSchedule lr_;
  double peak_flops_ = 0;
  nlohmann::json resolved_;
  double last_val_loss_ = 0;
  double last_val_ppl_ = 0;
  TokenCount tokens_;
  Carried carried_;  // what the cadence carries from step to step
  bool group_stop_ = false;  // this rank's group agreed on a preemption signal
  at::Tensor group_sent_;     // in a recoverable job: what this rank put into its group's agreement of the step
  at::Tensor group_agreed_;   // that agreement's result, as agree_in_group_again last had it
  std::optional<StopNotice> notice_;  // several groups: tells the others when this one stops
  // Time-based rounds: the metrics writer's group's step at the last round (this group's own after a resume).
  int64_t writer_round_step_ = 0;
  bool pending_round_ = false;  // this group stopped at a round that did not take place (restored: hold it first)
  double slow_ = 1;          // train.slow: this rank's compute stretch
  double clock_step_ = 0;    // federation.clock = emulated: the seconds one step of this group counts, else 0
  std::array<double, comm::kNumTiers> step_bytes_{};  // this rank's, summed over its training steps
  std::array<double, comm::kNumTiers> federation_sent_{};  // the federation lane's bytes accounted to steps so far
  std::chrono::steady_clock::time_point run_start_ = std::chrono::steady_clock::now();  // of this launch
  double step_seconds_sum_ = 0;
  double timed_tokens_ = 0;  // the world's tokens of the steps in step_seconds_sum_
};

}  // namespace fedshard::train
