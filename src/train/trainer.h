// The training loop (DESIGN.md): one optimizer step per iteration on every rank: read this rank's windows,
// forward/backward through the sharded model, clip by the global norm, AdamW on the local shard, log.
#pragma once

#include <memory>
#include <optional>

#include "comm/topology.h"
#include "data/partition.h"
#include "data/token_dataset.h"
#include "data/window_sampler.h"
#include "federation/aggregator.h"
#include "model/config.h"
#include "model/llama.h"
#include "parallel/sharded_model.h"
#include "parallel/strategy.h"
#include "train/checkpoint.h"
#include "train/config.h"
#include "train/lr_schedule.h"
#include "train/metrics.h"
#include "train/optimizer.h"

namespace fedshard::train {

// Everything that can be checked on one rank without talking to the others: the config, the strategy and
// sizes, the model, the data. Built inside cli::run_startup_phase so a bad input ends every rank cleanly.
struct TrainSetup {
  TrainConfig cfg;
  parallel::Strategy strategy;
  comm::TopologySpec topology;
  model::ModelConfig model;
  std::shared_ptr<data::TokenDataset> train;
  std::shared_ptr<data::TokenDataset> val;
  data::Partition partition;
  std::optional<CheckpointMeta> resume;  // checked (files present, checksums) before any collective
  std::string init_from;                 // checked HF directory, when initializing from one
};

TrainSetup prepare_training(const TrainConfig& cfg, int world_size, int world_rank);

struct TrainSummary {
  int64_t steps = 0;
  double final_val_loss = 0;
  double final_val_ppl = 0;
  double unigram_val_ppl = 0;
  double tok_per_s = 0;
};

class Trainer {
 public:
  explicit Trainer(TrainSetup setup);  // collective: builds communicators and the sharded model
  ~Trainer();
  TrainSummary run();

 private:
  struct StepResult;
  StepResult train_step(int64_t step);
  void log_step(const StepResult& r);
  // Evaluates over `comm` (the world for the global model, the group for a group's local model); rank 0 logs.
  void log_eval(int64_t step, const std::string& model_kind, comm::Communicator& comm);
  nlohmann::json link_summary() const;  // null without link emulation
  nlohmann::json resolved_config() const;
  // Drops metrics lines of steps after `step` (a resumed run rewrites them) and reopens for appending.
  void reopen_metrics_after(int64_t step);

  TrainSetup s_;
  std::unique_ptr<comm::Topology> topo_;
  std::unique_ptr<model::Llama> model_;
  std::unique_ptr<parallel::ShardedModel> sharded_;
  std::unique_ptr<Optimizer> optimizer_;
  std::unique_ptr<federation::Aggregator> aggregator_;  // fl-* only
  std::unique_ptr<data::WindowSampler> sampler_;
  int sampler_reader_ = 0;
  LrSchedule schedule_;
  MetricsLog metrics_;
  double peak_flops_ = 0;
  nlohmann::json resolved_;
  double last_val_loss_ = 0;
  double last_val_ppl_ = 0;
  int64_t start_step_ = 1;
  int64_t steps_since_sync_ = 0;
  double step_seconds_sum_ = 0;
  int64_t timed_steps_ = 0;
};

}  // namespace fedshard::train
