#include "comm/topology.h"

#include <mpi.h>

#include <algorithm>
#include <map>
#include <set>
#include <sstream>

#include "comm/mpi_communicator.h"
#include "comm/nccl_communicator.h"
#include "util/error.h"

namespace fedshard::comm {

Layout Layout::resolve(int world, const TopologySpec& spec) {
  Layout l;
  l.world = world;
  FS_CHECK(spec.group_size >= 0, "group size must be positive, got ", spec.group_size);
  FS_CHECK(spec.shard_size >= 0, "shard size must be positive, got ", spec.shard_size);
  l.group_size = spec.group_size == 0 ? world : spec.group_size;
  FS_CHECK(l.group_size <= world, "group size ", l.group_size, " exceeds the world size ", world);
  FS_CHECK(world % l.group_size == 0, "group size ", l.group_size, " does not divide the world size ", world);
  l.shard_size = spec.shard_size == 0 ? l.group_size : spec.shard_size;
  FS_CHECK(l.shard_size <= l.group_size, "shard size ", l.shard_size, " exceeds the group size ", l.group_size);
  FS_CHECK(l.group_size % l.shard_size == 0, "shard size ", l.shard_size, " does not divide the group size ",
           l.group_size);
  if (spec.ranks_per_node > 0)
    FS_CHECK(world % spec.ranks_per_node == 0, "ranks per node ", spec.ranks_per_node,
             " does not divide the world size ", world);
  return l;
}

Topology::Topology(const TopologySpec& spec) {
  int world = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  MPI_Comm_rank(MPI_COMM_WORLD, &world_rank_);
  layout_ = Layout::resolve(world, spec);

  // Node of every rank: emulated (contiguous blocks) or the shared-memory domain of its host.
  node_of_.assign(world, 0);
  if (spec.ranks_per_node > 0) {
    emulated_nodes_ = true;
    for (int r = 0; r < world; ++r) node_of_[r] = r / spec.ranks_per_node;
  } else {
    MPI_Comm local;
    MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, world_rank_, MPI_INFO_NULL, &local);
    int leader = world_rank_;
    MPI_Allreduce(MPI_IN_PLACE, &leader, 1, MPI_INT, MPI_MIN, local);
    MPI_Comm_free(&local);
    std::vector<int> leaders(world);
    MPI_Allgather(&leader, 1, MPI_INT, leaders.data(), 1, MPI_INT, MPI_COMM_WORLD);
    std::map<int, int> index;
    for (int l : leaders) index.emplace(l, static_cast<int>(index.size()));
    for (int r = 0; r < world; ++r) node_of_[r] = index[leaders[r]];
  }
  nodes_ = *std::max_element(node_of_.begin(), node_of_.end()) + 1;
  ranks_per_node_ = world / nodes_;

  const int h = layout_.shard_size, rg = layout_.replicas();
  const int g = group_index(), p = position(), i = replica_index(), hi = shard_index();
  world_ = split(0, world_rank_, "world", spec);
  group_ = split(g, p, "group", spec);
  shard_ = split(g * rg + i, hi, "shard", spec);
  replica_ = split(g * h + hi, i, "replica", spec);
  cross_ = split(p, g, "cross", spec);
}

Topology::~Topology() = default;

std::unique_ptr<Communicator> Topology::split(int color, int key, const std::string& name, const TopologySpec& spec) {
  MPI_Comm comm;
  if (MPI_Comm_split(MPI_COMM_WORLD, color, key, &comm) != MPI_SUCCESS)
    throw std::runtime_error("MPI_Comm_split failed for communicator '" + name + "'");
  const auto members = world_ranks_of(comm);
  std::set<int> groups, nodes;
  for (int r : members) {
    groups.insert(r / layout_.group_size);
    nodes.insert(node_of_[r]);
  }
  const Tier tier = groups.size() > 1 ? Tier::InterGroup : nodes.size() > 1 ? Tier::InterNode : Tier::Node;
  if (spec.backend == "nccl") {
#ifdef FEDSHARD_CUDA
    // The first communicator (world) is made from an NCCL id; the others are split from it.
    std::unique_ptr<NcclCommunicator> c;
    if (!nccl_world_) {
      c = std::make_unique<NcclCommunicator>(comm, name, tier, spec.device);
      nccl_world_ = c.get();
    } else {
      c = std::make_unique<NcclCommunicator>(*nccl_world_, color, key, comm, name, tier);
    }
    MPI_Comm_free(&comm);
    return c;
#else
    throw Error("the nccl backend needs a build against a CUDA LibTorch (FEDSHARD_CUDA)");
#endif
  }
  return std::make_unique<MpiCommunicator>(comm, name, tier);
}

std::string Topology::describe() const {
  std::ostringstream os;
  os << layout_.world << " ranks on " << nodes_ << (emulated_nodes_ ? " emulated" : "") << " node(s) of "
     << ranks_per_node_ << "; " << layout_.groups() << " group(s) of " << layout_.group_size << ", shard size "
     << layout_.shard_size << ", " << layout_.replicas() << " replica(s) per group";
  return os.str();
}

}  // namespace fedshard::comm
