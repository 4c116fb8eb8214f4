// MPI process lifetime: MPI_Init_thread(MPI_THREAD_MULTIPLE) .. MPI_Finalize, and the comm threads that
// executes collectives. Create one at the top of main, before any communicator.
#pragma once

#include <mpi.h>

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "comm/comm_thread.h"
#include "comm/tier.h"

namespace fedshard::comm {

class MpiRuntime {
 public:
  MpiRuntime(int* argc, char*** argv);
  ~MpiRuntime();
  MpiRuntime(const MpiRuntime&) = delete;
  MpiRuntime& operator=(const MpiRuntime&) = delete;

  // No launcher (mpirun, mpiexec, srun) started this process: MPI_Init would make it a singleton, world of 1.
  static bool started_alone();
  static MpiRuntime& get();  // the live runtime; FS_ASSERTs that one exists
  // This process's rank and the job's size at launch (MPI_COMM_WORLD's), which users, mpirun and the fault plan
  // name them by; a replacement started for a lost rank (comm/rejoin.h) takes the lost rank's and the job's.
  int world_rank() const { return world_rank_; }
  int world_size() const { return world_size_; }
  void join_job(int launch_rank, int job_size) {
    world_rank_ = launch_rank;
    world_size_ = job_size;
  }
  // The command line this process was started with, program first: what replacements are started with.
  const std::vector<std::string>& argv() const { return argv_; }
  CommThread& comm_thread(Lane lane) { return lane == Lane::Federation ? *federation_thread_ : *comm_thread_; }

  // This rank's index among the job's ranks on its host, and their number (MPI shared-memory split, done
  // once at start-up: local, so a check that one rank fails before calling it cannot leave the others waiting).
  std::pair<int, int> host_rank_and_size() const { return host_; }
  // Counts them again over `comm`, ordered by `key` (collective): a replacement's among the job it joined, in
  // launch-rank order, so it takes the GPU and the threads of the rank it replaces.
  void count_host_ranks(MPI_Comm comm, int key);

  // Ends every rank of the job after `line` on stderr (none if empty); used when one rank cannot continue. Under
  // ULFM, where MPI_Abort does not end the others, this process ends itself and the others' failure watch ends
  // them (comm/failure_watch.h); elsewhere MPI_Abort.
  [[noreturn]] static void abort(int code, const std::string& line);

  // Set once this process has seen a peer die (comm/survivors.h), or its failure watch knows of one. Open MPI
  // 5.0.11's MPI_Finalize then hangs in about one run of six (its closing fence over the world, the dead ranks
  // included; a plain C program does it too), so such a rank ends with finish() instead.
  static void note_peer_lost();
  static bool peer_lost();
  static bool peer_lost_seen();  // note_peer_lost was called (no lock taken: the failure watch asks it)
  // Ends this process with `code` without MPI_Finalize (its comm threads stopped, stdio flushed); mpirun
  // --with-ft ulfm counts it as finished.
  [[noreturn]] void finish(int code);

 private:
  int world_rank_ = 0;
  int world_size_ = 1;
  std::vector<std::string> argv_;
  std::pair<int, int> host_{0, 1};
  std::unique_ptr<CommThread> comm_thread_;
  std::unique_ptr<CommThread> federation_thread_;
};

}  // namespace fedshard::comm
