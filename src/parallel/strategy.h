// A strategy is a composition: inner sharding (ddp | fsdp | hsdp) x federation (none | groups of S ranks
// averaged every K steps). This file turns a strategy name and sizes into the topology they need.
#pragma once

#include <string>

#include "comm/topology.h"

namespace fedshard::parallel {

enum class InnerSharding { Ddp, Fsdp, Hsdp };

struct Strategy {
  InnerSharding inner = InnerSharding::Fsdp;
  bool federated = false;
  std::string name() const;
};

// Throws fedshard::Error on an unknown name.
Strategy parse_strategy(const std::string& name);

// Group size S and shard size H for `world` ranks (group_size/shard_size 0 = not given). Rejects with one
// clear line what cannot work: a group size without federation, a shard size with ddp/fsdp, hsdp without a
// shard size, sizes that do not divide. Local: call on every rank before any collective.
comm::TopologySpec topology_spec(const Strategy& s, int world, int group_size, int shard_size, int ranks_per_node);

}  // namespace fedshard::parallel
