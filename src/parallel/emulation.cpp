#include "parallel/emulation.h"

#include <numeric>

#include "util/error.h"

namespace fedshard::parallel {

namespace {

int parse_count(const std::string& text, const std::string& spec) {
  size_t used = 0;
  int v = 0;
  try {
    v = std::stoi(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  FS_CHECK(used == text.size() && !text.empty() && v > 0, "parallel.emulate = '", spec,
           "': expected W (a world of W ranks) or GxS (G groups of S ranks), positive integers");
  return v;
}

}  // namespace

std::vector<int> Emulation::groups_of(int real_rank) const {
  std::vector<int> g;
  const int first = real.coords(real_rank).group * groups_per_rank;
  for (int j = 0; j < groups_per_rank; ++j) g.push_back(first + j);
  return g;
}

std::vector<int> Emulation::positions_of(int real_rank) const {
  std::vector<int> p;
  const int first = real.coords(real_rank).position * ranks_per_rank;
  for (int i = 0; i < ranks_per_rank; ++i) p.push_back(first + i);
  return p;
}

std::string Emulation::describe() const {
  if (!active()) return real.describe_groups();
  return cat(virtual_layout.describe_groups(), " on ", real.world(), " rank(s) (", real.describe_groups(), "; ",
             groups_per_rank, " group(s) per rank group, ", ranks_per_rank, " virtual rank(s) per rank)");
}

Emulation plan_emulation(const Strategy& s, const std::string& spec, int real_world, const std::vector<int>& groups,
                         int group_size, int shard_size) {
  Emulation e;
  if (spec.empty()) {
    e.real = make_layout(s, real_world, groups, group_size, shard_size);
    e.virtual_layout = e.real;
    return e;
  }
  FS_CHECK(groups.empty() && group_size == 0, "parallel.emulate = '", spec, "' gives the groups; drop ",
           "parallel.group_size/groups (--group-size/--groups)");
  const auto x = spec.find('x');
  int g = 1, size = 0;
  if (x == std::string::npos) {
    size = parse_count(spec, spec);
    FS_CHECK(!s.federated, s.name(), " needs parallel.emulate = GxS (G federation groups of S ranks), got '", spec, "'");
  } else {
    g = parse_count(spec.substr(0, x), spec);
    size = parse_count(spec.substr(x + 1), spec);
    FS_CHECK(s.federated || g == 1, s.name(), " has no federation groups: parallel.emulate = '", spec,
             "' needs an fl-* strategy (or W for a world of W ranks)");
  }
  const int world = g * size;
  e.virtual_layout = make_layout(s, world, {}, s.federated ? size : 0, shard_size);
  FS_CHECK(real_world <= world, "parallel.emulate = ", spec, " is a world of ", world, " rank(s) but the job has ",
           real_world, " real ranks: use at most ", world);
  const int real_size = std::gcd(size, real_world);
  const int real_groups = real_world / real_size;
  FS_CHECK(g % real_groups == 0, "parallel.emulate = ", spec, " (", g, " group(s) of ", size, ") cannot be played by ",
           real_world, " real ranks: a group of ", size, " takes gcd(", size, ", ", real_world, ") = ", real_size,
           " real ranks, leaving ", real_groups, " real groups for ", g, " virtual groups (", g, " is not a multiple of ",
           real_groups, "); use a rank count that divides ", world, " evenly into groups");
  int real_shard = 0;  // fsdp: the whole real group
  if (s.inner == InnerSharding::Ddp) real_shard = 1;
  if (s.inner == InnerSharding::Hsdp) real_shard = std::gcd(e.virtual_layout.shard_size(0), real_size);
  e.real = comm::Layout::uniform(real_world, s.federated ? real_size : 0, real_shard);
  e.groups_per_rank = g / real_groups;
  e.ranks_per_rank = size / real_size;
  return e;
}

}  // namespace fedshard::parallel
