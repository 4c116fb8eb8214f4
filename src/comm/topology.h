// The communicators of one rank, built once with MPI_Comm_split from the Layout (which owns all the rank
// arithmetic): world, its group, its shard group, its replica group, and one communicator per segment of the
// model it averages across groups. Each is classified into the tier its traffic crosses.
#pragma once

#include <mpi.h>

#include <memory>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "comm/layout.h"

namespace fedshard::comm {

class NcclCommunicator;

// How the ranks run, as opposed to how they are grouped (Layout).
struct TopologySpec {
  int ranks_per_node = 0;  // 0 = detect nodes with MPI's shared-memory split; >0 emulates nodes of that size
  std::string backend = "mpi";  // mpi (CPU tensors, or CUDA tensors staged through the host) | nccl
  int device = 0;               // CUDA device of this rank (nccl)
};

// A segment this rank averages across groups, with the communicator of its owners.
struct SegmentComm {
  Segment segment;
  std::unique_ptr<Communicator> comm;
};

class Topology {
 public:
  // Collective over `base` (the job's world, or the survivors of a lost group: comm/survivors.h), whose size
  // must be layout.world(); the layout's ranks are base's.
  Topology(Layout layout, const TopologySpec& spec, MPI_Comm base = MPI_COMM_WORLD);
  ~Topology();

  const Layout& layout() const { return layout_; }
  MPI_Comm base() const { return base_; }
  int world_rank() const { return world_rank_; }
  const Coords& coords() const { return coords_; }
  bool emulated_nodes() const { return emulated_nodes_; }

  Communicator& world() { return *world_; }
  Communicator& group() { return *group_; }
  Communicator& shard() { return *shard_; }
  Communicator& replica() { return *replica_; }
  // In flat order; empty with one group.
  const std::vector<SegmentComm>& segments() const { return segments_; }

  std::string describe() const;
  // After a PeerLost: revokes every communicator of this rank, so that each survivor, whichever collective it
  // is blocked in, learns of the loss (comm/survivors.h).
  void revoke_all();

 private:
  // Collective over the world: the communicator of the ranks passing `members` that hold this rank; null
  // where none does.
  std::unique_ptr<Communicator> split(const std::vector<int>& members, const std::string& name,
                                      const TopologySpec& spec);

  Layout layout_;
  MPI_Comm base_;
  int world_rank_ = 0;
  Coords coords_;
  bool emulated_nodes_ = false;
  std::unique_ptr<Communicator> world_, group_, shard_, replica_;
  std::vector<SegmentComm> segments_;
  NcclCommunicator* nccl_world_ = nullptr;  // world_ under the nccl backend: the parent of every split
};

}  // namespace fedshard::comm
