// Real lost ranks under ULFM (tests/recovery_primitives.sh runs it with `mpirun --with-ft ulfm -np 8`): 4
// federation groups of 2 ranks; after one all-reduce across all of them, the ranks named on the command line
// die (SIGKILL). Each survivor must see the loss as a PeerLost in its next collective (a group's all-reduce or
// a segment's, whichever it is blocked in: revoking spreads it), shrink the world with the others, agree on
// the lost ranks, regroup without every group that lost a rank, and average segments across the kept groups
// over the rebuilt communicators. Each survivor writes what it saw to DIR/rank.N; the script compares.
// Usage: recovery_primitives DIR KILLED_RANK...
#include <ATen/ATen.h>

#include <csignal>
#include <fstream>
#include <set>
#include <string>

#include "comm/failure_watch.h"
#include "comm/mpi_runtime.h"
#include "comm/survivors.h"
#include "comm/topology.h"

using namespace fedshard::comm;

namespace {

// Sum over the groups averaging each of this rank's segments of (group id + 1), as the segment all-reduce
// computes it (the same on every segment).
int segment_sums(Topology& topo, int group_id, double* sum) {
  int n = 0;
  for (const auto& s : topo.segments()) {
    auto t = at::full({1}, static_cast<double>(group_id + 1), at::kDouble);
    s.comm->all_reduce(t, ReduceOp::Sum)->wait();
    *sum = t.item<double>();
    ++n;
  }
  return n;
}

}  // namespace

int main(int argc, char** argv) {
  MpiRuntime runtime(&argc, &argv);
  // This program recovers from the loss itself: without this the failure watch ends a survivor as soon as it
  // knows of the loss (the runtime's default for a job that does not recover), racing the shrink below.
  FailureWatch::expect_recovery(true, 60);
  const std::string dir = argv[1];
  std::set<int> killed;
  for (int i = 2; i < argc; ++i) killed.insert(std::stoi(argv[i]));
  const int me = runtime.world_rank();
  std::ofstream out(dir + "/rank." + std::to_string(me));

  TopologySpec spec;
  spec.ranks_per_node = 2;
  Layout layout({2, 2, 2, 2}, 0);
  Topology topo(layout, spec);
  auto all = at::ones({1}, at::kDouble);
  topo.world().all_reduce(all, ReduceOp::Sum)->wait();
  out << "before: world sum " << all.item<double>() << "\n" << std::flush;

  if (killed.count(me)) std::raise(SIGKILL);

  // The survivors' next collectives: the group's (for a rank whose partner died) and the segments' (every
  // segment has an owner in the lost group).
  try {
    auto g = at::ones({1}, at::kDouble);
    topo.group().all_reduce(g, ReduceOp::Sum)->wait();
    double sum = 0;
    segment_sums(topo, topo.coords().group, &sum);
    out << "no failure seen\n";
    return 1;
  } catch (const PeerLost& e) {
    out << "peer lost\n" << std::flush;
    topo.revoke_all();
  }
  Survivors survivors = shrink_after_failure(MPI_COMM_WORLD);
  out << "lost:";
  for (int r : survivors.lost) out << " " << r;
  out << "\n";
  Regrouped next = regroup(survivors, layout);
  out << "lost groups:";
  for (int g : next.lost_groups) out << " " << g;
  out << "\n" << std::flush;
  if (next.comm == MPI_COMM_NULL) {
    out << "left\n";
  } else {
    {
      Topology after(next.layout, spec, next.comm);
      const int old_group = next.kept_groups.at(after.coords().group);
      double sum = 0;
      const int segments = segment_sums(after, old_group, &sum);
      out << "groups " << next.layout.describe_groups() << ", segments " << segments << ", segment sum " << sum
          << "\n";
    }
    MPI_Comm_free(&next.comm);
  }
  MPI_Comm_free(&survivors.comm);
  out << "done\n";
  out.close();
  runtime.finish(0);  // not MPI_Finalize: after a lost peer it may hang (comm/mpi_runtime.h)
}
