// A portable, fully specified random stream (splitmix64, Steele/Lea/Flood 2014). Data splits and sample orders
// must not change with the standard library, so nothing here uses std:: engines or distributions.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <utility>
#include <vector>

namespace fedshard {

// The splitmix64 output function: a bijective 64-bit mix.
inline uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

// One seed from several parts (e.g. seed, stream, epoch); the order of the parts matters.
inline uint64_t derive_seed(std::initializer_list<uint64_t> parts) {
  uint64_t h = 0x243f6a8885a308d3ULL;
  for (uint64_t p : parts) h = mix64(h ^ mix64(p));
  return h;
}

class SplitMix64 {
 public:
  explicit SplitMix64(uint64_t seed) : state_(seed) {}

  uint64_t next() { return mix64(state_ += 0x9e3779b97f4a7c15ULL); }

  // Uniform in [0, n), n > 0, without modulo bias: rejecting the lowest 2^64 mod n values leaves a multiple of n.
  uint64_t below(uint64_t n) {
    const uint64_t reject_under = (0 - n) % n;
    uint64_t r;
    do r = next();
    while (r < reject_under);
    return r % n;
  }

 private:
  uint64_t state_;
};

// Fisher-Yates, drawing j uniformly from [0, i] for i = n-1 .. 1.
template <class T>
void shuffle(std::vector<T>& items, SplitMix64& rng) {
  for (size_t i = items.size(); i > 1; --i) std::swap(items[i - 1], items[rng.below(i)]);
}

}  // namespace fedshard
