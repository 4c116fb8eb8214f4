#include "train/group_states.h"

#include <ATen/core/grad_mode.h>

namespace fedshard::train {

namespace {

// dst <- src, entry by entry: tensors of dst kept (copied into) where both have the name.
void assign(std::map<std::string, at::Tensor>& dst, const std::map<std::string, at::Tensor>& src) {
  for (auto it = dst.begin(); it != dst.end();) it = src.count(it->first) ? std::next(it) : dst.erase(it);
  for (const auto& [name, t] : src) {
    auto it = dst.find(name);
    if (it != dst.end() && it->second.sizes() == t.sizes())
      it->second.copy_(t);
    else
      dst[name] = t.clone();
  }
}

}  // namespace

GroupStates::GroupStates(int groups, parallel::ShardedModel& model, optim::Optimizer& opt)
    : model_(model), opt_(opt), groups_(static_cast<size_t>(groups)) {
  for (int g = 0; g < groups; ++g) save(g);
}

std::vector<at::Tensor> GroupStates::live_shards() const {
  std::vector<at::Tensor> s;
  for (const auto& u : model_.units()) s.push_back(u->flat().shard());
  return s;
}

void GroupStates::save(int g) {
  at::NoGradGuard no_grad;
  auto& st = groups_.at(static_cast<size_t>(g));
  const auto live = live_shards();
  if (st.shards.empty())
    for (const auto& t : live) st.shards.push_back(t.detach().clone());
  else
    for (size_t u = 0; u < live.size(); ++u) st.shards[u].copy_(live[u]);
  st.opt.resize(opt_.state().size());
  for (size_t i = 0; i < st.opt.size(); ++i) assign(st.opt[i], opt_.state()[i]);
  st.steps = opt_.steps();
  st.slice_steps = opt_.slice_steps();
}

void GroupStates::load(int g) {
  at::NoGradGuard no_grad;
  const auto& st = groups_.at(static_cast<size_t>(g));
  const auto live = live_shards();
  for (size_t u = 0; u < live.size(); ++u) live[u].copy_(st.shards[u]);
  for (size_t i = 0; i < st.opt.size(); ++i) assign(opt_.state()[i], st.opt[i]);
  opt_.set_steps(st.steps);
  opt_.set_slice_steps(st.slice_steps);
}

void GroupStates::combine(bool state) {
  at::NoGradGuard no_grad;
  const double n = static_cast<double>(groups_.size());
  const auto live = live_shards();
  for (size_t u = 0; u < live.size(); ++u) {
    live[u].zero_();
    for (const auto& st : groups_) live[u].add_(st.shards[u]);
    live[u].div_(n);
  }
  if (!state) return;
  for (size_t i = 0; i < opt_.state().size(); ++i)
    for (auto& [name, t] : opt_.state()[i]) {
      t.zero_();
      for (const auto& st : groups_) t.add_(st.opt[i].at(name));
      t.div_(n);
    }
}

void GroupStates::distribute(bool state) {
  at::NoGradGuard no_grad;
  const auto live = live_shards();
  for (auto& st : groups_) {
    for (size_t u = 0; u < live.size(); ++u) st.shards[u].copy_(live[u]);
    if (!state) continue;
    for (size_t i = 0; i < st.opt.size(); ++i) assign(st.opt[i], opt_.state()[i]);
    st.steps = opt_.steps();
    st.slice_steps = opt_.slice_steps();
  }
}

}  // namespace fedshard::train
