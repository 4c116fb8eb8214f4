// The analytic cost model behind `fedshard plan` (derivation in docs/cost-model.md). It enumerates, for one
// rank, exactly the collectives the engine issues per step and per aggregation round (same units, same
// padding, same control scalars), classifies each communicator into a tier from the rank layout, and prices
// each with the alpha-beta ring formula of that tier. Bytes are therefore exact predictions of what the
// communicators measure; times are as good as the alpha, beta and compute rate given.
#pragma once

#include <array>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "comm/link_emulation.h"
#include "comm/layout.h"
#include "model/config.h"
#include "parallel/strategy.h"
#include "plan/memory_model.h"

namespace fedshard::plan {

struct StrategySpec {
  parallel::Strategy strategy;
  std::vector<int> groups;  // S_g of groups of different sizes (fl-*); empty: group_size
  int group_size = 0;  // S (fl-*); 0: the world
  int shard_size = 0;  // H (hsdp, fl-hsdp); 0: by strategy
  int sync_every = 8;  // K (fl-*)
  std::string label() const;
};

// "fl-hsdp:S=32,H=4,K=8" (the part after ':' optional). Throws fedshard::Error.
StrategySpec parse_strategy_spec(const std::string& text, int default_sync_every);

struct Cluster {
  std::string name = "custom";
  int nodes = 1;
  int ranks_per_node = 1;
  std::array<comm::LinkSpec, comm::kNumTiers> links{};  // node, inter-node, inter-group
  double peak_flops_per_rank = 0;                        // dense, in the compute dtype
  double mfu = 0.4;                                      // achieved fraction of peak for the step's FLOPs
  double memory_bytes_per_rank = 0;                      // 0: unknown
  // The least one data collective takes on this host, however few its bytes: the ranks' comm threads must get a
  // core (ms where ranks outnumber cores, ~0 with a core per thread); a collective that takes longer on its
  // link hides it.
  double collective_floor_s = 0;
  std::vector<std::string> sources;                      // where each number comes from
  int world() const { return nodes * ranks_per_node; }
};

// Named presets: "leonardo" (CINECA Leonardo Booster). Throws fedshard::Error on an unknown name.
Cluster cluster_preset(const std::string& name, int nodes);

// TORCH_DISTRIBUTED_DEBUG=DETAIL as the research's launcher sets it: before every collective, on the host, a
// monitored barrier (rank 0 receives from and answers each of the other P - 1 ranks) and two ring all-gathers
// of the collective's fingerprint, all over Gloo (TCP) among the collective's P ranks (PyTorch's
// ProcessGroupWrapper::runCollectiveChecks). Priced as
//   2 latency + 2 (P - 1) per_peer + 2 (P - 1) latency
// and paid on the training thread: a rank can launch the collective only once every rank has reached it.
struct CollectiveChecks {
  double latency_s = 0;   // one small Gloo message, one way (TCP)
  double per_peer_s = 0;  // rank 0's handling of one peer's message in the barrier
  double seconds(int ranks) const;
};

struct Workload {
  model::ModelConfig model;
  int64_t params_override = 0;  // >0: a bare parameter count, priced as one unit
  int64_t batch_per_rank = 2;   // sequences per micro-batch
  int grad_accum = 1;           // micro-batches per step: each gathers the parameters again; gradients reduce once
  int64_t seq_len = 2048;
  int param_bytes = 2;   // bytes per element gathered (compute dtype)
  int reduce_bytes = 4;  // bytes per element of gradient reductions and the federation average (reduce dtype)
  int master_bytes = 4;  // bytes per element of the master weights (the replica all-gather after a round)
  double compute_seconds = 0;    // >0: measured compute time per step (replaces FLOPs / rate), optimizer included
  double optimizer_seconds = 0;  // the part of compute_seconds spent in the optimizer step (cannot overlap)
  bool overlap = true;
  bool reshard_after_forward = true;
  // federation.compress / compress_block / overlap: the round's wire format and whether it hides behind steps.
  std::string compress = "none";
  int64_t compress_block = 256;
  std::string sparse_mean = "union";  // federation.sparse_mean (topk:D)
  std::string round_overlap = "none";
  std::string slow;          // train.slow: RANK=FACTOR,group:G=FACTOR (parallel/slow_ranks.h)
  bool timed_rounds = false;  // federation.round = seconds:T: no group waits for a slower one between rounds
  std::string inner_state = "keep";  // federation.inner_state: average also averages AdamW's two moments per round
  std::string activation_checkpointing = "auto";  // auto | on | off
  bool prefetch = true;  // false: each gather is issued when its unit needs it (FSDP's prefetch off)
  CollectiveChecks checks;  // zero: none (plan --baseline research sets them)
};

struct CollectiveCost {
  std::string comm;  // world | group | shard | replica | segment
  comm::Tier tier = comm::Tier::Node;
  comm::Collective kind = comm::Collective::AllReduce;
  double full_bytes = 0;
  int ranks = 1;
  int count = 1;          // times issued per step (per round for sync collectives)
  bool per_round = false;  // issued at each aggregation (every K steps), not every step
  bool control = false;
  int unit = -1;           // the unit a round's collective averages (a streaming round covers some units only)
  double seconds = 0;  // alpha-beta time of one issue
};

// What one rank sends: the collectives it issues and their bytes per tier.
struct RankBytes {
  std::vector<CollectiveCost> collectives;
  std::array<double, comm::kNumTiers> per_step{};   // step collectives only
  std::array<double, comm::kNumTiers> per_round{};  // one aggregation round
};

struct StrategyPlan {
  StrategySpec spec;
  comm::Layout layout;
  // Rank 0's collectives (its step is the one timed below); `groups` has each group's first rank (all ranks
  // of a group send the same bytes).
  std::vector<CollectiveCost> collectives;
  std::vector<RankBytes> groups;
  std::vector<RankBytes> ranks;  // every rank's (groups of different sizes send different bytes)
  double inter_group_data_bytes_per_round = 0;  // one round, summed over all ranks: 2 (G - 1) Psi b
  std::array<double, comm::kNumTiers> bytes_per_step{};   // step collectives + rounds / K
  std::array<double, comm::kNumTiers> bytes_per_round{};  // one aggregation round
  std::array<double, comm::kNumTiers> comm_seconds_per_step{};  // likewise amortized
  double compute_seconds = 0;
  double step_comm_seconds = 0;   // collectives issued every step
  double round_comm_seconds = 0;  // one aggregation round
  double round_exposed_seconds = 0;  // what of it the steps wait for (all of it unless federation overlap)
  double step_seconds = 0;
  double tokens_per_second = 0;
  double speedup_vs_fsdp = 0;
  MemoryEstimate memory;  // rank 0's peak, by component (plan/memory_model.h)
  bool fits_memory = true;
};

StrategyPlan plan_strategy(const Cluster& cluster, const Workload& w, const StrategySpec& s);
// The link a collective over `members` (a communicator of `kind`: shard, replica, group or segment) runs on: its
// tier's, on a shared link with the bandwidth split among the kind's rings leaving a node at once.
comm::LinkSpec ring_link(const Cluster& cluster, const comm::Layout& layout, const std::string& kind,
                         const std::vector<int>& members);
// Seconds of a data collective (a ring of ours) on `link`: at least the cluster's collective floor.
double data_seconds(const Cluster& cluster, const comm::LinkSpec& link, comm::Collective kind, double bytes, int p);
// The collectives rank `rank` of `layout` (placed on nodes) issues for workload w, and their bytes.
RankBytes rank_bytes(const comm::Layout& layout, int rank, const Cluster& cluster, const Workload& w,
                     const StrategySpec& s);
// Plans every spec and fills speedup_vs_fsdp (relative to the first fsdp entry, if any).
std::vector<StrategyPlan> plan_all(const Cluster& cluster, const Workload& w, const std::vector<StrategySpec>& specs);

// Parameter count of each unit as the engine shards it (embedding [+ tied head], blocks, head).
std::vector<int64_t> unit_params(const Workload& w);

// Per-unit times of one step: compute, and one issue of each of its collectives (0 = none).
struct UnitTimes {
  double fwd = 0, bwd = 0;
  double gather = 0, reduce = 0, replica = 0;
  // Host time before each issue of the unit's collectives on its shard and replica communicators
  // (CollectiveChecks).
  double shard_check = 0, replica_check = 0;
  bool freed_after_forward = false;  // re-gathered in backward
};

// One training step as the engine runs it (parallel/unit_function.cpp): collectives leave through one FIFO
// (the comm thread), the training thread blocks only where the engine waits. Forward: at unit k, gather k if
// needed, prefetch k+1, wait for k, compute. Backward from the last unit: gather k if freed and prefetch
// k-1, wait, recompute + backward, launch reduce-scatter (+ replica all-reduce). Then wait for all
// reductions, then the serial tail (blocking control all-reduces, optimizer). Returns the step's duration.
// serial_seconds: what runs after the reductions (control all-reduces, optimizer step). Without prefetch a
// gather is issued only when its unit is reached; a unit's checks run on the training thread before each of
// its collectives is issued.
double simulate_step(const std::vector<UnitTimes>& units, bool recompute, double serial_seconds,
                     bool prefetch = true);

}  // namespace fedshard::plan
