// Rank geometry (DESIGN.md "Topology"), computed here and nowhere else: N ranks split into federation groups
// of S_g ranks (contiguous blocks of world ranks, sizes may differ), each group sharded over H ranks (FSDP:
// H = S_g) and replicated R_g = S_g / H times. It answers where a rank sits (group, position, replica,
// shard), which ranks each communicator holds, where a rank's shard and aggregation slice of a padded flat
// parameter lie, which ranks average each segment of the model across groups, and over which tier a set of
// ranks talks. Built and validated once from the configuration; no MPI.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "comm/tier.h"

namespace fedshard::comm {

struct Coords {
  int group = 0;     // g
  int position = 0;  // p, within the group
  int replica = 0;   // i = p / H
  int shard = 0;     // h = p % H
};

using Range = std::pair<int64_t, int64_t>;  // [begin, end)

// A piece of the model that one rank of every group holds in its aggregation slice; those G ranks average
// it. begin/end are in units of padded / pad_multiple().
struct Segment {
  int64_t begin = 0, end = 0;
  std::vector<int> ranks;  // one world rank per group, in group order
};

class Layout {
 public:
  Layout() : Layout({1}, 0) {}
  // group_sizes: S_g of each group in rank order; shard: H, dividing every group, or 0 = each group
  // shards over all its ranks (FSDP); pad_multiple: a multiple of every group size that flats are padded to,
  // 0 = their least common multiple. Throws fedshard::Error naming the impossible combination.
  Layout(std::vector<int> group_sizes, int shard, int64_t pad_multiple = 0);
  // `groups` equal groups of world / groups ranks.
  static Layout uniform(int world, int group_size, int shard_size);

  int world() const { return world_; }
  int groups() const { return static_cast<int>(sizes_.size()); }
  const std::vector<int>& group_sizes() const { return sizes_; }
  int group_size(int g) const { return sizes_.at(g); }
  bool equal_groups() const;
  int shard_size(int g) const { return shard_spec_ == 0 ? group_size(g) : shard_spec_; }
  int shard_spec() const { return shard_spec_; }  // H as given; 0 = the whole group
  int replicas(int g) const { return group_size(g) / shard_size(g); }
  int first_rank(int g) const { return first_.at(g); }

  Coords coords(int rank) const;
  std::vector<int> group_members(int rank) const;
  std::vector<int> shard_members(int rank) const;    // the H ranks sharing rank's replica
  std::vector<int> replica_members(int rank) const;  // the R_g ranks holding rank's shard

  // A multiple of every group size: flats padded to it split evenly into every group's shards and slices.
  // Groups kept after a loss keep the launch's (comm/survivors.cpp), so no kept rank's shard moves.
  int64_t pad_multiple() const { return pad_multiple_; }
  // Where rank's shard, and its aggregation slice (piece i of R_g of its shard), of a padded flat lie.
  Range shard_range(int64_t padded, int rank) const;
  Range slice_range(int64_t padded, int rank) const;
  // The common refinement of every group's slices: each segment has one owner per group. Their sizes sum
  // to the model once, so a round moves what a ring all-reduce of the model among G parties moves.
  std::vector<Segment> segments() const;
  // Where a segment lies in a padded flat.
  Range segment_range(const Segment& s, int64_t padded) const;

  // Nodes: contiguous blocks of ranks_per_node ranks, or one node index per rank (detected).
  void place_on_nodes(int ranks_per_node);
  void place_on_nodes(std::vector<int> node_of);
  int nodes() const;
  int node_of(int rank) const { return node_of_.at(rank); }
  // The slowest link a communicator with these members crosses.
  Tier tier(const std::vector<int>& members) const;

  // "4,2,2" or "2x4" for equal groups.
  std::string describe_groups() const;
  bool operator==(const Layout& o) const;
  bool operator!=(const Layout& o) const { return !(*this == o); }

 private:
  std::vector<int> sizes_;
  std::vector<int> first_;
  int shard_spec_ = 0;
  int64_t pad_multiple_ = 1;
  int world_ = 0;
  std::vector<int> node_of_;
};

}  // namespace fedshard::comm
