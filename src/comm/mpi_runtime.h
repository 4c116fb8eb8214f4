// MPI process lifetime: MPI_Init_thread(MPI_THREAD_MULTIPLE) .. MPI_Finalize, and the comm thread that
// executes collectives. Create one at the top of main, before any communicator.
#pragma once

#include <memory>

#include "comm/comm_thread.h"

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
  CommThread& comm_thread() { return *comm_thread_; }

  // Ranks of this job on this host (MPI shared-memory split); collective over the world.
  int ranks_on_this_host() const;

  // Ends every rank of the job (MPI_Abort); used when one rank cannot continue.
  [[noreturn]] static void abort(int code);

 private:
  int world_rank_ = 0;
  int world_size_ = 1;
  std::unique_ptr<CommThread> comm_thread_;
};

}  // namespace fedshard::comm
