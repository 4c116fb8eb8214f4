#include "train/evaluator.h"

#include <ATen/core/grad_mode.h>
#include <cmath>

namespace fedshard::train {

EvalResult evaluate(parallel::ShardedModel& model, const data::TokenDataset& val, int64_t windows,
                    int64_t batch_size, comm::Communicator& comm) {
  at::NoGradGuard no_grad;
  const int64_t total = windows > 0 ? std::min(windows, val.num_windows()) : val.num_windows();
  const int64_t p = comm.size(), q = comm.rank();
  const int64_t per_rank = (total + p - 1) / p;
  const int64_t batches = (per_rank + batch_size - 1) / batch_size;
  const int64_t t = val.seq_len();
  const auto device = model.options().device;
  auto sums = at::zeros({2}, at::TensorOptions().dtype(at::kDouble).device(device));  // loss sum, token count
  for (int64_t b = 0; b < batches; ++b) {
    std::vector<int64_t> ids;
    std::vector<double> weight;
    for (int64_t i = 0; i < batch_size; ++i) {
      const int64_t j = (b * batch_size + i) * p + q;
      ids.push_back(j < total ? j : 0);
      weight.push_back(j < total ? 1.0 : 0.0);
    }
    auto tokens = val.batch(ids).to(device);
    // Padding windows' positions are left out of the loss by their target.
    auto counted = at::tensor(weight, at::kDouble).to(device).gt(0).unsqueeze(1);
    auto targets = at::where(counted, tokens.narrow(1, 1, t), at::full({}, kernels::kIgnoreIndex, tokens.options()));
    sums[0] += model.loss(tokens.narrow(1, 0, t), targets, kernels::Reduction::Sum).to(at::kDouble);
    sums[1] += counted.sum().to(at::kDouble) * static_cast<double>(t);
  }
  comm.all_reduce(sums, comm::ReduceOp::Sum, comm::Traffic::Control)->wait();
  EvalResult r;
  r.tokens = static_cast<int64_t>(sums[1].item<double>());
  r.loss = sums[0].item<double>() / sums[1].item<double>();
  r.ppl = std::exp(r.loss);
  return r;
}

}  // namespace fedshard::train
