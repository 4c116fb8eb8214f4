// Which windows each reader takes at each step: epochs of seeded permutations of a pool of window ids.
#pragma once

#include <cstdint>
#include <vector>

namespace fedshard::data {

// Serves `readers` readers from a pool of window ids, batch_size windows per reader per step. Within an epoch
// every window is used once: step s, reader q, item b takes position j = (s*readers + q)*batch_size + b of the
// concatenation of per-epoch permutations of the pool (epoch e = j / pool.size(), permutation seeded by
// (seed, stream, e)). Deterministic in (seed, stream, step, reader); readers get disjoint windows within an epoch.
// Keeps the last two epochs' permutations, so sequential steps cost O(batch_size). Not thread-safe.
class WindowSampler {
 public:
  WindowSampler(std::vector<int64_t> pool, int readers, int batch_size, uint64_t seed, uint64_t stream);
  std::vector<int64_t> windows(int64_t step, int reader) const;
  int64_t pool_size() const { return static_cast<int64_t>(pool_.size()); }

 private:
  struct Epoch {
    int64_t index = -1;
    std::vector<int64_t> order;
  };
  const std::vector<int64_t>& permutation(int64_t epoch) const;

  std::vector<int64_t> pool_;
  int readers_;
  int batch_size_;
  uint64_t seed_;
  uint64_t stream_;
  mutable Epoch cache_[2];  // a step can straddle an epoch boundary
};

}  // namespace fedshard::data
