// How the training windows are divided among federation groups (DESIGN.md "Data").
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "data/token_dataset.h"

namespace fedshard::data {

struct Partition {
  // iid: one seeded stream over all windows; every rank of the world takes its own slot of each step, so a
  // group's data is exactly what its ranks read under the non-federated strategies.
  bool global_stream = true;
  std::vector<std::vector<int64_t>> pools;  // otherwise: the window ids of each group
};

// spec: "iid" | "by-source" (group g gets sources g, g+G, ... of the manifest's sorted labels) |
// "dirichlet:ALPHA" (each source's windows split over groups by proportions drawn from Dir(ALPHA)).
// With one group every spec gives the iid stream. Deterministic in seed. Throws fedshard::Error on a bad spec or a group left without data.
Partition partition_windows(const TokenDataset& train, const std::string& spec, int groups, uint64_t seed);

// Draws one Dir(alpha, ..., alpha) vector of length n from a seed (portable; no std:: distributions).
std::vector<double> dirichlet(double alpha, int n, uint64_t seed);

}  // namespace fedshard::data
