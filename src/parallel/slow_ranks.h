// Emulated stragglers (--slow, train.slow): "RANK=FACTOR" and "group:G=FACTOR" items, comma-separated. A rank
// with factor f > 1 sleeps (f - 1) x its own compute time after every step (forward, backward, optimizer):
// its step takes f times as long and, sleeping, it leaves the core to the other ranks of an oversubscribed
// box. The trainer and `fedshard plan` read the same spec.
#pragma once

#include <string>
#include <vector>

#include "comm/layout.h"

namespace fedshard::parallel {

// Factor of every rank of `layout` (1 where none is named; the largest where several items name a rank).
// Throws fedshard::Error naming a malformed item, a rank or group outside the layout, or a factor below 1.
std::vector<double> slow_factors(const std::string& spec, const comm::Layout& layout);

// The factor of `rank` of `layout`, and its group's: the largest of its members' (a group runs at the pace of its
// slowest rank).
struct Pace {
  double rank = 1, group = 1;
};
Pace pace_of(const std::string& spec, const comm::Layout& layout, int rank);

}  // namespace fedshard::parallel
