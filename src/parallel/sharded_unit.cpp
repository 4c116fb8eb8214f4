#include "parallel/sharded_unit.h"

#include <ATen/core/grad_mode.h>

#include "util/error.h"

namespace fedshard::parallel {

ShardedUnit::ShardedUnit(std::unique_ptr<FlatParam> flat, comm::Communicator& shard, comm::Communicator& replica,
                         const ShardingOptions& opts, int call_sites)
    : flat_(std::move(flat)), shard_comm_(shard), replica_comm_(replica), opts_(opts), call_sites_(call_sites) {
  FS_ASSERT(flat_->shard_count() == shard_comm_.size(), "flat param sharded ", flat_->shard_count(),
            " ways on a communicator of ", shard_comm_.size());
}

bool ShardedUnit::regathered_in_backward() const {
  return shard_comm_.size() > 1 && opts_.recompute && opts_.reshard_after_forward && call_sites_ == 1;
}

at::Tensor ShardedUnit::compute_shard() {
  const auto master = flat_->shard().detach();
  if (master.scalar_type() == opts_.compute_dtype) return master;
  if (cast_.defined() && cast_version_ == master._version()) return cast_;
  auto cast = master.to(opts_.compute_dtype);
  if (regathered_in_backward()) {
    cast_ = cast;
    cast_version_ = master._version();
  }
  return cast;
}

void ShardedUnit::prefetch() {
  if (full_.defined() || gather_) return;
  at::NoGradGuard no_grad;
  auto local = compute_shard();
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
  if (!training) {
    cast_ = at::Tensor();  // no backward follows an evaluation's forward
    return true;
  }
  return opts_.recompute && opts_.reshard_after_forward && call_sites_ == 1;
}

void ShardedUnit::backward_done(const std::vector<at::Tensor>& grads) {
  at::NoGradGuard no_grad;
  // One call site: flatten straight into the reduce dtype. Several (a tied weight): sum the sites in at least
  // float32, as FSDP2 accumulates, so a bf16 compute dtype does not round the partial sums.
  const auto accumulate = call_sites_ == 1 ? opts_.reduce() : at::promote_types(opts_.reduce(), at::kFloat);
  auto& master = flat_->grad();
  // Where nothing is scattered (a shard of one) and no micro-batch sum is pending, the flat gradient is the master
  // gradient: flattened into it, it is not copied again.
  const bool into_master =
      shard_comm_.size() == 1 && sync_ && !unsynced_.defined() && accumulate == master.scalar_type();
  if (backward_calls_ == 0 && into_master) {
    flat_->flatten_into(grads, master);
    grad_accum_ = master;
  } else if (backward_calls_ == 0) {
    grad_accum_ = flat_->flatten(grads, accumulate);
  } else {
    grad_accum_.add_(flat_->flatten(grads, accumulate));
  }
  if (++backward_calls_ < call_sites_) return;
  backward_calls_ = 0;
  free();

  if (into_master) {
    grad_accum_ = at::Tensor();
    cast_ = at::Tensor();
    if (replica_comm_.size() > 1) reductions_.push_back(replica_comm_.all_reduce(master, comm::ReduceOp::Mean));
    return;
  }
  at::Tensor grad = std::move(grad_accum_);
  // Micro-batches sum in at least float32, like the call sites above.
  if (unsynced_.defined())
    unsynced_.add_(grad);
  else if (!sync_)
    unsynced_ = grad.to(at::promote_types(grad.scalar_type(), at::kFloat));
  if (!sync_) return;
  cast_ = at::Tensor();  // the step's last backward of this unit: the next forward follows the optimizer step
  if (unsynced_.defined()) grad = std::move(unsynced_);
  unsynced_ = at::Tensor();
  grad = grad.to(opts_.reduce());
  const bool cast_after = opts_.reduce() != master.scalar_type();
  auto out = cast_after ? at::empty(master.sizes(), master.options().dtype(opts_.reduce())) : master;
  if (shard_comm_.size() == 1)
    out.copy_(grad);
  else
    reductions_.push_back(shard_comm_.reduce_scatter(grad, out, comm::ReduceOp::Mean));
  if (replica_comm_.size() > 1) reductions_.push_back(replica_comm_.all_reduce(out, comm::ReduceOp::Mean));
  reduced_ = cast_after ? out : at::Tensor();
}

void ShardedUnit::wait_grad() {
  for (auto& w : reductions_) w->wait();
  reductions_.clear();
  if (reduced_.defined()) {
    flat_->grad().copy_(reduced_);
    reduced_ = at::Tensor();
  }
}

}  // namespace fedshard::parallel
