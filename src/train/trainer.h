// The training loop (DESIGN.md): one optimizer step per iteration on every rank: read this rank's windows,
// forward/backward through the sharded model, clip by the global norm, AdamW on the local shard, log.
#pragma once

#include <array>
#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include "comm/layout.h"
#include "comm/topology.h"
#include "data/partition.h"
#include "data/token_dataset.h"
#include "data/window_sampler.h"
#include "federation/schedule.h"
#include "model/config.h"
#include "model/hf_checkpoint.h"
#include "parallel/emulation.h"
#include "parallel/strategy.h"
#include "plan/memory_model.h"
#include "train/checkpoint.h"
#include "train/config.h"
#include "train/engine.h"
#include "train/evaluator.h"
#include "train/group_states.h"
#include "train/join_plan.h"
#include "train/lr_schedule.h"
#include "train/metrics.h"
#include "train/step_profiler.h"
#include "train/stop_notice.h"

namespace fedshard::train {

// Everything that can be checked on one rank without talking to the others: the config, the strategy and
// sizes, the model, the data. Built inside cli::run_startup_phase so a bad input ends every rank cleanly.
struct TrainSetup {
  TrainConfig cfg;
  parallel::Strategy strategy;
  comm::Layout layout;           // the real ranks' (emulation.real)
  parallel::Emulation emulation;  // the virtual layout they play (parallel.emulate); inactive: the same
  comm::TopologySpec topology;
  model::ModelConfig model;
  std::shared_ptr<data::TokenDataset> train;
  std::shared_ptr<data::TokenDataset> val;
  data::Partition partition;  // over the virtual groups
  std::optional<CheckpointMeta> resume;  // checked (files present, checksums) before any collective
  std::vector<int> group_ids;            // stable id of each group of this run
  std::vector<int> continues;            // resuming onto another group layout: checkpoint group per group
  std::shared_ptr<model::HfCheckpoint> init_from;  // checked HF directory, when initializing from one
  plan::MemoryEstimate memory;  // this rank's predicted peak (preflight)
  std::string tokenizer;        // the data's tokenizer spec, file paths absolute (checkpoints carry it)
  std::optional<JoinPlan> join;  // this process replaces a lost rank (comm/rejoin.h)
};

TrainSetup prepare_training(const TrainConfig& cfg, int world_size, int world_rank);
// Whether a lost group's loss is recovered in the job (ULFM: comm/survivors.h): fl-*, step rounds, equal groups
// of one replica each, no overlap or compression, inner_state keep or reset, no emulation, the mpi backend.
bool recovers_in_job(const TrainSetup& s);
// In a replacement started by Trainer::rejoin (comm::join_spawning_job's `comm`): receives the JoinPlan and
// prepares as a rank of the grown job's layout; no checkpoint and no Hugging Face model is read (the state
// comes from a live peer).
TrainSetup prepare_joining(TrainConfig cfg, MPI_Comm comm);

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

class Trainer {
 public:
  explicit Trainer(TrainSetup setup);  // collective: builds the engine (communicators, sharded model, ...)
  ~Trainer();
  TrainSummary run();

 private:
  struct StepResult;
  // Constructor parts: this rank's threads and device; what parallelize() gets; where the data comes from;
  // the run directory's config.json and metrics.jsonl.
  at::Device place_rank();
  EngineSpec engine_spec(at::Device device) const;
  void make_sampler();
  void open_run_files();
  StepResult train_step(int64_t step);
  // This group's vote at `step` (a round's, or a stop's between rounds).
  federation::Vote vote(int64_t step, bool nonfinite) const;
  // The round after `step`: finishes the one in flight, agrees, issues this one (finishes it unless it may
  // stay in flight). Sets r's round, stop and aggregated.
  void federate(int64_t step, bool nonfinite, StepResult& r);
  // federate(), and where ranks are lost before the round is applied: recover() and the round again, without
  // the lost groups.
  void federate_surviving(int64_t step, bool nonfinite, StepResult& r);
  bool recoverable() const;  // recovers_in_job, for the layout as it is now
  // Collective over the survivors after a comm::PeerLost at `step`: revokes every communicator, shrinks the
  // world to the live ranks and keeps the groups that lost none (comm::regroup). A rank of a lost group throws
  // LeftJob; the others rebuild the engine over the kept groups, hand their state over to it, deal the data
  // over the kept groups (as a relaunch of them would) and log a group_lost line. Nothing is read from disk and
  // no process restarts.
  void recover(int64_t step);
  // Collective over the kept ranks after the round at `step`, federation.rejoin_after rounds after a loss:
  // starts replacements for every rank of the lost groups (comm::spawn_replacements), rebuilds the engine over
  // the kept groups and the lost ones (appended, as the replacements' ranks are), hands each rank's state over
  // to it and sends every replacement the state of the rank at its position in the first group (the global
  // model, which every group holds after the round, that rank's inner and outer optimizer state); deals the data
  // over the grown job and logs a group_joined line. Where the replacements cannot be started or one cannot
  // start up, says so (rejoin_failed) and goes on as before; where a rank is lost during the transfer, every
  // replacement leaves and the kept ranks recover() from the loss, so the lost groups rejoin again later.
  void rejoin(int64_t step);
  // The replacement's side of rejoin(), from the constructor.
  void join(const JoinPlan& plan);
  // recover() and rejoin(): the engine rebuilt over `layout` (groups `group_ids`, ranks `base`), this rank's state
  // handed over to it, the data dealt over its groups.
  void rebuild(const comm::Layout& layout, std::vector<int> group_ids, MPI_Comm base);
  // `work` (an evaluation, a checkpoint: collectives over the world that change no training state). In a
  // recoverable configuration every rank then agrees whether it succeeded everywhere (a collective may fail on
  // some ranks only); if not, all recover() and do `work` again over the kept groups.
  void surviving(int64_t step, const std::function<void()>& work);
  // Forward and backward over every micro-batch this rank plays for held group j (its virtual ranks x
  // train.grad_accum), gradients reduced once; returns the mean loss (a device scalar).
  at::Tensor forward_backward(int64_t step, size_t j);
  void log_step(const StepResult& r);
  void save(const StepResult& r);  // a checkpoint after r's step (collective over the world)
  void audit_round(int64_t step);  // federation.audit: this rank's part of the global model's checksum
  // and after a rejoin, its whole state's (train::state_checksum) and the bytes of state it sent or received
  void audit_join(int64_t step, int64_t state_bytes);
  void append_audit(const nlohmann::json& line);
  // Evaluates over `comm` (the world for the global model, the group for a group's local model); rank 0 logs.
  // Evaluates the model over comm's ranks and writes the eval line; the global model's in surviving().
  void log_eval(int64_t step, const std::string& model_kind, comm::Communicator& comm);
  void log_global_eval(int64_t step);
  void write_eval(int64_t step, const std::string& model_kind, const EvalResult& r);
  nlohmann::json link_summary() const;  // null without link emulation
  nlohmann::json resolved_config() const;
  // Drops metrics lines of steps after `step` (a resumed run rewrites them) and a line cut short, and reopens
  // for appending.
  void reopen_metrics_after(int64_t step);
  // Tokens the whole run has trained on through `step` (the world may have changed at a resume).
  int64_t tokens_through(int64_t step) const;
  int64_t group_tokens_per_step() const;  // this rank's real group: every virtual rank of its held groups
  int64_t world_tokens_per_step() const;  // the virtual world's

  TrainSetup s_;
  int threads_ = 1;
  MPI_Comm base_ = MPI_COMM_WORLD;  // the ranks training (the survivors' communicator after a recovery)
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
  MetricsLog metrics_;
  double peak_flops_ = 0;
  nlohmann::json resolved_;
  double last_val_loss_ = 0;
  double last_val_ppl_ = 0;
  int64_t start_step_ = 1;
  int64_t tokens_before_start_ = 0;  // trained on by the run (all its launches) before start_step_
  bool group_stop_ = false;  // this rank's group agreed on a preemption signal
  std::optional<StopNotice> notice_;  // several groups: tells the others when this one stops
  bool pending_round_ = false;  // this group stopped at a round that did not take place (restored: hold it first)
  bool round_unapplied_ = false;  // federate() has begun a round and not applied it: it can be held again
  bool recovered_ = false;        // groups were lost and the job went on (Trainer::recover)
  std::vector<int> launch_ranks_;  // per rank of base_: the launch rank it is (or, a replacement, stands for)
  // Groups lost and not rejoined: id and launch ranks. They rejoin after round rejoin_round_.
  std::vector<std::pair<int, std::vector<int>>> lost_groups_;
  int64_t rejoin_round_ = 0;
  double slow_ = 1;          // train.slow: this rank's compute stretch
  double clock_step_ = 0;    // federation.clock = emulated: the seconds one step of this group counts, else 0
  // Time-based rounds: due evaluations/checkpoints wait for the next round's agreement; tokens of all groups
  // as of the last round (at this rank's step step_agreed_).
  bool checkpoint_wanted_ = false, eval_wanted_ = false;
  int64_t tokens_agreed_ = 0, step_agreed_ = 0;
  std::array<double, comm::kNumTiers> step_bytes_{};  // this rank's, summed over its training steps
  std::array<double, comm::kNumTiers> federation_sent_{};  // the federation lane's bytes accounted to steps so far
  std::chrono::steady_clock::time_point run_start_ = std::chrono::steady_clock::now();  // of this launch
  double step_seconds_sum_ = 0;
  double timed_tokens_ = 0;  // the world's tokens of the steps in step_seconds_sum_
};

}  // namespace fedshard::train
