// Collective bandwidth of fedshard's MPI backend against raw MPI on the same buffers, and how much of a
// collective each design hides behind compute. Run: mpirun -np 4 build/bench/bench_collectives
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <vector>

#include "comm/mpi_runtime.h"
#include "comm/topology.h"

using namespace fedshard;
using Clock = std::chrono::steady_clock;

namespace {

// Median seconds of `reps` runs of f, every rank synchronized before each run.
double median_seconds(int reps, const std::function<void()>& f) {
  std::vector<double> t;
  for (int i = 0; i < reps; ++i) {
    MPI_Barrier(MPI_COMM_WORLD);
    const auto t0 = Clock::now();
    f();
    t.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
  }
  std::sort(t.begin(), t.end());
  double mx = t[t.size() / 2];
  MPI_Allreduce(MPI_IN_PLACE, &mx, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  return mx;
}

// A fixed amount of single-threaded compute (what a unit's forward would be doing meanwhile).
void compute(const at::Tensor& a, int matmuls) {
  for (int i = 0; i < matmuls; ++i) at::mm(a, a);
}

}  // namespace

int main(int argc, char** argv) {
  comm::MpiRuntime mpi(&argc, &argv);
  at::set_num_threads(1);
  comm::Topology topo(comm::Layout::uniform(comm::MpiRuntime::get().world_size(), 0, 0), {});
  auto& w = topo.world();
  const int p = w.size();
  const bool root = mpi.world_rank() == 0;
  if (root) {
    std::printf("# %d ranks; median of 9; bandwidth = ring bus bytes per rank / time\n", p);
    std::printf("%-15s %10s %12s %12s %8s\n", "collective", "MiB", "raw MB/s", "ours MB/s", "ours/raw");
  }
  for (int64_t mib : {1, 4, 16, 64}) {
    const int64_t n = mib * (1 << 20) / 4 / p * p;  // float32 elements, divisible by p
    auto full = at::randn({n});
    auto part = at::randn({n / p});
    struct Row {
      const char* name;
      comm::Collective kind;
      std::function<void()> raw, ours;
    };
    std::vector<Row> rows = {
        {"all_gather", comm::Collective::AllGather,
         [&] { MPI_Allgather(part.data_ptr(), n / p, MPI_FLOAT, full.data_ptr(), n / p, MPI_FLOAT, MPI_COMM_WORLD); },
         [&] { w.all_gather(part, full)->wait(); }},
        {"reduce_scatter", comm::Collective::ReduceScatter,
         [&] { MPI_Reduce_scatter_block(full.data_ptr(), part.data_ptr(), n / p, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD); },
         [&] { w.reduce_scatter(full, part, comm::ReduceOp::Sum)->wait(); }},
        {"all_reduce", comm::Collective::AllReduce,
         [&] { MPI_Allreduce(MPI_IN_PLACE, full.data_ptr(), n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD); },
         [&] { w.all_reduce(full, comm::ReduceOp::Sum)->wait(); }},
    };
    for (auto& r : rows) {
      const double bus = comm::ring_bus_bytes(r.kind, static_cast<double>(n) * 4, p) / 1e6;
      const double raw = median_seconds(9, r.raw), ours = median_seconds(9, r.ours);
      if (root)
        std::printf("%-15s %10lld %12.1f %12.1f %8.3f\n", r.name, static_cast<long long>(mib), bus / raw, bus / ours,
                    raw / ours);
    }
  }

  // Overlap: an all-gather in flight while the training thread computes. Our comm thread vs the same
  // non-blocking MPI call issued and waited on the training thread (progress only inside MPI calls).
  const int64_t n = 16 * (1 << 20) / 4 / p * p;
  auto full = at::empty({n}), part = at::randn({n / p});
  auto a = at::randn({256, 256});
  const double t_comm = median_seconds(7, [&] {
    MPI_Allgather(part.data_ptr(), n / p, MPI_FLOAT, full.data_ptr(), n / p, MPI_FLOAT, MPI_COMM_WORLD);
  });
  int matmuls = 1;
  while (median_seconds(3, [&] { compute(a, matmuls); }) < t_comm) matmuls *= 2;
  const double t_compute = median_seconds(7, [&] { compute(a, matmuls); });
  const double t_ours = median_seconds(7, [&] {
    auto h = w.all_gather(part, full);
    compute(a, matmuls);
    h->wait();
  });
  const double t_nb = median_seconds(7, [&] {
    MPI_Request req;
    MPI_Iallgather(part.data_ptr(), n / p, MPI_FLOAT, full.data_ptr(), n / p, MPI_FLOAT, MPI_COMM_WORLD, &req);
    compute(a, matmuls);
    MPI_Wait(&req, MPI_STATUS_IGNORE);
  });
  auto hidden = [&](double t) { return (t_comm + t_compute - t) / std::min(t_comm, t_compute); };
  if (root) {
    std::printf("\n# overlap of a 16 MiB all_gather with %.1f ms of compute (all_gather alone %.1f ms)\n",
                t_compute * 1e3, t_comm * 1e3);
    std::printf("%-40s %10s %14s\n", "design", "ms", "hidden share");
    std::printf("%-40s %10.1f %14.2f\n", "serial (collective, then compute)", (t_comm + t_compute) * 1e3, 0.0);
    std::printf("%-40s %10.1f %14.2f\n", "MPI_Iallgather on the training thread", t_nb * 1e3, hidden(t_nb));
    std::printf("%-40s %10.1f %14.2f\n", "fedshard comm thread", t_ours * 1e3, hidden(t_ours));
  }
  return 0;
}
