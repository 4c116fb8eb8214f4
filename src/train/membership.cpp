#include "train/membership.h"

#include "comm/mpi_runtime.h"
#include "comm/rejoin.h"
#include "comm/survivors.h"
#include "comm/work.h"
#include "util/error.h"

namespace fedshard::train {

bool succeeded_everywhere(MPI_Comm comm, Agreement how, const std::function<void()>& work,
                          const std::function<void()>& revoke) {
  bool done = true;
  try {
    work();
  } catch (const comm::PeerLost&) {
    if (revoke) revoke();
    done = false;
  }
  return how == Agreement::Succeeded ? comm::all_succeeded(comm, done) : comm::all_exchanged(comm, done);
}

Membership::Membership(const comm::Layout& layout, int64_t rejoin_after) : layout_(layout), rejoin_after_(rejoin_after) {
  for (int r = 0; r < layout.world(); ++r) launch_ranks_.push_back(r);
}

Membership::~Membership() { set_base(MPI_COMM_WORLD); }

void Membership::set_base(MPI_Comm base) {
  if (base_ != MPI_COMM_WORLD) MPI_Comm_free(&base_);
  base_ = base;
}

std::optional<MembershipChange> Membership::with_recovery(bool recoverable, Agreement how, comm::Topology& topo,
                                                          const Position& at, const std::function<void()>& work,
                                                          const std::function<void()>& before) {
  if (!recoverable) {
    work();
    return std::nullopt;
  }
  const auto revoke = [&] {
    topo.revoke_all();
    comm::revoke_mpi_comm(base_);
  };
  if (succeeded_everywhere(base_, how, work, revoke)) return std::nullopt;
  if (before) before();
  topo.revoke_all();
  return lose(at);
}

MembershipChange Membership::lost(comm::Topology& topo, const Position& at) {
  topo.revoke_all();
  comm::revoke_mpi_comm(base_);
  comm::all_succeeded(base_, false);
  return lose(at);
}

MembershipChange Membership::lose(const Position& at) {
  const comm::Layout old = layout_;
  // Every rank alive in the base communicator, its group's (the one this rank trains in) known from the layout.
  int me = 0;
  MPI_Comm_rank(base_, &me);
  const int my_group = old.coords(me).group;
  comm::Survivors survivors;
  comm::Regrouped kept;
  for (;;) {
    survivors = comm::shrink_after_failure(base_);
    try {
      kept = comm::regroup(survivors, old);
      break;
    } catch (const comm::PeerLost&) {
      MPI_Comm_free(&survivors.comm);  // another rank died meanwhile: shrink again
    }
  }
  MPI_Comm_free(&survivors.comm);
  // Named as at launch: after an earlier loss or a rejoin, ranks of the base communicator are numbered differently.
  MembershipChange change;
  change.during = at.during;
  for (int r : survivors.lost) change.lost_ranks.push_back(launch_ranks_.at(r));
  std::vector<int> kept_launch_ranks;
  for (int g : kept.lost_groups) {
    change.lost_group_ids.push_back(at.group_ids.at(g));
    std::vector<int> members;  // the whole group: its live ranks leave too
    for (int r : old.group_members(old.first_rank(g))) members.push_back(launch_ranks_.at(r));
    lost_groups_.emplace_back(at.group_ids.at(g), std::move(members));
  }
  for (int g : kept.kept_groups) {
    change.group_ids.push_back(at.group_ids.at(g));
    for (int r : old.group_members(old.first_rank(g))) kept_launch_ranks.push_back(launch_ranks_.at(r));
  }
  const int launch_rank = comm::MpiRuntime::get().world_rank();
  launch_ranks_ = kept_launch_ranks;
  rejoin_round_ = at.syncs + rejoin_after_;
  if (kept.comm == MPI_COMM_NULL)
    throw LeftJob{cat("rank ", launch_rank, " of group ", at.group_ids.at(my_group), ": lost rank(s) ",
                      nlohmann::json(change.lost_ranks).dump(), " at step ", at.step, " (seen in: ", at.during, "); groups ",
                      nlohmann::json(change.lost_group_ids).dump(), " leave the job, which goes on with groups ",
                      nlohmann::json(change.group_ids).dump())};
  FS_CHECK(!kept.kept_groups.empty(), "every group lost a rank at step ", at.step);
  change.layout = layout_ = kept.layout;
  set_base(kept.comm);
  changed_ = true;
  return change;
}

Membership::Growth Membership::grow(const Position& at, const comm::Layout& old, JoinPlan plan,
                                    const std::vector<std::string>& argv) {
  Growth out;
  plan.group_sizes = old.group_sizes();
  plan.group_ids = at.group_ids;
  plan.launch_ranks = launch_ranks_;
  MembershipChange change;
  for (const auto& [id, ranks] : lost_groups_) {
    plan.group_sizes.push_back(static_cast<int>(ranks.size()));
    plan.group_ids.push_back(id);
    change.joined_group_ids.push_back(id);
    change.joined_ranks.insert(change.joined_ranks.end(), ranks.begin(), ranks.end());
  }
  lost_groups_.clear();
  out.group_ids = change.joined_group_ids;
  plan.launch_ranks.insert(plan.launch_ranks.end(), change.joined_ranks.begin(), change.joined_ranks.end());
  auto grown = comm::spawn_replacements(base_, static_cast<int>(change.joined_ranks.size()), argv);
  if (grown.comm == MPI_COMM_NULL) {
    out.error = grown.error;
    return out;
  }
  comm::broadcast_text(plan.to_json().dump(), 0, grown.comm);
  comm::MpiRuntime::get().count_host_ranks(grown.comm, comm::MpiRuntime::get().world_rank());
  // The replacements' start-up (prepare_joining) may fail on their node: then they have left.
  if (!comm::all_succeeded(grown.comm, true)) {
    MPI_Comm_free(&grown.comm);
    out.error = "a replacement could not start up";
    return out;
  }
  launch_ranks_ = plan.launch_ranks;
  change.layout = layout_ = comm::Layout(plan.group_sizes, old.shard_spec());
  change.group_ids = plan.group_ids;
  set_base(grown.comm);
  changed_ = true;
  out.change = std::move(change);
  return out;
}

void Membership::joined(const JoinPlan& plan) {
  layout_ = comm::Layout(plan.group_sizes, layout_.shard_spec());
  launch_ranks_ = plan.launch_ranks;
  base_ = plan.comm;
  changed_ = true;
}

}  // namespace fedshard::train
