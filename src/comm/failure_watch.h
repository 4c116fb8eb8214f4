// Never a hang after a lost rank. Under ULFM a dead process fails only the operations that wait on it, and an
// MPI_Abort by some ranks does not end the others (mpirun --with-ft ulfm): ranks that wait on live peers, or
// compute, would go on, or wait, forever. So every rank runs a thread that polls the MPI library's failure
// detector (an MPI_Iprobe on a private duplicate of the watched communicator lets the library progress, no message
// is sent; then MPIX_Comm_get_failed, a local query) every 100 ms, and ends this process with one error line naming
// the lost ranks where the job will not go on without them:
//   - where the job is not recovered in the job (expect_recovery(false)): as soon as a loss is known;
//   - where it is: once it has made no progress (progress()) for the stall bound since the loss became known (or
//     since its last progress), as a recovery that cannot complete would (another loss during it, a collective the
//     losses left waiting); armed from the first loss on for the rest of the job, recovered or not.
// A rank that crashes (a fatal signal) ends with such a line too, and exit 1, as the runtime would not fail the job.
// Without ULFM the MPI runtime ends the whole job when a rank dies, and the watch does nothing.
#pragma once

#include <mpi.h>

#include <string>
#include <vector>

namespace fedshard::comm {

class FailureWatch {
 public:
  // Watches `comm` (collective over it: a duplicate is made), whose ranks are launch ranks `launch_ranks`;
  // starts the thread the first time. A new call replaces the communicator (after a membership change).
  static void watch(MPI_Comm comm, const std::vector<int>& launch_ranks);
  // Whether the job recovers from a loss in the job, and how long it may then make no progress.
  static void expect_recovery(bool recovers, double stall_seconds);
  static void progress();
  static void stop();  // before MPI_Finalize
  // The launch ranks known lost (on the watched communicator), e.g. "[5, 6]"; "" where none is known.
  static std::string lost_ranks();
  // The same, waiting up to `seconds` for the failure detector to know of one.
  static std::string lost_ranks_within(double seconds);
  // Ends this process with `code` after `line` on stderr (none if empty), once per process whoever comes first
  // (the watch, or main's handler of an error); revokes MPI_COMM_WORLD, so the ranks inside its collectives leave
  // them, and skips MPI_Finalize (it would wait for the dead ranks).
  [[noreturn]] static void end(int code, const std::string& line);
};

}  // namespace fedshard::comm
