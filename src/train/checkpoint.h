// Checkpoints (DESIGN.md, issue 6). RUN_DIR/checkpoints/step-NNNNNNNN/ holds one safetensors file per rank
// (its fp32 master shard of every unit, inner optimizer state, outer optimizer slices, CPU RNG state) and
// meta.json (step, resolved config, model, topology, flat-parameter layout, every file's checksum and which
// range of each unit it covers). A checkpoint is written into a temporary directory, fsync'd and renamed;
// `checkpoints/latest` names the newest complete one and is replaced atomically; the last `keep` are kept.
#pragma once

#include <nlohmann/json.hpp>

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "comm/topology.h"
#include "federation/aggregator.h"
#include "model/config.h"
#include "parallel/sharded_model.h"
#include "optim/optimizer.h"
#include "util/faults.h"

namespace fedshard::train {

// Per unit: its FlatParam entries (name, shape, offset, numel) and unpadded size. Identical for every layout.
struct UnitLayout {
  std::vector<parallel::FlatEntry> entries;
  int64_t numel = 0;
};
std::vector<UnitLayout> unit_layout(const model::ModelConfig& cfg);

struct CheckpointRank {
  int rank = 0, group = 0, position = 0;
  std::string file;
  uint64_t checksum = 0;
  std::vector<std::pair<int64_t, int64_t>> shard;  // per unit: [begin, end) of the padded flat it stores
  std::vector<std::pair<int64_t, int64_t>> slice;  // per unit: its aggregation slice (outer state)
};

struct CheckpointMeta {
  std::string dir;
  int64_t step = 0;
  comm::Layout layout;
  std::string strategy;
  int64_t optimizer_steps = 0;
  int64_t tokens = 0;  // trained on through `step`
  int64_t syncs = 0, steps_since_sync = 0;
  std::vector<int> group_ids;  // stable id of each group (0..G-1 until groups are lost)
  std::string outer;  // outer optimizer of the run, "" without federation
  std::vector<size_t> round_in_flight;  // units of a federation round in flight (overlap), saved settled
  // Every group's step where they differ (time-based rounds; a stop between rounds), else empty.
  std::vector<int64_t> group_steps;
  // Per group: it stopped at a round that did not take place (another group stopped between rounds), so the
  // round comes first after the resume. Empty: none.
  std::vector<bool> pending_rounds;
  std::string tokenizer;  // the training data's tokenizer spec, file paths absolute; "" in older checkpoints
  std::vector<int64_t> padded;  // per unit
  std::vector<CheckpointRank> ranks;
  nlohmann::json config;
};

// "auto": RUN_DIR/checkpoints/latest, or nothing if there is none yet; otherwise the directory given.
std::optional<std::string> find_checkpoint(const std::string& spec, const std::string& run_dir);

// Reads DIR/meta.json and checks it against the model (architecture and unit layout) and the files: every
// rank file present, and the checksum of each file in `verify` (empty: all). Throws fedshard::Error naming
// the file at fault. Local: safe in the start-up phase.
CheckpointMeta load_checkpoint_meta(const std::string& dir, const model::ModelConfig& model, bool verify_all_files,
                                    int verify_rank);

// True when the checkpoint was written by the same strategy on the same layout: every rank restores exactly
// its own state (bit-identical resume). Otherwise the state is re-sliced.
bool same_layout(const CheckpointMeta& meta, const comm::Layout& layout, const std::string& strategy);

// What the trainer saves beside the model; restore_checkpoint returns it for this rank's group (`step` its
// group's, `pending_round` whether its first act is the round it stopped at).
struct TrainingState {
  int64_t step = 0;
  int64_t steps_since_sync = 0;  // federation::Schedule's counters (each rank's own: groups may differ)
  int64_t syncs = 0;
  std::vector<int> group_ids;  // of the run's groups
  int64_t tokens = 0;          // trained on through `step`
  std::vector<int64_t> group_steps;  // where groups are at different steps: every group's; `step` is group 0's
  std::vector<bool> pending_rounds;  // per group (CheckpointMeta::pending_rounds); empty: none
  std::string tokenizer;             // CheckpointMeta::tokenizer
  bool pending_round = false;
  double round_time = 0;  // federation::Schedule::round_time (time-based rounds)
};

// Collective over the world. On a write failure anywhere (full or unwritable disk) every rank throws the
// same fedshard::Error, reported once; the previous checkpoint is untouched.
// `faults`: the robustness tests' plan (FaultPoint::Checkpoint strikes between a rank's file and the publication).
void save_checkpoint(const std::string& run_dir, int keep, const TrainingState& state, const nlohmann::json& config,
                     const model::ModelConfig& model, comm::Topology& topo, parallel::ShardedModel& sharded,
                     optim::Optimizer& inner, federation::Lane* lane, const Faults& faults = Faults::none());

// Restores this rank's state. Same layout: its own file, exactly. Another layout: a federation round in
// flight is applied first, to each checkpoint group's parameters by the delayed rule (global + own progress
// since the round began) and to the inner state by federation.inner_state, so no round is in flight after.
// Then, with `continues` (per group of this run, the index of the checkpoint group it continues): each group
// reassembles its own group's parameters, inner and outer optimizer state and send residuals and cuts them
// to its new shards and slices, mid-round counters and step included (federation going on without a lost
// group); the residuals of averaged chunks, summed over every checkpoint group, go to their new owners.
// Otherwise the groups merge, as at a FedAvg round: parameters and inner moments are averaged over groups
// weighted by their sizes, that model is the new global one (residuals zero, Nesterov's global slice too),
// the outer momentum is group 0's, and the run goes on from the checkpoint's step.
TrainingState restore_checkpoint(const CheckpointMeta& meta, comm::Topology& topo, const std::string& strategy,
                                 parallel::ShardedModel& sharded, optim::Optimizer& inner, federation::Lane* lane,
                                 const std::vector<int>& continues = {});

// The model config a checkpoint directory was written for (from its meta.json).
model::ModelConfig checkpoint_model(const std::string& dir);
// The model a checkpoint holds, consolidated into full tensors by name (averaged over groups for a mid-round
// federated checkpoint: the FedAvg model).
std::map<std::string, at::Tensor> consolidated_parameters(const CheckpointMeta& meta);

}  // namespace fedshard::train
