// Validation loss and perplexity of a sharded model on the held-out split.
#pragma once

#include <cstdint>

#include "comm/communicator.h"
#include "data/token_dataset.h"
#include "parallel/sharded_model.h"

namespace fedshard::train {

struct EvalResult {
  double loss = 0;  // mean next-token cross entropy (nats)
  double ppl = 0;
  int64_t tokens = 0;
};

// The first `windows` validation windows (0 = all) are split round-robin over the ranks of `comm`, which must
// contain whole shard groups of `model`. Every rank runs the same number of batches (padding with masked
// windows) so the parameter gathers stay matched. Collective over `comm`.
EvalResult evaluate(parallel::ShardedModel& model, const data::TokenDataset& val, int64_t windows,
                    int64_t batch_size, comm::Communicator& comm);

}  // namespace fedshard::train
