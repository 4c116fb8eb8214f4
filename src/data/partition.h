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

// Every group gets data in proportion to its size (group_sizes: ranks per group). spec: "iid" (every rank
// reads its own slot of one stream) | "by-source" (whole sources of the manifest's sorted labels dealt to
// groups by smooth weighted round robin: equal groups get sources g, g+G, ...) | "dirichlet:ALPHA" (each
// source's windows split over groups by proportions drawn from Dir(ALPHA * G * S_g / N)). With one group
// every spec gives the iid stream. Deterministic in seed. Throws fedshard::Error on a bad spec or a group
// left without data.
Partition partition_windows(const TokenDataset& train, const std::string& spec, const std::vector<int>& group_sizes,
                            uint64_t seed);

// Draws one Dirichlet vector with these concentrations from a seed (portable; no std:: distributions).
std::vector<double> dirichlet(const std::vector<double>& alphas, uint64_t seed);
// Dir(alpha, ..., alpha) of length n.
std::vector<double> dirichlet(double alpha, int n, uint64_t seed);

}  // namespace fedshard::data
