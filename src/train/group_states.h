// The federation groups one rank holds under emulation (parallel/emulation.h): each group's master shards and
// inner optimizer state with its step counts (the first parts of train/rank_state.h's state; the aggregator's is
// the held groups' mean, in the live engine), kept beside the one live engine and swapped in and out of it as the
// rank trains the groups in turn. Copies, not pointer swaps: the optimizer, the aggregator and the sharded units
// keep their own handles to the live tensors.
#pragma once

#include <ATen/ATen.h>

#include <vector>

#include "optim/optimizer.h"
#include "parallel/sharded_model.h"
#include "train/rank_state.h"

namespace fedshard::train {

class GroupStates {
 public:
  // Every group starts as the live engine is now (the same initial model and optimizer state).
  GroupStates(int groups, parallel::ShardedModel& model, optim::Optimizer& opt);
  int size() const { return static_cast<int>(groups_.size()); }
  void load(int g);  // live <- group g
  void save(int g);  // group g <- live
  // Before a round: the live model becomes the groups' mean (equal weights: equal virtual groups), and so
  // does the live optimizer state when `state`; the round then averages the live engines across ranks.
  void combine(bool state);
  // After a round: every group takes the live model, and the live optimizer state when `state`.
  void distribute(bool state);

 private:
  struct State {
    std::vector<at::Tensor> tensors;  // in rank_state's order: master shards and inner optimizer state
    StepCounts counts;
  };
  RankState live() const;

  parallel::ShardedModel& model_;
  optim::Optimizer& opt_;
  std::vector<State> groups_;
};

}  // namespace fedshard::train
