// MPI process lifetime: MPI_Init_thread(MPI_THREAD_MULTIPLE) .. MPI_Finalize, and the comm threads that
// executes collectives. Create one at the top of main, before any communicator.
#pragma once

#include <memory>
#include <utility>

#include "comm/comm_thread.h"
#include "comm/tier.h"

namespace fedshard::comm {

class MpiRuntime {
 public:
  MpiRuntime(int* argc, char*** argv);
  ~MpiRuntime();
  MpiRuntime(const MpiRuntime&) = delete;
  MpiRuntime& operator=(const MpiRuntime&) = delete;

  static MpiRuntime& get();  // the live runtime; FS_ASSERTs that one exists
  int world_rank() const { return world_rank_; }
  int world_size() const { return world_size_; }
  CommThread& comm_thread(Lane lane) { return lane == Lane::Federation ? *federation_thread_ : *comm_thread_; }

  // This rank's index among the job's ranks on its host, and their number (MPI shared-memory split, done
  // once at start-up: local, so a check that one rank fails before calling it cannot leave the others waiting).
  std::pair<int, int> host_rank_and_size() const { return host_; }

  // Ends every rank of the job (MPI_Abort); used when one rank cannot continue.
  [[noreturn]] static void abort(int code);

 private:
  int world_rank_ = 0;
  int world_size_ = 1;
  std::pair<int, int> host_{0, 1};
  std::unique_ptr<CommThread> comm_thread_;
  std::unique_ptr<CommThread> federation_thread_;
};

}  // namespace fedshard::comm
