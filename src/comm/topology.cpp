#include "comm/topology.h"

#include <mpi.h>

#include <algorithm>
#include <map>
#include <numeric>
#include <sstream>

#include "comm/mpi_communicator.h"
#include "comm/nccl_communicator.h"
#include "comm/survivors.h"
#include "comm/work.h"
#include "util/error.h"

namespace fedshard::comm {

namespace {

// Node index of every world rank: the shared-memory domain of its host, numbered in rank order.
std::vector<int> detect_nodes(MPI_Comm base, int world, int rank) {
  MPI_Comm local;
  MPI_Comm_split_type(base, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &local);
  int leader = rank;
  MPI_Allreduce(MPI_IN_PLACE, &leader, 1, MPI_INT, MPI_MIN, local);
  MPI_Comm_free(&local);
  std::vector<int> leaders(world);
  MPI_Allgather(&leader, 1, MPI_INT, leaders.data(), 1, MPI_INT, base);
  std::map<int, int> index;
  for (int l : leaders) index.emplace(l, static_cast<int>(index.size()));
  std::vector<int> node_of(world);
  for (int r = 0; r < world; ++r) node_of[r] = index[leaders[r]];
  return node_of;
}

}  // namespace

Topology::Topology(Layout layout, const TopologySpec& spec, MPI_Comm base) : layout_(std::move(layout)), base_(base) {
  int world = 1;
  MPI_Comm_size(base_, &world);
  MPI_Comm_rank(base_, &world_rank_);
  FS_CHECK(world == layout_.world(), "the layout has ", layout_.world(), " ranks (groups ",
           layout_.describe_groups(), ") but the job has ", world);
  emulated_nodes_ = spec.ranks_per_node > 0;
  if (emulated_nodes_)
    layout_.place_on_nodes(spec.ranks_per_node);
  else
    layout_.place_on_nodes(detect_nodes(base_, world, world_rank_));
  coords_ = layout_.coords(world_rank_);

  std::vector<int> all(world);
  std::iota(all.begin(), all.end(), 0);
  world_ = split(all, "world", spec);
  group_ = split(layout_.group_members(world_rank_), "group", spec);
  shard_ = split(layout_.shard_members(world_rank_), "shard", spec);
  replica_ = split(layout_.replica_members(world_rank_), "replica", spec);
  if (layout_.groups() == 1) return;
  // A rank may own several segments: split in rounds of segments with disjoint owners.
  auto pending = layout_.segments();
  while (!pending.empty()) {
    std::vector<bool> busy(world, false);
    std::vector<Segment> round, later;
    for (auto& s : pending) {
      const bool free = std::none_of(s.ranks.begin(), s.ranks.end(), [&](int r) { return busy[r]; });
      if (free)
        for (int r : s.ranks) busy[r] = true;
      (free ? round : later).push_back(std::move(s));
    }
    const auto mine = std::find_if(round.begin(), round.end(), [&](const Segment& s) {
      return std::count(s.ranks.begin(), s.ranks.end(), world_rank_) > 0;
    });
    auto comm = split(mine == round.end() ? std::vector<int>{} : mine->ranks, "segment", spec);
    if (comm) segments_.push_back({*mine, std::move(comm)});
    pending = std::move(later);
  }
  std::sort(segments_.begin(), segments_.end(),
            [](const SegmentComm& a, const SegmentComm& b) { return a.segment.begin < b.segment.begin; });
}

Topology::~Topology() = default;

void Topology::revoke_all() {
  for (auto* c : {world_.get(), group_.get(), shard_.get(), replica_.get()})
    if (c) c->revoke();
  for (auto& s : segments_) s.comm->revoke();
}

std::unique_ptr<Communicator> Topology::split(const std::vector<int>& members, const std::string& name,
                                              const TopologySpec& spec) {
  const auto me = std::find(members.begin(), members.end(), world_rank_);
  const bool in = me != members.end();
  const int color = in ? members.front() : MPI_UNDEFINED;
  const int key = in ? static_cast<int>(me - members.begin()) : 0;
  MPI_Comm comm;
  if (const int rc = MPI_Comm_split(base_, color, key, &comm); rc != MPI_SUCCESS) {
    const std::string what = "MPI_Comm_split failed for communicator '" + name + "': " + mpi_error_string(rc);
    // A rank lost while the engine is rebuilt after another loss: one more loss (train/trainer.cpp).
    if (is_peer_failure(rc)) throw PeerLost(what, is_revoked(rc));
    throw std::runtime_error(what);
  }
  const Tier tier = in ? layout_.tier(members) : Tier::Node;
  if (spec.backend == "nccl") {
#ifdef FEDSHARD_CUDA
    // The first communicator (world) is made from an NCCL id; the others are split from it.
    if (!in) {
      NcclCommunicator::sit_out_split(*nccl_world_);
      return nullptr;
    }
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
  if (!in) return nullptr;
  return std::make_unique<MpiCommunicator>(comm, name, tier, name == "segment" ? Lane::Federation : Lane::Inner);
}

std::string Topology::describe() const {
  const auto& l = layout_;
  std::ostringstream os;
  os << l.world() << " ranks on " << l.nodes() << (emulated_nodes_ ? " emulated" : "") << " node(s); ";
  if (l.equal_groups())
    os << l.groups() << " group(s) of " << l.group_size(0) << ", shard size " << l.shard_size(0) << ", "
       << l.replicas(0) << " replica(s) per group";
  else
    os << l.groups() << " groups of " << l.describe_groups() << " ranks, shard size "
       << (l.shard_spec() == 0 ? std::string("= group") : std::to_string(l.shard_spec()));
  return os.str();
}

}  // namespace fedshard::comm
