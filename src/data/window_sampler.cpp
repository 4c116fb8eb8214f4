#include "data/window_sampler.h"

#include <utility>

#include "util/error.h"
#include "util/rng.h"

namespace fedshard::data {

WindowSampler::WindowSampler(std::vector<int64_t> pool, int readers, int batch_size, uint64_t seed,
                             uint64_t stream)
    : pool_(std::move(pool)), readers_(readers), batch_size_(batch_size), seed_(seed), stream_(stream) {
  FS_CHECK(!pool_.empty(), "no windows to sample from");
  FS_CHECK(readers >= 1, "number of readers must be positive, got ", readers);
  FS_CHECK(batch_size >= 1, "batch size must be positive, got ", batch_size);
}

const std::vector<int64_t>& WindowSampler::permutation(int64_t epoch) const {
  for (const Epoch& e : cache_)
    if (e.index == epoch) return e.order;
  // Replace the older epoch: the other one is the neighbour a straddling step still needs.
  Epoch& slot = cache_[0].index < cache_[1].index ? cache_[0] : cache_[1];
  slot.index = epoch;
  slot.order = pool_;
  SplitMix64 rng(derive_seed({seed_, stream_, static_cast<uint64_t>(epoch)}));
  shuffle(slot.order, rng);
  return slot.order;
}

std::vector<int64_t> WindowSampler::windows(int64_t step, int reader) const {
  FS_ASSERT(step >= 0 && reader >= 0 && reader < readers_, "step ", step, " reader ", reader, " of ", readers_);
  const auto n = static_cast<int64_t>(pool_.size());
  std::vector<int64_t> out;
  out.reserve(static_cast<size_t>(batch_size_));
  const int64_t first = (step * readers_ + reader) * batch_size_;
  for (int64_t j = first; j < first + batch_size_; ++j) out.push_back(permutation(j / n)[j % n]);
  return out;
}

}  // namespace fedshard::data
