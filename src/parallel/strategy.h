// A strategy is a composition: inner sharding (ddp | fsdp | hsdp) x federation (none | groups averaged every
// K steps). This file turns a strategy name and sizes into the rank layout they need.
#pragma once

#include <string>

#include <vector>

#include "comm/layout.h"

namespace fedshard::parallel {

enum class InnerSharding { Ddp, Fsdp, Hsdp };

struct Strategy {
  InnerSharding inner = InnerSharding::Fsdp;
  bool federated = false;
  std::string name() const;
};

// Throws fedshard::Error on an unknown name.
Strategy parse_strategy(const std::string& name);

// The layout of `world` ranks: federation groups given as sizes (`groups`, e.g. {4, 2, 2}) or as one size S
// (group_size), shard size H (0 = not given). Rejects with one clear line what cannot work: groups without
// federation, both forms of groups, a shard size with ddp/fsdp, hsdp without one, sizes that do not divide
// or do not add up to the world. Local: call on every rank before any collective.
comm::Layout make_layout(const Strategy& s, int world, const std::vector<int>& groups, int group_size, int shard_size);

}  // namespace fedshard::parallel
