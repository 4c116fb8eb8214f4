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

comm::Layout make_layout(const Strategy& s, int world, const std::vector<int>& groups, int group_size, int shard_size) {
  FS_CHECK(group_size >= 0 && shard_size >= 0, "group and shard sizes must be positive");
  FS_CHECK(groups.empty() || group_size == 0, "give the federation groups either as --groups or as --group-size, not both");
  std::vector<int> sizes = groups;
  if (s.federated) {
    FS_CHECK(!sizes.empty() || group_size > 0, s.name(), " needs --group-size S or --groups S1,S2,... (ranks per federation group)");
  } else {
    FS_CHECK(sizes.empty() || sizes == std::vector<int>{world}, s.name(), " has no federation groups: --groups needs an fl-* strategy (or drop it)");
    FS_CHECK(group_size == 0 || group_size == world, s.name(), " has no federation groups: --group-size ", group_size,
             " needs an fl-* strategy (or drop it)");
  }
  int shard = 0;
  switch (s.inner) {
    case InnerSharding::Ddp:
      FS_CHECK(shard_size == 0 || shard_size == 1, s.name(), " does not shard parameters: --shard-size ", shard_size,
               " needs hsdp or fl-hsdp");
      shard = 1;
      break;
    case InnerSharding::Fsdp: {
      const int whole = sizes.empty() ? (group_size == 0 ? world : group_size) : 0;
      FS_CHECK(shard_size == 0 || shard_size == whole, s.name(), " shards over the whole group: --shard-size ", shard_size,
               " needs hsdp or fl-hsdp");
      break;
    }
    case InnerSharding::Hsdp:
      FS_CHECK(shard_size > 0, s.name(), " needs --shard-size H (ranks per shard group)");
      shard = shard_size;
      break;
  }
  if (sizes.empty()) return comm::Layout::uniform(world, group_size, shard);
  int total = 0;
  for (int g : sizes) total += g;
  FS_CHECK(total == world, "--groups ", comm::Layout(sizes, 0).describe_groups(), " adds up to ", total,
           " ranks but the job has ", world);
  return comm::Layout(sizes, shard);
}

}  // namespace fedshard::parallel
