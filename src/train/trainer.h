// The training loop (DESIGN.md): one optimizer step per iteration on every rank: read this rank's windows,
// forward/backward through the sharded model, clip by the global norm, AdamW on the local shard, the group's
// agreement, the round after it under federation, then what the cadence says is due (evaluation, checkpoint, the
// end). Its parts: the start-up (train/setup.h), when things are due (train/cadence.h), the round protocol
// (train/rounds.h), in-job recovery (train/recovery.h), what the run writes (train/run_log.h), what its steps
// measured (train/step_stats.h), a rank's engine and state (train/engine.h, train/rank_state.h), its data
// (train/step_data.h).
#pragma once

#include <chrono>
#include <memory>
#include <optional>
#include <vector>

#include "train/cadence.h"
#include "train/engine.h"
#include "train/evaluator.h"
#include "train/group_states.h"
#include "train/lr_schedule.h"
#include "train/recovery.h"
#include "train/rounds.h"
#include "train/run_log.h"
#include "train/run_summary.h"
#include "train/setup.h"
#include "train/step_data.h"
#include "train/step_profiler.h"
#include "train/step_stats.h"
#include "train/stop_notice.h"
#include "train/token_count.h"
#include "util/faults.h"

namespace fedshard::train {

class Trainer : private Recovery::Rebuild {
 public:
  // Collective: builds the engine (communicators, sharded model, ...). `faults`: the robustness tests' plan.
  explicit Trainer(TrainSetup setup, const Faults& faults = Faults::none());
  TrainSummary run();

 private:
  struct StepResult;
  // This rank's compute: intra-op threads, peak matmul rate (MFU's denominator), train.slow's stretch, and under
  // federation.clock = emulated the seconds one step of its group counts (0: the wall's).
  struct RankCompute {
    int threads = 1;
    double peak_flops = 0;
    double slow = 1;
    double clock_step = 0;
  };
  enum class Next { Continue, Stop, End };

  // Constructor parts: the round protocol and the emulated clock; where the data comes from; the resumed or joined
  // state; the run's files.
  void make_rounds();
  void deal_data();  // the data and, under emulation, the held groups; the round protocol told of them
  void resume(const CheckpointMeta& meta);
  void join(const JoinPlan& plan);
  void open_run_files();
  nlohmann::json resolved_config() const;  // train/run_config.h's, with this rank's facts
  void set_token_rates();

  // Recovery::Rebuild.
  Engine& engine() override { return engine_; }
  Recovery::Point point(int64_t step) const override;
  void rebuild(const comm::Layout& layout, std::vector<int> group_ids, int64_t step, int64_t tokens) override;

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

  // What follows a step (or, after a resume, the round this group stopped at): its line, the cadence's evaluation,
  // checkpoint, stop or end. `replayed`: that step was trained and logged before the checkpoint.
  Next conclude(const StepResult& r, bool replayed);
  void log_step(const StepResult& r);
  void save(const StepResult& r);  // a checkpoint after r's step (collective over the world)
  void evaluate_global(int64_t step);
  void evaluate_group(int64_t step);  // this group's own model, before the round (eval.group_model)
  TrainSummary finish(int64_t last_step, double wall_s, const comm::LedgerSnapshot& comm_total);
  // Every rank's row of the summary's per-rank columns (train/run_summary.h), over the kept ranks.
  at::Tensor gather_per_rank(int64_t last_step);

  // The failure watch after the engine is (re)built; told of progress and how long a recovery may take.
  void watch();
  void watch_progress();

  TrainSetup s_;
  const Faults& faults_;
  Cadence cadence_;
  RunLog log_;
  TokenCount tokens_;
  Recovery recovery_;
  Engine engine_;
  std::optional<Rounds> rounds_;  // fl-* only
  std::optional<StepData> data_;
  std::optional<GroupStates> held_;  // several groups per rank (parallel.emulate)
  std::optional<StepProfiler> profiler_;  // train.profile_steps
  LrSchedule lr_;
  StepStats stats_;
  RankCompute compute_;
  nlohmann::json resolved_;
  EvalResult last_eval_;
  Carried carried_;  // what the cadence carries from step to step
  std::optional<StopNotice> notice_;  // several groups: tells the others when this one stops
  std::chrono::steady_clock::time_point run_start_ = std::chrono::steady_clock::now();  // of this launch
};

}  // namespace fedshard::train
