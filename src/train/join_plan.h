// What a replacement for a lost group's rank learns from the kept ranks when it joins the running job
// (Trainer::rejoin, federation.rejoin_after), as the JSON they broadcast.
#pragma once

#include <mpi.h>
#include <nlohmann/json.hpp>

#include <cstdint>
#include <vector>

namespace fedshard::train {

// Where the job is and who is in it. The replacement's state comes after, from the rank at its position in the
// first group.
struct JoinPlan {
  MPI_Comm comm = MPI_COMM_NULL;  // the grown job: the kept ranks, then the replacements
  int rank = 0;                   // this replacement's in comm
  int64_t step = 0;               // the round the groups just held; training goes on from step + 1
  int64_t tokens = 0;             // the run's through `step`
  int64_t syncs = 0;              // rounds held through `step`
  std::vector<int> group_sizes, group_ids;  // of the grown job
  std::vector<int> launch_ranks;            // per rank of comm: the launch rank it stands for
  int launch_world = 0;                     // the job's ranks at launch
  double peak_flops = 0;                    // per rank, as rank 0 measured it (MFU)
  nlohmann::json to_json() const;
  static JoinPlan from_json(const nlohmann::json& j);
};

}  // namespace fedshard::train
