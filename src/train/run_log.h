// What a run writes about itself (DESIGN.md "Metrics"): RUN_DIR/config.json, metrics.jsonl's lines (steps,
// evaluations, rounds, membership changes, a preemption, the summary) and their TensorBoard mirror, the progress
// line, and each rank's audit file. One rank, the writer (world rank 0), writes the shared files; when in-job
// recovery loses it, the first kept rank takes over (take_over), writing what its predecessor did not.
#pragma once

#include <nlohmann/json.hpp>

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "comm/ledger.h"
#include "train/config.h"
#include "train/evaluator.h"
#include "train/metrics.h"
#include "train/progress.h"

namespace fedshard::train {

struct CheckpointMeta;

// One step as its metrics line reports it.
struct StepRecord {
  int64_t step = 0;
  int64_t tokens = 0;  // the run's through this step
  double loss = 0, lr = 0, grad_norm = 0;
  double seconds = 0, optimizer_seconds = 0, round_seconds = 0;
  comm::LedgerSnapshot comm;  // what the collectives recorded during the step
  std::array<double, comm::kNumTiers> sent{};  // bytes this rank sent for the step, per tier
  bool aggregated = false, profiled = false;
  double mfu = 0;
  double tok_per_s = 0;
};

// Tokens per second of a step: the virtual world's tokens over the real ranks' time (this box's throughput).
inline double tokens_per_second(double world_tokens, double seconds) { return world_tokens / seconds; }

class RunLog {
 public:
  explicit RunLog(const TrainConfig& cfg);
  // Whether this rank writes the shared files (world rank 0); a rank that becomes the writer after a lost one
  // takes over (take_over).
  void set_writer(bool writer) { writer_ = writer; }
  bool writer() const { return writer_; }

  // The writer starts the run's files: the TensorBoard mirror, config.json, metrics.jsonl (a resumed run keeps its
  // lines up to the checkpoint and says where it resumed from, whether on the same layout, and how the groups
  // changed: `relayout`, a metrics line or null), and says how the run started.
  void open(const nlohmann::json& config, const CheckpointMeta* resumed, bool same_layout,
            const nlohmann::json& relayout, const std::string& started);
  // Under in-job recovery every rank holds the lines a writer lost with its group may not have written: at most a
  // round's steps and its evaluations (the others see the loss at the next round, evaluation or checkpoint); under
  // time-based rounds, whose rounds have no fixed number of steps, those since this group's last round.
  void hold_for_takeover(bool timed_rounds);
  // Time-based rounds: the groups agreed a round after this group's `step`, the writer's group at `writer_step` (at
  // a resume, this group's own step). A new writer needs its held lines from the earlier of the two on.
  void round_agreed(int64_t step, int64_t writer_step);
  // The writer (only it) rewrites config.json (a membership change changes the resolved layout).
  void config(const nlohmann::json& config);

  void step(const StepRecord& r);
  void eval(int64_t step, int64_t tokens, const std::string& model, const EvalResult& e, double wall_s);
  void round(int64_t step, int64_t tokens, const std::vector<int64_t>& group_steps);
  void progress(int64_t step, double loss, double lr, double tok_per_s, double val_ppl);
  void finish_progress() { progress_.finish(); }
  // A membership change (in-job recovery) or the rejoin that did not happen, with its line on stderr; `line` is
  // the metrics line. After a lost writer (`lost`: a group_lost line), the first kept rank takes over first, at
  // `step`. Under time-based rounds the step axis is the writer's group's, and a new writer's group stands at other
  // steps: the lines a lost writer wrote through its group's step at the last round stay (rounds and evaluations
  // included); its later steps, which never reached the global model, go; the new writer's step lines go on after
  // the largest such step, so that each step is written once.
  void membership(const nlohmann::json& line, const std::string& said, int64_t step, bool lost = false);
  void preempted(int64_t step, int signal, bool emulated, int exit_code);
  void summary(const nlohmann::json& line);
  // Each rank its own file RUN/audit/rank-R.jsonl, R its launch rank: no communication, so the audit changes no
  // byte count and no timing of the run.
  void audit(int launch_rank, const nlohmann::json& line);

 private:
  // Drops metrics lines of steps after `step` (a resumed run rewrites them) and a line cut short; reopens.
  void reopen_metrics_after(int64_t step);
  void take_over(int64_t step);

  const TrainConfig& cfg_;
  bool writer_ = false;
  MetricsLog metrics_;
  Progress progress_;
  bool timed_ = false;               // time-based rounds
  int64_t writer_round_step_ = 0;    // the writer's group's step at the last round (time-based rounds)
  std::optional<int64_t> kept_through_;  // time-based rounds: the lines through this step stay at a takeover
};

}  // namespace fedshard::train
