#include "train/rank_state.h"

#include <ATen/core/grad_mode.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/tensor.h>

#include <algorithm>

#include "comm/mpi_ops.h"
#include "train/engine.h"
#include "util/error.h"

namespace fedshard::train {

namespace {

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

}  // namespace

std::string state_key(StatePart part, const std::string& name) {
  switch (part) {
    case StatePart::Param: return "param";
    case StatePart::Inner: return "opt." + name;
    case StatePart::Outer: return "outer." + name;
    case StatePart::Federation: return "fed." + name;
  }
  return "";
}

StepCounts StepCounts::of(const optim::Optimizer& o) { return {o.steps(), o.slice_steps()}; }

void StepCounts::apply_to(optim::Optimizer& o) const {
  o.set_steps(steps);
  o.set_slice_steps(slice_steps);
}

at::Tensor StepCounts::to_tensor() const {
  std::vector<int64_t> v{steps};
  v.insert(v.end(), slice_steps.begin(), slice_steps.end());
  return at::tensor(v, at::kLong);
}

StepCounts StepCounts::from_tensor(const at::Tensor& t) {
  const auto c = t.to(at::kLong).contiguous();
  const auto* p = c.data_ptr<int64_t>();
  return {p[0], std::vector<int64_t>(p + 1, p + c.numel())};
}

RankState rank_state(parallel::ShardedModel& sharded, optim::Optimizer& inner, federation::Lane* lane) {
  RankState out;
  out.counts = StepCounts::of(inner);
  const auto& units = sharded.units();
  const auto outer = lane ? lane->outer_state() : std::vector<std::map<std::string, at::Tensor>>{};
  const auto fed = lane ? lane->state() : std::vector<std::map<std::string, at::Tensor>>{};
  for (size_t u = 0; u < units.size(); ++u) {
    out.tensors.push_back({u, StatePart::Param, "", units[u]->flat().shard().detach()});
    for (auto& [k, t] : inner.state()[u]) out.tensors.push_back({u, StatePart::Inner, k, t});
    if (!lane) continue;
    for (const auto& [k, t] : outer[u]) out.tensors.push_back({u, StatePart::Outer, k, t});
    for (const auto& [k, t] : fed[u]) out.tensors.push_back({u, StatePart::Federation, k, t});
  }
  return out;
}

RankState rank_state(Engine& e) { return rank_state(*e.sharded, *e.optimizer, e.lane()); }

void set_state(const StateTensor& s, const at::Tensor& value, federation::Lane* lane) {
  at::NoGradGuard no_grad;
  s.tensor.copy_(value);
  if (s.part == StatePart::Federation) lane->restore_state(s.unit, s.name, s.tensor);
}

void hand_over(Engine& from, Engine& to) {
  at::NoGradGuard no_grad;
  const auto src = rank_state(from);
  const auto dst = rank_state(to);
  FS_CHECK(src.tensors.size() == dst.tensors.size(), "hand_over: ", src.tensors.size(), " state tensors into ",
           dst.tensors.size(), " (another optimizer?)");
  for (size_t i = 0; i < src.tensors.size(); ++i) {
    const auto &s = src.tensors[i], &d = dst.tensors[i];
    FS_CHECK(d.tensor.sizes() == s.tensor.sizes(), "hand_over: ", d.key(), " of unit ", d.unit, " is ",
             s.tensor.sizes(), " here and ", d.tensor.sizes(), " in the new layout");
    set_state(d, s.tensor, to.lane());
  }
  src.counts.apply_to(*to.optimizer);
}

int64_t state_checksum(Engine& e) {
  at::NoGradGuard no_grad;
  const auto state = rank_state(e);
  int64_t sum = state.counts.to_tensor().sum().item<int64_t>();
  for (const auto& s : state.tensors) sum += s.tensor.contiguous().view(at::kInt).to(at::kLong).sum().item<int64_t>();
  return sum;
}

int64_t send_state(Engine& from, MPI_Comm comm, int dest) {
  at::NoGradGuard no_grad;
  FS_CHECK(!from.lane() || !from.lane()->in_flight(), "send_state: a federation round is in flight");
  const auto state = rank_state(from);
  int64_t sent = send_tensor(state.counts.to_tensor(), comm, dest);
  for (const auto& s : state.tensors) sent += send_tensor(s.tensor, comm, dest);
  return sent;
}

int64_t receive_state(Engine& to, MPI_Comm comm, int source) {
  at::NoGradGuard no_grad;
  const auto state = rank_state(to);
  at::Tensor counts = state.counts.to_tensor();
  int64_t received = receive_tensor(counts, comm, source);
  StepCounts::from_tensor(counts).apply_to(*to.optimizer);
  for (const auto& s : state.tensors) {
    auto value = at::empty(s.tensor.sizes(), s.tensor.options());
    received += receive_tensor(value, comm, source);
    set_state(s, value, to.lane());
  }
  return received;
}

}  // namespace fedshard::train
