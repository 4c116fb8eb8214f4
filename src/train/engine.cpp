#include "train/engine.h"

#include <ATen/core/grad_mode.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/tensor.h>

#include <algorithm>

#include "comm/mpi_ops.h"
#include "util/error.h"

namespace fedshard::train {

namespace {

// 1 where weight decay applies, over this rank's shard of a unit; undefined when it applies everywhere.
at::Tensor decay_mask(parallel::FlatParam& flat, bool decay_all) {
  if (decay_all) return at::Tensor();
  auto full = at::ones({flat.padded_numel()}, flat.shard().options().requires_grad(false));
  for (const auto& e : flat.entries()) {
    const bool exempt = e.name.find("norm.weight") != std::string::npos || e.name == "tok_embeddings.weight";
    if (exempt) full.narrow(0, e.offset, e.numel).zero_();
  }
  return flat.slice_of(full).clone();
}

constexpr int kStateTag = 31;
constexpr int64_t kChunk = int64_t{1} << 28;  // elements per message: an MPI count is an int

int64_t send_tensor(const at::Tensor& t, MPI_Comm comm, int dest) {
  const at::Tensor host = t.to(at::kCPU).contiguous();
  const auto* p = static_cast<const char*>(host.data_ptr());
  int64_t sent = 0;
  for (int64_t i = 0; i < host.numel(); i += kChunk) {
    const int n = static_cast<int>(std::min(kChunk, host.numel() - i));
    comm::mpi_check(MPI_Send(p + i * host.element_size(), n, comm::mpi_type(host), dest, kStateTag, comm), "MPI_Send");
    sent += int64_t{n} * host.element_size();
  }
  return sent;
}

int64_t receive_tensor(at::Tensor t, MPI_Comm comm, int source) {
  at::Tensor host = at::empty(t.sizes(), t.options().device(at::kCPU));
  auto* p = static_cast<char*>(host.data_ptr());
  const MPI_Datatype type = comm::mpi_type(host);
  int type_bytes = 0;
  MPI_Type_size(type, &type_bytes);
  int64_t received = 0;
  for (int64_t i = 0; i < host.numel(); i += kChunk) {
    const int n = static_cast<int>(std::min(kChunk, host.numel() - i));
    MPI_Status status;
    comm::mpi_check(MPI_Recv(p + i * host.element_size(), n, type, source, kStateTag, comm, &status), "MPI_Recv");
    int count = 0;
    MPI_Get_count(&status, type, &count);
    received += int64_t{count} * type_bytes;
  }
  t.copy_(host);
  return received;
}

// The optimizer's step counts, which AdamW's bias correction reads: its steps, then per slice.
at::Tensor step_counts(const optim::Optimizer& o) {
  std::vector<int64_t> v{o.steps()};
  v.insert(v.end(), o.slice_steps().begin(), o.slice_steps().end());
  return at::tensor(v, at::kLong);
}

}  // namespace

std::vector<StateTensor> rank_state(parallel::ShardedModel& sharded, optim::Optimizer& inner,
                                    federation::Aggregator* agg) {
  std::vector<StateTensor> out;
  const auto& units = sharded.units();
  const auto fed = agg ? agg->state() : std::vector<std::map<std::string, at::Tensor>>{};
  for (size_t u = 0; u < units.size(); ++u) {
    out.push_back({u, "param", units[u]->flat().shard().detach()});
    for (auto& [k, t] : inner.state()[u]) out.push_back({u, "opt." + k, t});
    if (!agg) continue;
    for (auto& [k, t] : agg->outer().state()[u]) out.push_back({u, "outer." + k, t});
    for (const auto& [k, t] : fed[u]) out.push_back({u, "fed." + k, t});
  }
  return out;
}

void set_state(const StateTensor& s, const at::Tensor& value, federation::Aggregator* agg) {
  at::NoGradGuard no_grad;
  s.tensor.copy_(value);
  if (s.key.rfind("fed.", 0) == 0) agg->restore_state(s.unit, s.key.substr(4), s.tensor);
}

Engine parallelize(const EngineSpec& spec) {
  Engine e;
  e.topo = std::make_unique<comm::Topology>(spec.layout, spec.topology, spec.base);
  const auto& layout = e.topo->layout();
  e.model = std::make_unique<model::Llama>(spec.model, spec.sharding.master_dtype, /*materialize=*/false);
  if (spec.init)
    e.sharded = std::make_unique<parallel::ShardedModel>(*e.model, e.topo->shard(), e.topo->replica(), spec.sharding,
                                                         layout.pad_multiple(), spec.init);
  else
    e.sharded = std::make_unique<parallel::ShardedModel>(*e.model, e.topo->shard(), e.topo->replica(), spec.sharding,
                                                         layout.pad_multiple(), spec.seed);
  std::vector<optim::ParamSlice> slices;
  for (auto& u : e.sharded->units())
    slices.push_back({u->flat().shard(), u->flat().grad(), decay_mask(u->flat(), spec.decay_norms_and_embeddings)});
  e.optimizer = optim::make_optimizer(spec.optimizer, std::move(slices));
  if (spec.federation)
    e.aggregator = std::make_unique<federation::Aggregator>(*e.sharded, *e.topo, *e.optimizer, *spec.federation);
  return e;
}

void hand_over(Engine& from, Engine& to) {
  at::NoGradGuard no_grad;
  const auto src = rank_state(*from.sharded, *from.optimizer, from.aggregator.get());
  const auto dst = rank_state(*to.sharded, *to.optimizer, to.aggregator.get());
  FS_CHECK(src.size() == dst.size(), "hand_over: ", src.size(), " state tensors into ", dst.size(),
           " (another optimizer?)");
  for (size_t i = 0; i < src.size(); ++i) {
    FS_CHECK(dst[i].tensor.sizes() == src[i].tensor.sizes(), "hand_over: ", dst[i].key, " of unit ", dst[i].unit,
             " is ", src[i].tensor.sizes(), " here and ", dst[i].tensor.sizes(), " in the new layout");
    set_state(dst[i], src[i].tensor, to.aggregator.get());
  }
  to.optimizer->set_steps(from.optimizer->steps());
  to.optimizer->set_slice_steps(from.optimizer->slice_steps());
}

int64_t state_checksum(Engine& e) {
  at::NoGradGuard no_grad;
  int64_t sum = step_counts(*e.optimizer).sum().item<int64_t>();
  for (const auto& s : rank_state(*e.sharded, *e.optimizer, e.aggregator.get()))
    sum += s.tensor.contiguous().view(at::kInt).to(at::kLong).sum().item<int64_t>();
  return sum;
}

int64_t send_state(Engine& from, MPI_Comm comm, int dest) {
  at::NoGradGuard no_grad;
  FS_CHECK(!from.aggregator || !from.aggregator->in_flight(), "send_state: a federation round is in flight");
  int64_t sent = send_tensor(step_counts(*from.optimizer), comm, dest);
  for (const auto& s : rank_state(*from.sharded, *from.optimizer, from.aggregator.get()))
    sent += send_tensor(s.tensor, comm, dest);
  return sent;
}

int64_t receive_state(Engine& to, MPI_Comm comm, int source) {
  at::NoGradGuard no_grad;
  at::Tensor counts = step_counts(*to.optimizer);
  int64_t received = receive_tensor(counts, comm, source);
  const auto* c = counts.data_ptr<int64_t>();
  to.optimizer->set_steps(c[0]);
  to.optimizer->set_slice_steps(std::vector<int64_t>(c + 1, c + counts.numel()));
  for (const auto& s : rank_state(*to.sharded, *to.optimizer, to.aggregator.get())) {
    auto value = at::empty(s.tensor.sizes(), s.tensor.options());
    received += receive_tensor(value, comm, source);
    set_state(s, value, to.aggregator.get());
  }
  return received;
}

}  // namespace fedshard::train
