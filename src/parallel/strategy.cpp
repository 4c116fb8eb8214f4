#include "parallel/strategy.h"

#include "util/error.h"

namespace fedshard::parallel {

std::string Strategy::name() const {
  const char* inner_name = inner == InnerSharding::Ddp ? "ddp" : inner == InnerSharding::Fsdp ? "fsdp" : "hsdp";
  return federated ? std::string("fl-") + inner_name : inner_name;
}

Strategy parse_strategy(const std::string& name) {
  Strategy s;
  std::string inner = name;
  if (inner.rfind("fl-", 0) == 0) {
    s.federated = true;
    inner = inner.substr(3);
  }
  if (inner == "ddp")
    s.inner = InnerSharding::Ddp;
  else if (inner == "fsdp")
    s.inner = InnerSharding::Fsdp;
  else if (inner == "hsdp")
    s.inner = InnerSharding::Hsdp;
  else
    throw Error(cat("unknown strategy '", name, "' (expected ddp, fsdp, hsdp, fl-ddp, fl-fsdp or fl-hsdp)"));
  return s;
}

comm::TopologySpec topology_spec(const Strategy& s, int world, int group_size, int shard_size, int ranks_per_node) {
  comm::TopologySpec spec;
  spec.ranks_per_node = ranks_per_node;
  if (s.federated) {
    FS_CHECK(group_size > 0, s.name(), " needs --group-size S (ranks per federation group)");
    spec.group_size = group_size;
  } else {
    FS_CHECK(group_size == 0 || group_size == world, s.name(), " has no federation groups: --group-size ", group_size,
             " needs an fl-* strategy (or drop it)");
    spec.group_size = world;
  }
  switch (s.inner) {
    case InnerSharding::Ddp:
      FS_CHECK(shard_size == 0 || shard_size == 1, s.name(), " does not shard parameters: --shard-size ", shard_size,
               " needs hsdp or fl-hsdp");
      spec.shard_size = 1;
      break;
    case InnerSharding::Fsdp:
      FS_CHECK(shard_size == 0 || shard_size == spec.group_size, s.name(), " shards over the whole group (",
               spec.group_size, " ranks): --shard-size ", shard_size, " needs hsdp or fl-hsdp");
      spec.shard_size = spec.group_size;
      break;
    case InnerSharding::Hsdp:
      FS_CHECK(shard_size > 0, s.name(), " needs --shard-size H (ranks per shard group)");
      spec.shard_size = shard_size;
      break;
  }
  comm::Layout::resolve(world, spec);  // throws on sizes that do not divide
  return spec;
}

}  // namespace fedshard::parallel
