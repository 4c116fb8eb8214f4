// Virtual ranks and virtual groups (parallel.emulate, --emulate): a job that computes, number for number, what a
// world of G federation groups of S ranks computes, played by the real ranks available. The real ranks form
// G_r groups of S_r = gcd(S, N) ranks (N = G_r x S_r); each real group holds G / G_r virtual groups, whose
// models and optimizer states it trains in turn every step, and each real rank plays S / S_r virtual ranks
// of each of those groups by gradient accumulation. Sharding inside a group and the real ranks' share of it
// change only the order of sums, so the virtual layout's losses and models are reproduced to rounding.
#pragma once

#include <string>
#include <vector>

#include "comm/layout.h"
#include "parallel/strategy.h"

namespace fedshard::parallel {

struct Emulation {
  comm::Layout virtual_layout;  // what the job computes: data, batch per optimizer step, metrics
  comm::Layout real;            // the ranks that run it: communicators, sharding
  int groups_per_rank = 1;      // V_g: virtual groups each real group holds
  int ranks_per_rank = 1;       // V_s: virtual ranks of a group each real rank plays

  bool active() const { return groups_per_rank > 1 || ranks_per_rank > 1; }
  // Virtual groups held by real rank r's group, in training order; virtual positions r plays in each.
  std::vector<int> groups_of(int real_rank) const;
  std::vector<int> positions_of(int real_rank) const;
  // "4x2 on 2 rank(s) (1x2; 4 group(s) per rank group, 1 virtual rank(s) per rank)", for logs.
  std::string describe() const;
};

// spec: "" (no emulation: the layout of the real world from group_size/groups/shard_size, as make_layout),
// "W" (ddp/fsdp/hsdp: a world of W ranks) or "GxS" (G groups of S ranks; fl-* only, or 1xW). shard_size is
// the virtual H (hsdp, fl-hsdp). Throws fedshard::Error naming the numbers when the real ranks cannot play
// the virtual layout (N must divide G x S with a whole number of virtual groups per real group).
Emulation plan_emulation(const Strategy& s, const std::string& spec, int real_world, const std::vector<int>& groups,
                         int group_size, int shard_size);

}  // namespace fedshard::parallel
