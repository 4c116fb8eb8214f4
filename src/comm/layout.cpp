#include "comm/layout.h"

#include <algorithm>
#include <numeric>
#include <set>
#include <sstream>

#include "util/error.h"

namespace fedshard::comm {

Layout::Layout(std::vector<int> group_sizes, int shard, int64_t pad_multiple)
    : sizes_(std::move(group_sizes)), shard_spec_(shard) {
  FS_CHECK(!sizes_.empty(), "a layout needs at least one group");
  FS_CHECK(shard_spec_ >= 0, "shard size must be positive, got ", shard_spec_);
  for (int g = 0; g < groups(); ++g) {
    FS_CHECK(sizes_[g] > 0, "group ", g, " has ", sizes_[g], " ranks; every group needs at least one");
    FS_CHECK(shard_spec_ <= sizes_[g], "shard size ", shard_spec_, " exceeds the size ", sizes_[g], " of group ", g);
    FS_CHECK(sizes_[g] % shard_size(g) == 0, "shard size ", shard_spec_, " does not divide group ", g, " (",
             sizes_[g], " ranks); with hsdp every group must be a multiple of the shard size");
    first_.push_back(world_);
    world_ += sizes_[g];
  }
  node_of_.assign(world_, 0);
  for (int s : sizes_) pad_multiple_ = std::lcm(pad_multiple_, static_cast<int64_t>(s));
  FS_CHECK(pad_multiple >= 0 && pad_multiple % pad_multiple_ == 0, "pad multiple ", pad_multiple,
           " is not a multiple of every group size (", describe_groups(), ")");
  if (pad_multiple > 0) pad_multiple_ = pad_multiple;
}

Layout Layout::uniform(int world, int group_size, int shard_size) {
  FS_CHECK(world > 0, "world size must be positive, got ", world);
  FS_CHECK(group_size >= 0, "group size must be positive, got ", group_size);
  const int s = group_size == 0 ? world : group_size;
  FS_CHECK(s <= world, "group size ", s, " exceeds the world size ", world);
  FS_CHECK(world % s == 0, "group size ", s, " does not divide the world size ", world,
           " (use --groups for groups of different sizes)");
  FS_CHECK(shard_size >= 0, "shard size must be positive, got ", shard_size);
  FS_CHECK(shard_size <= s, "shard size ", shard_size, " exceeds the group size ", s);
  FS_CHECK(shard_size == 0 || s % shard_size == 0, "shard size ", shard_size, " does not divide the group size ", s);
  return Layout(std::vector<int>(world / s, s), shard_size);
}

bool Layout::equal_groups() const {
  return std::all_of(sizes_.begin(), sizes_.end(), [&](int s) { return s == sizes_.front(); });
}

Coords Layout::coords(int rank) const {
  FS_ASSERT(rank >= 0 && rank < world_, "rank ", rank, " outside a world of ", world_);
  Coords c;
  c.group = static_cast<int>(std::upper_bound(first_.begin(), first_.end(), rank) - first_.begin()) - 1;
  c.position = rank - first_[c.group];
  c.replica = c.position / shard_size(c.group);
  c.shard = c.position % shard_size(c.group);
  return c;
}

std::vector<int> Layout::group_members(int rank) const {
  const int g = coords(rank).group;
  std::vector<int> m(sizes_[g]);
  std::iota(m.begin(), m.end(), first_[g]);
  return m;
}

std::vector<int> Layout::shard_members(int rank) const {
  const auto c = coords(rank);
  const int h = shard_size(c.group);
  std::vector<int> m;
  for (int k = 0; k < h; ++k) m.push_back(first_[c.group] + c.replica * h + k);
  return m;
}

std::vector<int> Layout::replica_members(int rank) const {
  const auto c = coords(rank);
  const int h = shard_size(c.group);
  std::vector<int> m;
  for (int i = 0; i < replicas(c.group); ++i) m.push_back(first_[c.group] + i * h + c.shard);
  return m;
}

Range Layout::shard_range(int64_t padded, int rank) const {
  const auto c = coords(rank);
  FS_ASSERT(padded % pad_multiple() == 0, "flat of ", padded, " elements is not padded for this layout");
  const int64_t len = padded / shard_size(c.group);
  return {c.shard * len, (c.shard + 1) * len};
}

Range Layout::slice_range(int64_t padded, int rank) const {
  const auto c = coords(rank);
  const auto [a, b] = shard_range(padded, rank);
  const int64_t piece = (b - a) / replicas(c.group);
  return {a + c.replica * piece, a + (c.replica + 1) * piece};
}

std::vector<Segment> Layout::segments() const {
  const int64_t units = pad_multiple();
  std::set<int64_t> cuts;
  for (int s : sizes_)
    for (int64_t k = 0; k <= s; ++k) cuts.insert(k * (units / s));
  std::vector<Segment> out;
  for (auto it = cuts.begin(); std::next(it) != cuts.end(); ++it) {
    Segment seg{*it, *std::next(it), {}};
    for (int g = 0; g < groups(); ++g) {
      // Group g's pieces in flat order: piece j = h * R_g + i belongs to position i * H + h.
      const int64_t j = seg.begin / (units / sizes_[g]);
      const int r = replicas(g), h = shard_size(g);
      seg.ranks.push_back(first_[g] + static_cast<int>(j % r) * h + static_cast<int>(j / r));
    }
    out.push_back(std::move(seg));
  }
  return out;
}

Range Layout::segment_range(const Segment& s, int64_t padded) const {
  FS_ASSERT(padded % pad_multiple() == 0, "flat of ", padded, " elements is not padded for this layout");
  const int64_t unit = padded / pad_multiple();
  return {s.begin * unit, s.end * unit};
}

void Layout::place_on_nodes(int ranks_per_node) {
  FS_CHECK(ranks_per_node > 0 && world_ % ranks_per_node == 0, "ranks per node ", ranks_per_node,
           " does not divide the world size ", world_);
  for (int r = 0; r < world_; ++r) node_of_[r] = r / ranks_per_node;
}

void Layout::place_on_nodes(std::vector<int> node_of) {
  FS_ASSERT(static_cast<int>(node_of.size()) == world_, "node list of ", node_of.size(), " ranks for ", world_);
  node_of_ = std::move(node_of);
}

int Layout::nodes() const { return *std::max_element(node_of_.begin(), node_of_.end()) + 1; }

Tier Layout::tier(const std::vector<int>& members) const {
  std::set<int> groups, nodes;
  for (int r : members) {
    groups.insert(coords(r).group);
    nodes.insert(node_of_.at(r));
  }
  return groups.size() > 1 ? Tier::InterGroup : nodes.size() > 1 ? Tier::InterNode : Tier::Node;
}

std::string Layout::describe_groups() const {
  std::ostringstream os;
  if (equal_groups()) return cat(groups(), "x", sizes_.front());
  for (int g = 0; g < groups(); ++g) os << (g ? "," : "") << sizes_[g];
  return os.str();
}

bool Layout::operator==(const Layout& o) const {
  if (sizes_ != o.sizes_ || pad_multiple_ != o.pad_multiple_) return false;
  for (int g = 0; g < groups(); ++g)
    if (shard_size(g) != o.shard_size(g)) return false;
  return true;
}

}  // namespace fedshard::comm
