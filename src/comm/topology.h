// The rank layout of DESIGN.md "Topology": world of N ranks, federation groups of S ranks, shards of H ranks
// inside a group (R = S/H replicas per group, G = N/S groups), and every communicator built once with
// MPI_Comm_split. Each communicator is classified into the tier its traffic crosses.
#pragma once

#include <memory>
#include <string>

#include "comm/communicator.h"

namespace fedshard::comm {

class NcclCommunicator;

struct TopologySpec {
  int group_size = 0;      // S; 0 = the whole world (no federation)
  int shard_size = 0;      // H; 0 = the whole group (FSDP)
  int ranks_per_node = 0;  // 0 = detect nodes with MPI's shared-memory split; >0 emulates nodes of that size
  std::string backend = "mpi";  // mpi (CPU tensors, or CUDA tensors staged through the host) | nccl
  int device = 0;               // CUDA device of this rank (nccl)
};

// Resolved sizes; validate() throws fedshard::Error naming the impossible combination.
struct Layout {
  int world = 1, group_size = 1, shard_size = 1;
  int groups() const { return world / group_size; }
  int replicas() const { return group_size / shard_size; }
  static Layout resolve(int world, const TopologySpec& spec);
};

class Topology {
 public:
  // Collective over MPI_COMM_WORLD.
  explicit Topology(const TopologySpec& spec);
  ~Topology();

  const Layout& layout() const { return layout_; }
  int world_rank() const { return world_rank_; }
  int group_index() const { return world_rank_ / layout_.group_size; }   // g
  int position() const { return world_rank_ % layout_.group_size; }     // p
  int replica_index() const { return position() / layout_.shard_size; }  // i
  int shard_index() const { return position() % layout_.shard_size; }    // h
  int nodes() const { return nodes_; }
  int ranks_per_node() const { return ranks_per_node_; }
  bool emulated_nodes() const { return emulated_nodes_; }

  Communicator& world() { return *world_; }
  Communicator& group() { return *group_; }
  Communicator& shard() { return *shard_; }
  Communicator& replica() { return *replica_; }
  Communicator& cross() { return *cross_; }

  std::string describe() const;

 private:
  std::unique_ptr<Communicator> split(int color, int key, const std::string& name, const TopologySpec& spec);

  Layout layout_;
  int world_rank_ = 0;
  int nodes_ = 1;
  int ranks_per_node_ = 1;
  bool emulated_nodes_ = false;
  std::vector<int> node_of_;  // node index of every world rank
  std::unique_ptr<Communicator> world_, group_, shard_, replica_, cross_;
  NcclCommunicator* nccl_world_ = nullptr;  // world_ under the nccl backend: the parent of every split
};

}  // namespace fedshard::comm
