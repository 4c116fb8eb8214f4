// Going on without lost ranks, on the MPI standard's fault-tolerance extension (ULFM: MPIX_Comm_revoke,
// MPIX_Comm_shrink, MPIX_Comm_agree; Open MPI 5 run with `mpirun --with-ft ulfm`). A build against an MPI
// without it (FEDSHARD_MPI_ULFM unset) reports no error as a peer failure and refuses to shrink: a dead rank
// ends the job there, and scripts/fedshard-elastic.sh relaunches the survivors from a checkpoint.
#pragma once

#include <mpi.h>

#include <mutex>
#include <string>
#include <vector>

#include "comm/layout.h"

namespace fedshard::comm {

// The MPI library's words for an error code.
std::string mpi_error_string(int mpi_error);
// Whether an MPI error code says a peer died, or that a survivor revoked the communicator after one did.
bool is_peer_failure(int mpi_error);
// The communicator was revoked (MPIX_ERR_REVOKED), as opposed to a member having failed.
bool is_revoked(int mpi_error);
// Makes every member's pending and later operations on comm fail (no-op without ULFM: nothing fails there).
void revoke_mpi_comm(MPI_Comm comm);

// Open MPI 5.0.11's fault-tolerant agreement is not safe against MPI progress that other threads make meanwhile
// (seen: with a round's collectives in flight on the comm threads, MPIX_Comm_agree answered "failed" on every member
// while every member contributed success, in about one run of two): the agreement and the shrink run under this
// lock, and the other threads' MPI calls (the comm threads' sends, receives and tests; the failure watch) take it.
std::mutex& progress_mutex();

// The ranks of a communicator still alive, in their old order, and the ranks it lost.
struct Survivors {
  MPI_Comm comm = MPI_COMM_NULL;  // errors return; the caller frees it
  std::vector<int> lost;          // ranks of the old communicator, ascending
};
// Collective over the live members of `comm`: revokes it, shrinks it to the live ranks and agrees on who they
// are, again until no member died during the agreement (two failures in a row).
Survivors shrink_after_failure(MPI_Comm comm);

// Collective over the live members of `comm`, revoked or not: true on every member when every member's `mine`
// is true and none has died, false on every member otherwise (MPIX_Comm_agree: the same answer everywhere,
// where a collective that failed may have completed on some members). Without ULFM no peer failure is
// reported, so it is `mine`, without communication.
bool all_succeeded(MPI_Comm comm, bool mine);
// all_succeeded after point-to-point work: a member still waiting for a dead member's message takes part in no
// agreement, so every member first enters a barrier (which fails on some member when one has died), and a member
// whose work or barrier failed revokes comm, which releases the waiting ones.
bool all_exchanged(MPI_Comm comm, bool mine);

// Where training goes on after ranks of `old` (the ranks of its world, as Survivors::lost names them) are lost:
// the groups none of whose ranks died, cut as before. A group that lost a rank is dropped whole, its live
// ranks too: each of its ranks held the only copy of a shard of the group's model and optimizer state (FSDP), so
// the group cannot take its next step, while the global model the others hold is whole.
struct Regrouped {
  std::vector<int> kept_groups;  // old group ids, ascending
  std::vector<int> lost_groups;
  Layout layout;                 // the kept groups, in the same order
  MPI_Comm comm = MPI_COMM_NULL; // their ranks, in the old order; MPI_COMM_NULL on a rank of a lost group
};
// Collective over survivors.comm.
Regrouped regroup(const Survivors& survivors, const Layout& old);

}  // namespace fedshard::comm
