// Preemption across federation groups. A signal reaches the ranks of a group, which agree on it in their
// per-step loss all-reduce; the other groups may not have been signalled (a signal to one task, a Slurm
// step of its own). The group's first rank then tells the first rank of every other group, which polls for
// the message once a step (MPI_Test on a posted receive: no collective, nothing waits), so every group
// learns of the stop at its next step. Cost per step: one MPI_Test on each group's first rank.
#pragma once

#include <mpi.h>

#include <vector>

#include "comm/layout.h"

namespace fedshard::train {

class StopNotice {
 public:
  // Collective over `base`, whose ranks the layout numbers (duplicates it, so no other message can match).
  StopNotice(const comm::Layout& layout, int world_rank, MPI_Comm base = MPI_COMM_WORLD);
  ~StopNotice();
  StopNotice(const StopNotice&) = delete;
  StopNotice& operator=(const StopNotice&) = delete;

  // Whether another group has sent its notice (always false off a group's first rank).
  bool received();
  // Tells the first rank of every other group, once (a no-op off a group's first rank).
  void send();

 private:
  MPI_Comm comm_ = MPI_COMM_NULL;
  bool first_ = false;          // this rank is its group's first
  std::vector<int> others_;     // the other groups' first ranks
  MPI_Request recv_ = MPI_REQUEST_NULL;
  int in_ = 0, out_ = 1;
  bool received_ = false, sent_ = false;
};

}  // namespace fedshard::train
