#include "comm/mpi_communicator.h"

#include <c10/util/BFloat16.h>

#include <chrono>
#include <thread>

#include "comm/mpi_runtime.h"
#include "util/error.h"

namespace fedshard::comm {

namespace {

void mpi_check(int rc, const char* call) {
  if (rc == MPI_SUCCESS) return;
  char msg[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(rc, msg, &len);
  throw std::runtime_error(cat(call, ": ", std::string(msg, len)));
}

// MPI has no bfloat16: move it as 16-bit words and reduce with a user op that adds in float32.
void bf16_sum(void* in, void* inout, int* len, MPI_Datatype*) {
  auto* a = static_cast<const c10::BFloat16*>(in);
  auto* b = static_cast<c10::BFloat16*>(inout);
  for (int i = 0; i < *len; ++i) b[i] = c10::BFloat16(static_cast<float>(a[i]) + static_cast<float>(b[i]));
}

MPI_Op bf16_sum_op() {
  static MPI_Op op = [] {
    MPI_Op o;
    mpi_check(MPI_Op_create(&bf16_sum, /*commute=*/1, &o), "MPI_Op_create");
    return o;
  }();
  return op;
}

MPI_Datatype mpi_type(const at::Tensor& t) {
  switch (t.scalar_type()) {
    case at::kFloat: return MPI_FLOAT;
    case at::kDouble: return MPI_DOUBLE;
    case at::kBFloat16: return MPI_UINT16_T;
    case at::kLong: return MPI_INT64_T;
    case at::kInt: return MPI_INT32_T;
    case at::kByte: return MPI_UINT8_T;
    default: throw std::logic_error(cat("no MPI type for ", t.dtype().name()));
  }
}

MPI_Op sum_op(const at::Tensor& t) { return t.scalar_type() == at::kBFloat16 ? bf16_sum_op() : MPI_SUM; }

int count_of(const at::Tensor& t) {
  FS_ASSERT(t.numel() <= std::numeric_limits<int>::max(), "collective of ", t.numel(), " elements exceeds MPI's int count");
  return static_cast<int>(t.numel());
}

void check_buffer(const at::Tensor& t) {
  FS_ASSERT(t.defined() && t.is_contiguous(), "collective buffers must be contiguous tensors");
}

// MPI here is not CUDA-aware: device tensors travel through host copies (the "host-staged" collectives a
// node needs when several ranks share one GPU and NCCL refuses them).
at::Tensor host_copy(const at::Tensor& t) { return t.is_cpu() ? t : t.to(at::kCPU); }
at::Tensor host_buffer(const at::Tensor& t) { return t.is_cpu() ? t : at::empty(t.sizes(), t.options().device(at::kCPU)); }
void copy_back(const at::Tensor& device, const at::Tensor& host) {
  if (!device.is_cpu()) device.copy_(host);
}

// Polls a request without pinning a core: spin briefly (small messages finish in microseconds), then sleep
// between tests so the comm thread does not compete with compute on an oversubscribed node.
void wait_request(MPI_Request* req) {
  int done = 0;
  for (int spins = 0;; ++spins) {
    mpi_check(MPI_Test(req, &done, MPI_STATUS_IGNORE), "MPI_Test");
    if (done) return;
    if (spins > 64) std::this_thread::sleep_for(std::chrono::microseconds(20));
  }
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

MpiCommunicator::MpiCommunicator(MPI_Comm comm, std::string name, Tier tier)
    : Communicator(std::move(name), tier,
                   rank_in(comm),
                   world_ranks_of(comm)),
      comm_(comm) {
  MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN);
}

MpiCommunicator::~MpiCommunicator() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized && comm_ != MPI_COMM_WORLD && comm_ != MPI_COMM_SELF) MPI_Comm_free(&comm_);
}

WorkHandle MpiCommunicator::launch(Collective c, const at::Tensor& t, double full_bytes, Traffic k,
                                   std::function<void(MPI_Request*)> start, std::function<void()> finish) {
  auto work = std::make_shared<Work>(describe(c, t));
  if (size() == 1) {
    finish();
    work->finish();
    return work;
  }
  const Tier tier = this->tier();
  const std::string comm_name = name();
  const int p = size();
  MpiRuntime::get().comm_thread().submit([=, start = std::move(start), finish = std::move(finish)] {
    try {
      const auto t0 = Work::Clock::now();
      MPI_Request req = MPI_REQUEST_NULL;
      start(&req);
      wait_request(&req);
      finish();
      work->finish(record_completion(comm_name, tier, k, c, full_bytes, p, t0, Work::Clock::now()));
    } catch (...) {
      work->fail(std::current_exception());
    }
  });
  return work;
}

WorkHandle MpiCommunicator::all_gather(const at::Tensor& in, const at::Tensor& out, Traffic k) {
  check_buffer(in);
  check_buffer(out);
  FS_ASSERT(out.numel() == in.numel() * size() && in.scalar_type() == out.scalar_type(), "all_gather sizes");
  const int n = count_of(in);
  const auto* mine = static_cast<const char*>(out.data_ptr()) + rank() * in.nbytes();
  const bool in_place = in.data_ptr() == mine && out.is_cpu();
  const auto in_h = host_copy(in), out_h = host_buffer(out);
  auto start = [=](MPI_Request* req) {
    mpi_check(MPI_Iallgather(in_place ? MPI_IN_PLACE : in_h.data_ptr(), n, mpi_type(in), out_h.data_ptr(), n,
                             mpi_type(out), comm_, req),
              "MPI_Iallgather");
  };
  auto finish = [=] {
    if (size() == 1 && !in_place) out_h.narrow(0, 0, n).copy_(in_h);
    copy_back(out, out_h);
  };
  return launch(Collective::AllGather, out, static_cast<double>(out.nbytes()), k, start, finish);
}

WorkHandle MpiCommunicator::reduce_scatter(const at::Tensor& in, const at::Tensor& out, ReduceOp op, Traffic k) {
  check_buffer(in);
  check_buffer(out);
  FS_ASSERT(in.numel() == out.numel() * size() && in.scalar_type() == out.scalar_type(), "reduce_scatter sizes");
  const int n = count_of(out);
  const int p = size();
  const auto in_h = host_copy(in), out_h = host_buffer(out);
  auto start = [=](MPI_Request* req) {
    mpi_check(MPI_Ireduce_scatter_block(in_h.data_ptr(), out_h.data_ptr(), n, mpi_type(in), sum_op(in), comm_, req),
              "MPI_Ireduce_scatter_block");
  };
  auto finish = [=] {
    if (p == 1 && in_h.data_ptr() != out_h.data_ptr()) out_h.copy_(in_h);
    if (op == ReduceOp::Mean && p > 1) out_h.div_(p);
    copy_back(out, out_h);
  };
  return launch(Collective::ReduceScatter, in, static_cast<double>(in.nbytes()), k, start, finish);
}

WorkHandle MpiCommunicator::all_reduce(const at::Tensor& inout, ReduceOp op, Traffic k) {
  check_buffer(inout);
  const int n = count_of(inout);
  const int p = size();
  const auto io_h = host_copy(inout);
  auto start = [=](MPI_Request* req) {
    mpi_check(MPI_Iallreduce(MPI_IN_PLACE, io_h.data_ptr(), n, mpi_type(inout), sum_op(inout), comm_, req),
              "MPI_Iallreduce");
  };
  auto finish = [=] {
    if (op == ReduceOp::Mean && p > 1) io_h.div_(p);
    copy_back(inout, io_h);
  };
  return launch(Collective::AllReduce, inout, static_cast<double>(inout.nbytes()), k, start, finish);
}

WorkHandle MpiCommunicator::broadcast(const at::Tensor& inout, int root, Traffic k) {
  check_buffer(inout);
  const int n = count_of(inout);
  const auto io_h = host_copy(inout);
  auto start = [=](MPI_Request* req) {
    mpi_check(MPI_Ibcast(io_h.data_ptr(), n, mpi_type(inout), root, comm_, req), "MPI_Ibcast");
  };
  return launch(Collective::Broadcast, inout, static_cast<double>(inout.nbytes()), k, start,
                [=] { copy_back(inout, io_h); });
}

WorkHandle MpiCommunicator::barrier() {
  auto start = [=](MPI_Request* req) { mpi_check(MPI_Ibarrier(comm_, req), "MPI_Ibarrier"); };
  return launch(Collective::Barrier, at::empty({0}), 0.0, Traffic::Control, start, [] {});
}

}  // namespace fedshard::comm
