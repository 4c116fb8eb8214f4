#include "comm/mpi_runtime.h"

#include <mpi.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "comm/failure_watch.h"
#include "util/error.h"

namespace fedshard::comm {

namespace {
MpiRuntime* g_runtime = nullptr;
}

MpiRuntime::MpiRuntime(int* argc, char*** argv) {
  FS_ASSERT(g_runtime == nullptr, "one MpiRuntime per process");
  argv_.assign(*argv, *argv + *argc);
  // Open MPI's TCP transport keeps one connection per pair of ranks; a 2-rank ring then sends and receives on
  // it, and each large message's rendezvous control (ob1's ACK/FIN) queues behind the peer's bulk data in that
  // byte stream, so the two directions mostly take turns: 45-64% of the link instead of 94%
  // (docs/cost-model.md §8). Two connections per pair remove it. setenv before MPI_Init is how an Open MPI
  // process picks up an MCA default; overwrite=0 keeps an explicit `mpirun --mca btl_tcp_links N` or
  // OMPI_MCA_btl_tcp_links, and other MPIs or transports (shared memory, InfiniBand) ignore it.
  setenv("OMPI_MCA_btl_tcp_links", "2", /*overwrite=*/0);
  int provided = 0;
  if (MPI_Init_thread(argc, argv, MPI_THREAD_MULTIPLE, &provided) != MPI_SUCCESS)
    throw Error("MPI_Init_thread failed");
  // Collectives run on the comm thread while the training thread also calls MPI (construction, aborts).
  FS_CHECK(provided >= MPI_THREAD_MULTIPLE, "this MPI library provides thread level ", provided,
           ", fedshard needs MPI_THREAD_MULTIPLE");
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  MPI_Comm_rank(MPI_COMM_WORLD, &world_rank_);
  MPI_Comm_size(MPI_COMM_WORLD, &world_size_);
  count_host_ranks(MPI_COMM_WORLD, world_rank_);
  comm_thread_ = std::make_unique<CommThread>();
  federation_thread_ = std::make_unique<CommThread>();
  g_runtime = this;
  // Until a trainer says otherwise, a rank lost anywhere ends the job (start-up, evaluation, export ...).
  if (world_size_ > 1) {
    std::vector<int> ranks(static_cast<size_t>(world_size_));
    for (int r = 0; r < world_size_; ++r) ranks[static_cast<size_t>(r)] = r;
    FailureWatch::watch(MPI_COMM_WORLD, ranks);
  }
}

void MpiRuntime::count_host_ranks(MPI_Comm comm, int key) {
  MPI_Comm local;
  FS_CHECK(MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, key, MPI_INFO_NULL, &local) == MPI_SUCCESS,
           "MPI_Comm_split_type of the host's ranks failed");
  MPI_Comm_rank(local, &host_.first);
  MPI_Comm_size(local, &host_.second);
  MPI_Comm_free(&local);
}

MpiRuntime::~MpiRuntime() {
  FailureWatch::stop();
  federation_thread_.reset();
  comm_thread_.reset();
  g_runtime = nullptr;
  MPI_Finalize();
}

bool MpiRuntime::started_alone() {
  // What the launchers put in each rank's environment: Open MPI's, PMIx's (Open MPI 5, srun --mpi=pmix), PMI's
  // (MPICH's Hydra, srun --mpi=pmi2) and Slurm's. Missing one only forgoes the early check.
  for (const char* v : {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_RANK", "PMI_SIZE", "PMI_FD", "SLURM_PROCID"})
    if (std::getenv(v) != nullptr) return false;
  return true;
}

MpiRuntime& MpiRuntime::get() {
  FS_ASSERT(g_runtime != nullptr, "no MpiRuntime: create one in main()");
  return *g_runtime;
}

namespace {
std::atomic<bool> g_peer_lost{false};
}  // namespace

void MpiRuntime::note_peer_lost() { g_peer_lost = true; }
bool MpiRuntime::peer_lost_seen() { return g_peer_lost; }
bool MpiRuntime::peer_lost() { return g_peer_lost || !FailureWatch::lost_ranks().empty(); }

void MpiRuntime::finish(int code) {
  FailureWatch::stop();
  federation_thread_.reset();
  comm_thread_.reset();
  std::fflush(nullptr);
  std::_Exit(code);
}

void MpiRuntime::abort(int code, const std::string& line) {
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
#ifdef FEDSHARD_MPI_ULFM
  if (initialized && !finalized) FailureWatch::end(code, line);
#endif
  if (!line.empty()) std::fprintf(stderr, "%s\n", line.c_str());
  std::fflush(nullptr);
  if (initialized && !finalized) MPI_Abort(MPI_COMM_WORLD, code);
  std::_Exit(code);
}

}  // namespace fedshard::comm
