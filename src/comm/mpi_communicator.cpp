#include "comm/mpi_communicator.h"

#include "comm/mpi_ops.h"
#include "comm/mpi_runtime.h"
#include "comm/survivors.h"
#include "util/error.h"

namespace fedshard::comm {

namespace {

void check_contiguous(const at::Tensor& t) {
  FS_ASSERT(t.defined() && t.is_contiguous(), "collective buffers must be contiguous tensors");
}

// MPI here is not CUDA-aware: device tensors travel through host copies (the "host-staged" collectives a
// node needs when several ranks share one GPU and NCCL refuses them). The copies are made inside the comm
// thread's task, so a collective reads its buffer after every collective queued before it has written it
// (a replica all-reduce after the shard reduce-scatter into the same gradient).
at::Tensor to_host(const at::Tensor& t) { return t.is_cpu() ? t : t.to(at::kCPU); }
at::Tensor host_buffer(const at::Tensor& t) { return t.is_cpu() ? t : at::empty(t.sizes(), t.options().device(at::kCPU)); }
void copy_back(const at::Tensor& device, const at::Tensor& host) {
  if (!device.is_cpu()) device.copy_(host);
}

}  // namespace

int rank_in(MPI_Comm comm) {
  int r = 0;
  MPI_Comm_rank(comm, &r);
  return r;
}

std::vector<int> world_ranks_of(MPI_Comm comm) {
  int size = 0, me = 0;
  MPI_Comm_size(comm, &size);
  MPI_Comm_rank(MPI_COMM_WORLD, &me);
  std::vector<int> ranks(size);
  mpi_check(MPI_Allgather(&me, 1, MPI_INT, ranks.data(), 1, MPI_INT, comm), "MPI_Allgather");
  return ranks;
}

MpiCommunicator::MpiCommunicator(MPI_Comm comm, std::string name, Tier tier, Lane lane)
    : Communicator(std::move(name), tier,
                   rank_in(comm),
                   world_ranks_of(comm)),
      comm_(comm),
      lane_(lane) {
  MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN);
}

MpiCommunicator::~MpiCommunicator() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized) return;
  // After a loss, collectives still queued on the lane use this communicator: they end first (in error where it
  // was revoked), so none reaches the library with a freed handle. Without one, a rank that ends alone goes on to
  // MPI_Abort, which waiting for its queued collectives could keep from it.
  if (revoked_ || MpiRuntime::peer_lost()) MpiRuntime::get().comm_thread(lane_).drain();
  if (comm_ != MPI_COMM_WORLD && comm_ != MPI_COMM_SELF) MPI_Comm_free(&comm_);
}

Ring MpiCommunicator::next_ring() {
  // MPI guarantees tags up to 32767; a collective 32767 launches back is long over.
  constexpr int64_t kTags = 32767;
  return Ring{comm_, rank(), size(), static_cast<int>(launched_++ % kTags)};
}

void MpiCommunicator::revoke() {
  revoked_ = true;
  revoke_mpi_comm(comm_);
}

WorkHandle MpiCommunicator::launch(Collective c, const at::Tensor& t, double full_bytes, Traffic k,
                                   std::function<int64_t()> run) {
  auto work = std::make_shared<Work>(describe(c, t));
  if (size() == 1) {
    run();
    work->finish();
    return work;
  }
  const Tier tier = this->tier();
  const std::string comm_name = name();
  const int p = size();
  const Lane lane = lane_;
  MpiRuntime::get().comm_thread(lane_).submit([=, run = std::move(run)] {
    try {
      const auto t0 = Work::Clock::now();
      const double sent = static_cast<double>(run());
      work->finish(record_completion(comm_name, tier, lane, k, c, full_bytes, p, sent, t0, Work::Clock::now()));
    } catch (...) {
      work->fail(std::current_exception());
    }
  });
  return work;
}

WorkHandle MpiCommunicator::all_gather(const at::Tensor& in, const at::Tensor& out, Traffic k) {
  check_contiguous(in);
  check_contiguous(out);
  FS_ASSERT(out.numel() == in.numel() * size() && in.scalar_type() == out.scalar_type(), "all_gather sizes");
  const Ring ring = next_ring();
  return launch(Collective::AllGather, out, static_cast<double>(out.nbytes()), k, [=] {
    const auto in_h = to_host(in), out_h = host_buffer(out);
    const auto mine = out_h.reshape({-1}).narrow(0, ring.rank * in_h.numel(), in_h.numel());
    if (mine.data_ptr() != in_h.data_ptr()) mine.copy_(in_h.reshape({-1}));
    const int64_t sent = ring_all_gather(ring, out_h);
    copy_back(out, out_h);
    return sent;
  });
}

WorkHandle MpiCommunicator::reduce_scatter(const at::Tensor& in, const at::Tensor& out, ReduceOp op, Traffic k) {
  check_contiguous(in);
  check_contiguous(out);
  FS_ASSERT(in.numel() == out.numel() * size() && in.scalar_type() == out.scalar_type(), "reduce_scatter sizes");
  const Ring ring = next_ring();
  return launch(Collective::ReduceScatter, in, static_cast<double>(in.nbytes()), k, [=] {
    const auto in_h = to_host(in), out_h = host_buffer(out);
    const int64_t sent = ring_reduce_scatter(ring, in_h, out_h);
    if (op == ReduceOp::Mean && ring.size > 1) out_h.div_(ring.size);
    copy_back(out, out_h);
    return sent;
  });
}

WorkHandle MpiCommunicator::all_reduce(const at::Tensor& inout, ReduceOp op, Traffic k) {
  check_contiguous(inout);
  const Ring ring = next_ring();
  return launch(Collective::AllReduce, inout, static_cast<double>(inout.nbytes()), k, [=] {
    const auto io_h = to_host(inout);
    const int64_t sent = ring_all_reduce(ring, io_h);
    if (op == ReduceOp::Mean && ring.size > 1) io_h.div_(ring.size);
    copy_back(inout, io_h);
    return sent;
  });
}

WorkHandle MpiCommunicator::all_to_all(const at::Tensor& in, const at::Tensor& out, Traffic k) {
  check_contiguous(in);
  check_contiguous(out);
  FS_ASSERT(in.numel() == out.numel() && in.numel() % size() == 0 && in.scalar_type() == out.scalar_type(),
            "all_to_all sizes");
  const Ring ring = next_ring();
  return launch(Collective::AllToAll, in, static_cast<double>(in.nbytes()), k, [=] {
    const auto in_h = to_host(in), out_h = host_buffer(out);
    const int64_t sent = pairwise_all_to_all(ring, in_h, out_h);
    copy_back(out, out_h);
    return sent;
  });
}

WorkHandle MpiCommunicator::broadcast(const at::Tensor& inout, int root, Traffic k) {
  check_contiguous(inout);
  const Ring ring = next_ring();
  return launch(Collective::Broadcast, inout, static_cast<double>(inout.nbytes()), k, [=] {
    const auto io_h = to_host(inout);
    const int64_t sent = chain_broadcast(ring, io_h, root);
    copy_back(inout, io_h);
    return sent;
  });
}

WorkHandle MpiCommunicator::barrier() {
  return launch(Collective::Barrier, at::empty({0}), 0.0, Traffic::Control, [=] {
    MPI_Request req;
    mpi_check(serialized([&] { return MPI_Ibarrier(comm_, &req); }), "MPI_Ibarrier");
    wait_request(&req);
    return int64_t{0};
  });
}

}  // namespace fedshard::comm
