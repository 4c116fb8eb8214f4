#include "train/recovery.h"

#include <cstdio>

#include "comm/failure_watch.h"
#include "comm/mpi_ops.h"
#include "comm/mpi_runtime.h"
#include "comm/work.h"
#include "util/error.h"

namespace fedshard::train {

namespace {

std::string ids(const std::vector<int>& v) { return nlohmann::json(v).dump(); }

std::string two_decimals(double x) {
  char s[32];
  std::snprintf(s, sizeof s, "%.2f", x);
  return s;
}

}  // namespace

Recovery::Recovery(const TrainSetup& setup, const Faults& faults, RunLog& log, Rebuild& run)
    : setup_(setup), faults_(faults), log_(log), run_(run), membership_(setup.layout, setup.cfg.rejoin_after) {
  if (setup.join) membership_.joined(*setup.join);
}

void Recovery::watch() { comm::FailureWatch::watch(membership_.base(), membership_.launch_ranks()); }

void Recovery::progress(double recovery_seconds) {
  comm::FailureWatch::expect_recovery(recoverable(), recovery_seconds);
  comm::FailureWatch::progress();
}

Membership::Position Recovery::position(int64_t step, const char* during) const {
  const auto p = run_.point(step);
  return {step, p.syncs, p.group_ids, during};
}

bool Recovery::attempt(int64_t step, const char* during, Agreement how, const std::function<void()>& work,
                       const std::function<void()>& on_loss) {
  const auto t0 = Clock::now();
  auto change = membership_.with_recovery(recoverable(), how, *run_.engine().topo, position(step, during), work, on_loss);
  if (!change) return true;
  apply_surviving(step, std::move(*change), t0);
  return false;
}

void Recovery::until_done(int64_t step, const char* during, Agreement how, const std::function<void()>& work,
                          const std::function<void()>& on_loss) {
  while (!attempt(step, during, how, work, on_loss)) {
  }
}

void Recovery::outside_agreement(int64_t step, const std::function<void()>& work) {
  std::string failed;
  try {
    return work();
  } catch (const comm::PeerLost& e) {
    if (!recoverable()) throw;
    failed = e.what();
  }
  // Lost in a group's own collectives (a step's, a round's all-gathers inside the group): that group's ranks leave
  // at the kept groups' next agreement.
  const auto t0 = Clock::now();
  apply_surviving(step, membership_.lost(*run_.engine().topo, position(step, "step")), t0);
  throw Error(cat("a rank was lost during step ", step, " (", failed, "), where this rank's group cannot take the ",
                  "step again (in-job recovery covers losses that the kept groups learn of in an agreement); resume ",
                  "from the last checkpoint"));
}

void Recovery::agree_in_group(int64_t step, at::Tensor flags, comm::Communicator& group) {
  group_sent_ = recoverable() ? flags.clone() : at::Tensor();
  try {
    group.all_reduce(flags, comm::ReduceOp::Mean, comm::Traffic::Control)->wait();
  } catch (const comm::PeerLost& e) {
    if (!group_sent_.defined() || !e.revoked()) throw;
    const std::string what = e.what();
    attempt(step, "group agreement", Agreement::Succeeded, [&] { throw comm::PeerLost(what, true); });
    flags.copy_(group_agreed_);
  }
}

void Recovery::apply_surviving(int64_t step, MembershipChange change, Clock::time_point t0) {
  for (;;) {
    try {
      apply_loss(step, change, t0);
      return;
    } catch (const comm::PeerLost&) {
      auto next = membership_.lost(*run_.engine().topo, {step, run_.point(step).syncs, change.group_ids, "recovery"});
      next.lost_group_ids.insert(next.lost_group_ids.begin(), change.lost_group_ids.begin(),
                                 change.lost_group_ids.end());
      next.lost_ranks.insert(next.lost_ranks.begin(), change.lost_ranks.begin(), change.lost_ranks.end());
      next.during = change.during + ", then recovery";
      change = std::move(next);
    }
  }
}

void Recovery::apply_loss(int64_t step, const MembershipChange& change, Clock::time_point t0) {
  const auto p = run_.point(step);
  run_.rebuild(change.layout, change.group_ids, p.round_step, p.round_tokens);
  faults_.at(FaultPoint::Recovery, step);
  // Every kept rank agrees once more over its rebuilt group (agree_in_group says why); a loss meanwhile is one more
  // loss of this recovery (apply_surviving).
  if (group_sent_.defined()) {
    group_agreed_ = group_sent_.clone();
    run_.engine().topo->group().all_reduce(group_agreed_, comm::ReduceOp::Mean, comm::Traffic::Control)->wait();
  }
  const double seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  log_.membership({{"type", "group_lost"},
                   {"step", step},
                   {"lost_group_ids", change.lost_group_ids},
                   {"lost_ranks", change.lost_ranks},
                   {"group_ids", change.group_ids},
                   {"group_sizes", change.layout.group_sizes()},
                   {"during", change.during},
                   {"recover_s", seconds}},
                  cat("fedshard: lost rank(s) ", ids(change.lost_ranks), " at step ", step, " (seen in: ",
                      change.during, "): groups ", ids(change.lost_group_ids), " left the job, groups ",
                      ids(change.group_ids), " go on (", two_decimals(seconds), " s)"),
                  step, /*lost=*/true);
}

void Recovery::rejoin_if_due(int64_t step, double peak_flops) {
  const auto p = run_.point(step);
  if (p.round_step == step && membership_.rejoin_due(p.syncs)) rejoin(step, peak_flops);
}

void Recovery::rejoin(int64_t step, double peak_flops) {
  const auto t0 = Clock::now();
  const comm::Layout old = run_.engine().topo->layout();
  const auto p = run_.point(step);
  JoinPlan plan;
  plan.step = step;
  plan.tokens = p.tokens;
  plan.syncs = p.syncs;
  plan.launch_world = comm::MpiRuntime::get().world_size();
  plan.peak_flops = peak_flops;
  const auto grown = membership_.grow(position(step, "rejoin"), old, plan, comm::MpiRuntime::get().argv());
  const auto& joined = grown.group_ids;
  // Where the replacements do not join, the job goes on without them and says why.
  const auto not_joined = [&](const std::string& why) {
    log_.membership({{"type", "rejoin_failed"}, {"step", step}, {"group_ids", joined}, {"error", why}},
                    cat("fedshard: groups ", ids(joined), " did not rejoin after step ", step, " (", why,
                        "); going on without them"),
                    step);
  };
  if (!grown.change) return not_joined(grown.error);
  // The run's tokens so far stay counted through this step; the world's tokens per step grow from the next.
  run_.rebuild(grown.change->layout, grown.change->group_ids, step, plan.tokens);
  // Every replacement takes the state of the rank at its position in the first group (the donor). A rank lost
  // meanwhile, a replacement or a kept one, makes every replacement leave and the groups that lost a rank too.
  int64_t sent_bytes = 0, state_bytes = 0;
  const auto& layout = grown.change->layout;
  const auto transfer = [&] {
    faults_.at(FaultPoint::Join, step);
    auto& engine = run_.engine();
    for (int r = old.world(); r < layout.world(); ++r)
      if (engine.topo->world_rank() == layout.first_rank(0) + layout.coords(r).position)
        sent_bytes += send_state(engine, membership_.base(), r);
    // Inside the agreement below: a member waiting here on a dead one is released as from a receive.
    comm::mpi_check(MPI_Reduce(&sent_bytes, &state_bytes, 1, MPI_INT64_T, MPI_SUM, 0, membership_.base()), "MPI_Reduce");
  };
  if (!attempt(step, "rejoin", Agreement::Exchanged, transfer, [&] { not_joined("a rank was lost during the join"); }))
    return;
  if (setup_.cfg.audit) audit_join(step, sent_bytes);
  const double seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  log_.membership({{"type", "group_joined"},
                   {"step", step},
                   {"joined_group_ids", joined},
                   {"joined_ranks", grown.change->joined_ranks},
                   {"group_ids", grown.change->group_ids},
                   {"group_sizes", layout.group_sizes()},
                   {"state_bytes", state_bytes},
                   {"join_s", seconds}},
                  cat("fedshard: groups ", ids(joined), " rejoined after step ", step, ": ",
                      grown.change->joined_ranks.size(), " replacement rank(s) started, groups ",
                      ids(grown.change->group_ids), " go on (", two_decimals(seconds), " s)"),
                  step);
}

int64_t Recovery::join(const JoinPlan& plan) {
  auto& engine = run_.engine();
  const auto& layout = engine.topo->layout();
  int64_t received_bytes = 0;
  const auto receive = [&] {
    received_bytes = receive_state(engine, membership_.base(), layout.first_rank(0) + engine.topo->coords().position);
    const int64_t none = 0;
    comm::mpi_check(MPI_Reduce(&none, nullptr, 1, MPI_INT64_T, MPI_SUM, 0, membership_.base()), "MPI_Reduce");
  };
  if (!succeeded_everywhere(membership_.base(), Agreement::Exchanged, receive)) {
    // The kept ranks go on without every joining group (rejoin): this process ends here, as a lost one, so their
    // recovery counts it among the lost.
    std::fprintf(stderr, "fedshard: rank %d: a rank was lost while this replacement joined after step %lld; it "
                 "leaves, the job goes on\n", comm::MpiRuntime::get().world_rank(), static_cast<long long>(plan.step));
    comm::MpiRuntime::note_peer_lost();
    comm::MpiRuntime::get().finish(0);
  }
  return received_bytes;
}

void Recovery::audit_join(int64_t step, int64_t state_bytes) {
  auto& engine = run_.engine();
  log_.audit(comm::MpiRuntime::get().world_rank(),
             {{"join_step", step}, {"group", setup_.group_ids.at(static_cast<size_t>(engine.topo->coords().group))},
              {"position", engine.topo->coords().position}, {"state_checksum", state_checksum(engine)},
              {"state_bytes", state_bytes}});
}

}  // namespace fedshard::train
