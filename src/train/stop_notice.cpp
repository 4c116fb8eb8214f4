#include "train/stop_notice.h"

namespace fedshard::train {

StopNotice::StopNotice(const comm::Layout& layout, int world_rank, MPI_Comm base) {
  MPI_Comm_dup(base, &comm_);
  const int group = layout.coords(world_rank).group;
  first_ = layout.first_rank(group) == world_rank;
  if (!first_ || layout.groups() == 1) return;
  for (int g = 0; g < layout.groups(); ++g)
    if (g != group) others_.push_back(layout.first_rank(g));
  MPI_Irecv(&in_, 1, MPI_INT, MPI_ANY_SOURCE, 0, comm_, &recv_);
}

StopNotice::~StopNotice() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized) return;
  if (recv_ != MPI_REQUEST_NULL) {
    MPI_Cancel(&recv_);
    MPI_Wait(&recv_, MPI_STATUS_IGNORE);
  }
  MPI_Comm_free(&comm_);
}

bool StopNotice::received() {
  if (received_ || recv_ == MPI_REQUEST_NULL) return received_;
  int done = 0;
  MPI_Test(&recv_, &done, MPI_STATUS_IGNORE);
  received_ = done != 0;
  return received_;
}

void StopNotice::send() {
  if (sent_ || others_.empty()) return;
  sent_ = true;
  // One int goes eagerly: the send completes without the receiver, which may be stopping on its own signal
  // and never post another receive.
  for (int r : others_) {
    MPI_Request req;
    MPI_Isend(&out_, 1, MPI_INT, r, 0, comm_, &req);
    MPI_Request_free(&req);
  }
}

}  // namespace fedshard::train
