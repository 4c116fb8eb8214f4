#include "parallel/sharded_unit.h"

#include "util/error.h"

namespace fedshard::parallel {

ShardedUnit::ShardedUnit(std::unique_ptr<FlatParam> flat, comm::Communicator& shard, comm::Communicator& replica,
                         const ShardingOptions& opts, int call_sites)
    : flat_(std::move(flat)), shard_comm_(shard), replica_comm_(replica), opts_(opts), call_sites_(call_sites) {
  FS_ASSERT(flat_->shard_count() == shard_comm_.size(), "flat param sharded ", flat_->shard_count(),
            " ways on a communicator of ", shard_comm_.size());
}

void ShardedUnit::prefetch() {
  if (full_.defined() || gather_) return;
  at::NoGradGuard no_grad;
  auto local = flat_->shard().detach().to(opts_.compute_dtype);
  if (shard_comm_.size() == 1) {
    full_ = local;  // unsharded (DDP): the master itself, or its cast
    return;
  }
  full_ = at::empty({flat_->padded_numel()}, local.options());
  gather_ = shard_comm_.all_gather(local, full_);
}

const at::Tensor& ShardedUnit::full() {
  prefetch();
  if (gather_) {
    gather_->wait();
    gather_.reset();
  }
  return full_;
}

void ShardedUnit::free() {
  if (gather_) {
    gather_->wait();
    gather_.reset();
  }
  full_ = at::Tensor();
  flat_->unbind();
}

bool ShardedUnit::forward_done(bool training) {
  ++forward_calls_;
  if (forward_calls_ < call_sites_) return false;
  forward_calls_ = 0;
  // A weight used at several call sites stays gathered until its last backward.
  if (!training) return true;
  return opts_.recompute && opts_.reshard_after_forward && call_sites_ == 1;
}

void ShardedUnit::backward_done(const at::Tensor& full_grad) {
  at::NoGradGuard no_grad;
  if (backward_calls_ == 0)
    grad_accum_ = full_grad;
  else
    grad_accum_ = grad_accum_ + full_grad;
  if (++backward_calls_ < call_sites_) return;
  backward_calls_ = 0;
  free();

  auto grad = grad_accum_.to(opts_.master_dtype);  // reduce in master precision
  grad_accum_ = at::Tensor();
  auto& out = flat_->grad();
  if (shard_comm_.size() == 1)
    out.copy_(grad);
  else
    reductions_.push_back(shard_comm_.reduce_scatter(grad, out, comm::ReduceOp::Mean));
  if (replica_comm_.size() > 1) reductions_.push_back(replica_comm_.all_reduce(out, comm::ReduceOp::Mean));
}

void ShardedUnit::wait_grad() {
  for (auto& w : reductions_) w->wait();
  reductions_.clear();
}

}  // namespace fedshard::parallel
