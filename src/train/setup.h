// A run's start-up: everything that can be checked on one rank without talking to the others (the config, the
// strategy and sizes, the model, the data, the checkpoint to resume from), in cli::run_startup_phase, so that bad
// input ends every rank cleanly before the trainer builds anything collective.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <mpi.h>

#include "comm/layout.h"
#include "comm/topology.h"
#include "data/partition.h"
#include "data/token_dataset.h"
#include "model/config.h"
#include "model/hf_checkpoint.h"
#include "parallel/emulation.h"
#include "parallel/strategy.h"
#include "plan/memory_model.h"
#include "train/checkpoint.h"
#include "train/config.h"
#include "train/join_plan.h"
#include "train/option_space.h"
#include "util/faults.h"

namespace fedshard::train {

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
  std::string tokenizer_id;     // its kind, vocabulary and fingerprint: the same at every site of a federation
  std::optional<std::pair<int, int>> data_slot;  // sites.data: this site reads as group I of N
  std::optional<JoinPlan> join;  // this process replaces a lost rank (comm/rejoin.h)
};

TrainSetup prepare_training(const TrainConfig& cfg, int world_size, int world_rank);
// The combination as started (train/option_space.h): the configuration and the start-up facts.
Combination started_combination(const TrainSetup& s);
// Whether a lost group's loss is recovered in the job (ULFM: comm/survivors.h): no declared_unrecovered rule holds.
bool recovers_in_job(const TrainSetup& s);
// In a replacement started by Trainer::rejoin (comm::join_spawning_job's `comm`): receives the JoinPlan and
// prepares as a rank of the grown job's layout; no checkpoint and no Hugging Face model is read (the state
// comes from a live peer). `faults`: FaultPoint::Join strikes as it starts up.
TrainSetup prepare_joining(TrainConfig cfg, MPI_Comm comm, const Faults& faults = Faults::none());

}  // namespace fedshard::train
