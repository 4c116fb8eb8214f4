// Compiled only with FEDSHARD_CUDA (CMake drops *_cuda.cpp otherwise).
#include "comm/nccl_communicator.h"

#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAStream.h>

#include "comm/link_emulation.h"
#include "comm/mpi_communicator.h"
#include "util/error.h"

namespace fedshard::comm {

namespace {

void nccl_check(ncclResult_t r, const char* call) {
  if (r != ncclSuccess) throw std::runtime_error(cat(call, ": ", ncclGetErrorString(r)));
}

void cuda_check(cudaError_t r, const char* call) {
  if (r != cudaSuccess) throw std::runtime_error(cat(call, ": ", cudaGetErrorString(r)));
}

ncclDataType_t nccl_type(const at::Tensor& t) {
  switch (t.scalar_type()) {
    case at::kFloat: return ncclFloat32;
    case at::kDouble: return ncclFloat64;
    case at::kBFloat16: return ncclBfloat16;
    case at::kHalf: return ncclFloat16;
    case at::kLong: return ncclInt64;
    case at::kInt: return ncclInt32;
    case at::kByte: return ncclUint8;
    default: throw std::logic_error(cat("no NCCL type for ", t.dtype().name()));
  }
}

void check_cuda_buffer(const at::Tensor& t) {
  FS_ASSERT(t.defined() && t.is_contiguous() && t.is_cuda(), "NCCL collective buffers must be contiguous CUDA tensors");
}

// A collective's handle: waiting orders the caller's current stream after the collective's event. The host
// blocks only when asked to (barriers) or when the tier is link-emulated (the hold is a host-side clock).
class NcclWork : public Work {
 public:
  NcclWork(std::string what, std::shared_ptr<CommStream> stream, bool host_blocking)
      : Work(std::move(what)), stream_(std::move(stream)), done_(stream_->take_event()),
        host_blocking_(host_blocking) {}
  // Possibly inside complete(), the comm stream's host function: no CUDA call here (CommStream's pool).
  ~NcclWork() override { stream_->give_back(done_); }
  cudaEvent_t event() const { return done_; }

  void wait() override {
    if (host_blocking_) {
      Work::wait();
      return;
    }
    cuda_check(cudaStreamWaitEvent(c10::cuda::getCurrentCUDAStream(stream_->device).stream(), done_, 0),
               "cudaStreamWaitEvent");
  }

 private:
  std::shared_ptr<CommStream> stream_;
  cudaEvent_t done_ = nullptr;
  bool host_blocking_;
};

// Completion on the comm stream: finish the handle, account the bytes. Host functions must not call CUDA: if
// this holds the handle's last reference, its event goes back to the CommStream's pool, not to CUDA.
struct Completion {
  WorkHandle work;
  std::string comm;
  Tier tier;
  Traffic traffic;
  Collective kind;
  double full_bytes;
  int ranks;
  Work::Clock::time_point start;
};

// NCCL picks its own algorithm and moves the bytes itself, so nothing here can count them: the sent figure
// is the ring formula's, and the run's summary says so (bytes_counted: false).
void CUDART_CB complete(void* p) {
  std::unique_ptr<Completion> c(static_cast<Completion*>(p));
  const double formula = ring_bus_bytes(c->kind, c->full_bytes, c->ranks);
  c->work->finish(record_completion(c->comm, c->tier, Lane::Inner, c->traffic, c->kind, c->full_bytes, c->ranks,
                                    formula, c->start, Work::Clock::now()));
}

}  // namespace

CommStream::CommStream(int dev) : device(dev) {
  cuda_check(cudaSetDevice(device), "cudaSetDevice");
  cuda_check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
}

CommStream::~CommStream() {
  cudaStreamSynchronize(stream);
  for (cudaEvent_t e : all_) cudaEventDestroy(e);
  cudaStreamDestroy(stream);
}

cudaEvent_t CommStream::take_event() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!free_.empty()) {
      const cudaEvent_t e = free_.back();
      free_.pop_back();
      return e;
    }
  }
  cudaEvent_t e = nullptr;
  cuda_check(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), "cudaEventCreateWithFlags");
  std::lock_guard<std::mutex> lock(mu_);
  all_.push_back(e);
  return e;
}

void CommStream::give_back(cudaEvent_t event) {
  std::lock_guard<std::mutex> lock(mu_);
  free_.push_back(event);
}

NcclCommunicator::NcclCommunicator(MPI_Comm comm, std::string name, Tier tier, int device)
    : Communicator(std::move(name), tier, rank_in(comm), world_ranks_of(comm)),
      stream_(std::make_shared<CommStream>(device)) {
  ncclUniqueId id;
  if (rank() == 0) nccl_check(ncclGetUniqueId(&id), "ncclGetUniqueId");
  FS_CHECK(MPI_Bcast(&id, sizeof(id), MPI_BYTE, 0, comm) == MPI_SUCCESS, "MPI_Bcast of the NCCL id failed");
  nccl_check(ncclCommInitRank(&comm_, size(), id, rank()), "ncclCommInitRank");
  cuda_check(cudaEventCreateWithFlags(&ready_, cudaEventDisableTiming), "cudaEventCreateWithFlags");
}

NcclCommunicator::NcclCommunicator(NcclCommunicator& parent, int color, int key, MPI_Comm comm, std::string name,
                                   Tier tier)
    : Communicator(std::move(name), tier, rank_in(comm), world_ranks_of(comm)), stream_(parent.stream_) {
  cuda_check(cudaSetDevice(stream_->device), "cudaSetDevice");
  nccl_check(ncclCommSplit(parent.comm_, color, key, &comm_, nullptr), "ncclCommSplit");
  int nccl_size = 0, nccl_rank = 0;
  nccl_check(ncclCommCount(comm_, &nccl_size), "ncclCommCount");
  nccl_check(ncclCommUserRank(comm_, &nccl_rank), "ncclCommUserRank");
  FS_ASSERT(nccl_size == size() && nccl_rank == rank(), "NCCL split of '", this->name(), "' disagrees with MPI's: rank ",
            nccl_rank, " of ", nccl_size, " vs ", rank(), " of ", size());
  cuda_check(cudaEventCreateWithFlags(&ready_, cudaEventDisableTiming), "cudaEventCreateWithFlags");
}

void NcclCommunicator::sit_out_split(NcclCommunicator& parent) {
  ncclComm_t none = nullptr;
  nccl_check(ncclCommSplit(parent.comm_, NCCL_SPLIT_NOCOLOR, 0, &none, nullptr), "ncclCommSplit");
}

void NcclCommunicator::revoke() {
  if (comm_) ncclCommAbort(comm_);
  comm_ = nullptr;
}

NcclCommunicator::~NcclCommunicator() {
  cudaStreamSynchronize(stream_->stream);
  if (comm_) ncclCommDestroy(comm_);
  if (ready_) cudaEventDestroy(ready_);
}

WorkHandle NcclCommunicator::launch(Collective c, const std::vector<at::Tensor>& buffers, double full_bytes,
                                    Traffic k, bool host_blocking, const std::function<ncclResult_t(cudaStream_t)>& op) {
  const int device = stream_->device;
  const cudaStream_t comm_stream = stream_->stream;
  auto work = std::make_shared<NcclWork>(describe(c, buffers.front()), stream_,
                                         host_blocking || LinkEmulator::instance().link(tier()).has_value());
  // The comm stream starts after everything queued so far on the caller's stream (the buffers' producers).
  cuda_check(cudaEventRecord(ready_, c10::cuda::getCurrentCUDAStream(device).stream()), "cudaEventRecord");
  cuda_check(cudaStreamWaitEvent(comm_stream, ready_, 0), "cudaStreamWaitEvent");
  const auto start = Work::Clock::now();
  nccl_check(op(comm_stream), collective_name(c));
  cuda_check(cudaEventRecord(work->event(), comm_stream), "cudaEventRecord");
  // The caching allocator must not hand these blocks out again before the comm stream is done with them.
  const auto as_c10 = c10::cuda::getStreamFromExternal(comm_stream, device);
  for (const auto& b : buffers) c10::cuda::CUDACachingAllocator::recordStream(b.storage().data_ptr(), as_c10);
  auto* done = new Completion{work, name(), tier(), k, c, full_bytes, size(), start};
  cuda_check(cudaLaunchHostFunc(comm_stream, complete, done), "cudaLaunchHostFunc");
  return work;
}

WorkHandle NcclCommunicator::all_gather(const at::Tensor& in, const at::Tensor& out, Traffic k) {
  check_cuda_buffer(in);
  check_cuda_buffer(out);
  FS_ASSERT(out.numel() == in.numel() * size() && in.scalar_type() == out.scalar_type(), "all_gather sizes");
  return launch(Collective::AllGather, {in, out}, static_cast<double>(out.nbytes()), k, false, [&](cudaStream_t s) {
    return ncclAllGather(in.data_ptr(), out.data_ptr(), in.numel(), nccl_type(in), comm_, s);
  });
}

WorkHandle NcclCommunicator::reduce_scatter(const at::Tensor& in, const at::Tensor& out, ReduceOp op, Traffic k) {
  check_cuda_buffer(in);
  check_cuda_buffer(out);
  FS_ASSERT(in.numel() == out.numel() * size() && in.scalar_type() == out.scalar_type(), "reduce_scatter sizes");
  return launch(Collective::ReduceScatter, {in, out}, static_cast<double>(in.nbytes()), k, false, [&](cudaStream_t s) {
    return ncclReduceScatter(in.data_ptr(), out.data_ptr(), out.numel(), nccl_type(in),
                             op == ReduceOp::Mean ? ncclAvg : ncclSum, comm_, s);
  });
}

WorkHandle NcclCommunicator::all_reduce(const at::Tensor& inout, ReduceOp op, Traffic k) {
  check_cuda_buffer(inout);
  return launch(Collective::AllReduce, {inout}, static_cast<double>(inout.nbytes()), k, false, [&](cudaStream_t s) {
    return ncclAllReduce(inout.data_ptr(), inout.data_ptr(), inout.numel(), nccl_type(inout),
                         op == ReduceOp::Mean ? ncclAvg : ncclSum, comm_, s);
  });
}

WorkHandle NcclCommunicator::all_to_all(const at::Tensor& in, const at::Tensor& out, Traffic k) {
  check_cuda_buffer(in);
  check_cuda_buffer(out);
  FS_ASSERT(in.numel() == out.numel() && in.numel() % size() == 0 && in.scalar_type() == out.scalar_type(),
            "all_to_all sizes");
  return launch(Collective::AllToAll, {in, out}, static_cast<double>(in.nbytes()), k, false, [&](cudaStream_t s) {
    const size_t n = in.numel() / size(), bytes = n * in.element_size();
    auto* src = static_cast<char*>(in.data_ptr());
    auto* dst = static_cast<char*>(out.data_ptr());
    ncclResult_t rc = ncclGroupStart();
    for (int r = 0; r < size() && rc == ncclSuccess; ++r) {
      rc = ncclSend(src + r * bytes, n, nccl_type(in), r, comm_, s);
      if (rc == ncclSuccess) rc = ncclRecv(dst + r * bytes, n, nccl_type(in), r, comm_, s);
    }
    const ncclResult_t end = ncclGroupEnd();
    return rc != ncclSuccess ? rc : end;
  });
}

WorkHandle NcclCommunicator::broadcast(const at::Tensor& inout, int root, Traffic k) {
  check_cuda_buffer(inout);
  return launch(Collective::Broadcast, {inout}, static_cast<double>(inout.nbytes()), k, false, [&](cudaStream_t s) {
    return ncclBroadcast(inout.data_ptr(), inout.data_ptr(), inout.numel(), nccl_type(inout), root, comm_, s);
  });
}

WorkHandle NcclCommunicator::barrier() {
  auto token = at::zeros({1}, at::TensorOptions().dtype(at::kInt).device(at::kCUDA, stream_->device));
  return launch(Collective::Barrier, {token}, 0.0, Traffic::Control, /*host_blocking=*/true, [&](cudaStream_t s) {
    return ncclAllReduce(token.data_ptr(), token.data_ptr(), 1, ncclInt32, ncclSum, comm_, s);
  });
}

}  // namespace fedshard::comm
