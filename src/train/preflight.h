// Checks before anything large is allocated (issue 17): the memory a rank will need at its peak, from the one
// estimate `fedshard plan` uses (plan/memory_model.h), against what it can have, and the disk the checkpoints
// will take against the output directory's file system.
#pragma once

#include <string>

#include "plan/memory_model.h"

namespace fedshard::train {

struct TrainSetup;

// The estimate's inputs for this rank of the job `s` describes (its group's sharding, batch, dtypes,
// recomputation, optimizer, federation state, held groups); runtime_bytes: what the process holds now.
plan::MemoryInputs memory_inputs(const TrainSetup& s, int world_rank);

// Throws fedshard::Error (one line: predicted and available bytes, and what would fit) when the estimate
// exceeds what this rank can have: on the CPU MemAvailable shared by the host's ranks plus what the process
// already holds, on a GPU the device's free memory. With train.force the line is a warning on stderr instead.
// Warns (never fails) when `keep` checkpoints would not fit on the output directory's file system.
// Returns the estimate (the run's config.json records it).
plan::MemoryEstimate preflight(const TrainSetup& s, int world_rank);

}  // namespace fedshard::train
