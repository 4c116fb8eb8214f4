// One rank's training state, defined once (torchtitan's state_dict): checkpoints save and restore it, the
// hand-over after a lost group copies it, a rejoin sends it, the held groups of an emulated layout swap it and
// the audit sums it. Per unit, in order: its master shard (Param), its inner optimizer's state (Inner), and under
// federation its outer optimizer's (Outer) and its lane's (Federation: the in-job aggregator's or a site's; those of
// a round in flight only once it is settled); beside them the inner optimizer's step counts. A tensor's key, as checkpoints store it within its
// unit, is made here and read back here only.
#pragma once

#include <ATen/ATen.h>
#include <mpi.h>

#include <cstdint>
#include <string>
#include <vector>

namespace fedshard::parallel {
class ShardedModel;
}
namespace fedshard::optim {
class Optimizer;
}
namespace fedshard::federation {
class Lane;
}

namespace fedshard::train {

struct Engine;

enum class StatePart { Param, Inner, Outer, Federation };

// "param", "opt.NAME", "outer.NAME" or "fed.NAME": a state tensor's key within its unit (train/checkpoint.h stores
// it as "uU.KEY").
std::string state_key(StatePart part, const std::string& name = "");

struct StateTensor {
  size_t unit = 0;
  StatePart part = StatePart::Param;
  std::string name;   // within its part (the optimizer's or the lane's name); empty for Param
  at::Tensor tensor;  // the live tensor; a lane's is a view that set_state writes back through
  std::string key() const { return state_key(part, name); }
  bool is(StatePart p, const std::string& n) const { return part == p && name == n; }
};

// The inner optimizer's step counts, the t of AdamW's bias correction: the run's, and per slice.
struct StepCounts {
  int64_t steps = 0;
  std::vector<int64_t> slice_steps;
  static StepCounts of(const optim::Optimizer& o);
  void apply_to(optim::Optimizer& o) const;
  at::Tensor to_tensor() const;  // int64: steps, then slice_steps (what a rejoin sends first)
  static StepCounts from_tensor(const at::Tensor& t);
};

struct RankState {
  std::vector<StateTensor> tensors;
  StepCounts counts;
};

// This rank's state, the tensors live (writes through set_state change the engine).
RankState rank_state(parallel::ShardedModel& sharded, optim::Optimizer& inner, federation::Lane* lane);
RankState rank_state(Engine& e);
// Writes `value` into state tensor s (the lane's own state through Lane::restore_state).
void set_state(const StateTensor& s, const at::Tensor& value, federation::Lane* lane);

// Copies this rank's training state (tensors and step counts) from one engine into another whose rank holds the
// same shards and slices: a group that goes on after other groups were lost keeps its geometry. Local; a round in
// flight in `from` must have been abandoned (federation::Aggregator::drop_unsettled).
void hand_over(Engine& from, Engine& to);

// The same state over MPI, from a rank of one group to the rank at the same position of a group that joins
// (train/recovery.h): point to point over comm, the step counts then every tensor as its bytes. The two engines
// were built from the same spec, so their state has the same tensors in the same order; no round may be in
// flight. Each returns the bytes it moved: handed to MPI_Send, or as MPI_Recv's statuses count them.
int64_t send_state(Engine& from, MPI_Comm comm, int dest);
int64_t receive_state(Engine& to, MPI_Comm comm, int source);
// The sum of every state tensor's 32-bit words and the step counts (federation.audit): equal on two ranks that
// hold the same state.
int64_t state_checksum(Engine& e);

}  // namespace fedshard::train
