#include "comm/survivors.h"

#include <algorithm>
#include <memory>
#include <set>

#ifdef FEDSHARD_MPI_ULFM
#include <mpi-ext.h>
#endif

#include "comm/mpi_runtime.h"
#include "comm/work.h"
#include "util/error.h"

namespace fedshard::comm {

std::string mpi_error_string(int mpi_error) {
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(mpi_error, text, &len);
  return std::string(text, static_cast<size_t>(len));
}

bool is_peer_failure(int mpi_error) {
#ifdef FEDSHARD_MPI_ULFM
  int cls = mpi_error;
  MPI_Error_class(mpi_error, &cls);
  return cls == MPIX_ERR_PROC_FAILED || cls == MPIX_ERR_PROC_FAILED_PENDING || cls == MPIX_ERR_REVOKED;
#else
  (void)mpi_error;
  return false;
#endif
}

bool is_revoked(int mpi_error) {
#ifdef FEDSHARD_MPI_ULFM
  int cls = mpi_error;
  MPI_Error_class(mpi_error, &cls);
  return cls == MPIX_ERR_REVOKED;
#else
  (void)mpi_error;
  return false;
#endif
}

std::mutex& progress_mutex() {
  static std::mutex mu;
  return mu;
}

void revoke_mpi_comm(MPI_Comm comm) {
#ifdef FEDSHARD_MPI_ULFM
  MPIX_Comm_revoke(comm);
#else
  (void)comm;
#endif
}

bool all_succeeded(MPI_Comm comm, bool mine) {
#ifdef FEDSHARD_MPI_ULFM
  int flag = mine ? 1 : 0;
  std::lock_guard<std::mutex> lock(progress_mutex());
  return MPIX_Comm_agree(comm, &flag) == MPI_SUCCESS && flag == 1;
#else
  (void)comm;
  return mine;
#endif
}

bool all_exchanged(MPI_Comm comm, bool mine) {
  if (mine && MPI_Barrier(comm) != MPI_SUCCESS) mine = false;
  if (!mine) revoke_mpi_comm(comm);
  return all_succeeded(comm, mine);
}

Survivors shrink_after_failure(MPI_Comm comm) {
#ifndef FEDSHARD_MPI_ULFM
  (void)comm;
  throw Error("a rank was lost and this build's MPI has no ULFM to go on without it (fedshard --version; "
              "README: what happens when a node dies)");
#else
  MpiRuntime::note_peer_lost();
  std::lock_guard<std::mutex> lock(progress_mutex());
  int old_rank = 0, old_size = 0;
  MPI_Comm_rank(comm, &old_rank);
  MPI_Comm_size(comm, &old_size);
  MPIX_Comm_revoke(comm);
  MPI_Comm current = comm;
  for (;;) {
    MPI_Comm shrunk = MPI_COMM_NULL;
    FS_CHECK(MPIX_Comm_shrink(current, &shrunk) == MPI_SUCCESS, "MPIX_Comm_shrink failed after a lost rank");
    if (current != comm) MPI_Comm_free(&current);
    MPI_Comm_set_errhandler(shrunk, MPI_ERRORS_RETURN);
    int n = 0;
    MPI_Comm_size(shrunk, &n);
    auto alive = std::make_unique<std::vector<int>>(n, -1);
    int ok = MPI_Allgather(&old_rank, 1, MPI_INT, alive->data(), 1, MPI_INT, shrunk) == MPI_SUCCESS;
    // Not freed after a failed gather: a live member's part may still arrive into it (mpi_ops.cpp:
    // keep_after_failure).
    if (!ok) alive.release();
    // A member that died during the gather leaves some survivors without the list: agree (fault-tolerantly)
    // that every survivor has it, or shrink again.
    const int agreed = MPIX_Comm_agree(shrunk, &ok);
    if (agreed == MPI_SUCCESS && ok) {
      Survivors s;
      s.comm = shrunk;
      std::set<int> live(alive->begin(), alive->end());
      for (int r = 0; r < old_size; ++r)
        if (!live.count(r)) s.lost.push_back(r);
      return s;
    }
    MPIX_Comm_revoke(shrunk);
    current = shrunk;
  }
#endif
}

Regrouped regroup(const Survivors& survivors, const Layout& old) {
  Regrouped out;
  std::set<int> lost_groups;
  for (int r : survivors.lost) lost_groups.insert(old.coords(r).group);
  std::vector<int> sizes;
  for (int g = 0; g < old.groups(); ++g) {
    if (lost_groups.count(g)) {
      out.lost_groups.push_back(g);
    } else {
      out.kept_groups.push_back(g);
      sizes.push_back(old.group_size(g));
    }
  }
  FS_CHECK(!sizes.empty(), "every federation group lost a rank; nothing is left to train");
  // The launch's padding stays: every kept rank's shard and slice keep their bounds (a group lost from groups of
  // different sizes can lower the kept sizes' least common multiple), so each takes its own state over in memory.
  out.layout = Layout(sizes, old.shard_spec(), old.pad_multiple());
  int me = 0;
  MPI_Comm_rank(survivors.comm, &me);
  // The survivors' old ranks, to tell which group this one was in (the shrunk communicator kept their order).
  int n = 0;
  MPI_Comm_size(survivors.comm, &n);
  std::vector<int> alive;
  for (int r = 0; r < old.world(); ++r)
    if (!std::binary_search(survivors.lost.begin(), survivors.lost.end(), r)) alive.push_back(r);
  FS_ASSERT(static_cast<int>(alive.size()) == n, "survivors: ", n, " ranks alive but ", alive.size(), " not lost");
  const bool kept = !lost_groups.count(old.coords(alive[me]).group);
  const int rc = MPI_Comm_split(survivors.comm, kept ? 0 : MPI_UNDEFINED, me, &out.comm);
  // A survivor that died meanwhile fails the split on some members only: all learn of it together.
  if (!all_succeeded(survivors.comm, rc == MPI_SUCCESS)) {
    if (rc == MPI_SUCCESS && out.comm != MPI_COMM_NULL) MPI_Comm_free(&out.comm);
    FS_CHECK(rc == MPI_SUCCESS || is_peer_failure(rc), "MPI_Comm_split of the survivors failed: ", mpi_error_string(rc));
    throw PeerLost("a rank was lost while the survivors regrouped");
  }
  if (out.comm != MPI_COMM_NULL) MPI_Comm_set_errhandler(out.comm, MPI_ERRORS_RETURN);
  return out;
}

}  // namespace fedshard::comm
