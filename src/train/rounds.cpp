#include "train/rounds.h"

#include <algorithm>

#include "comm/mpi_runtime.h"
#include "util/error.h"

namespace fedshard::train {

Rounds::Rounds(const TrainConfig& cfg, federation::Schedule schedule, Recovery& recovery, RunLog& log,
               TokenCount& tokens, Wants wants)
    : cfg_(cfg), schedule_(std::move(schedule)), recovery_(recovery), log_(log), tokens_(tokens),
      wants_(std::move(wants)) {}

void Rounds::attach(federation::Lane& lane, GroupStates* held, std::vector<int> group_ids, int group,
                    bool first_rank) {
  lane_ = &lane;
  held_ = held;
  group_ids_ = std::move(group_ids);
  group_ = group;
  first_rank_ = first_rank;
}

at::Tensor Rounds::nonfinite_flag(int64_t step) const {
  return timed() || schedule_.due(step) ? lane_->nonfinite_flag() : at::Tensor();
}

federation::Vote Rounds::vote(int64_t step, bool nonfinite, bool stop) const {
  // Groups agree on a stop inside themselves every step and with each other here; time-based rounds also agree
  // here on the evaluations and checkpoints that any group's steps made due.
  federation::Vote v = wants_(step);
  v.stop = stop;
  v.nonfinite = nonfinite;
  v.step = step;
  v.steps_in_round = schedule_.steps_since_sync();
  v.round = schedule_.syncs() + 1;
  v.launch_tokens = tokens_.group_tokens(step);
  return v;
}

RoundResult Rounds::after_step(int64_t step, bool time_up, bool nonfinite, bool stop) {
  RoundResult r;
  if (!schedule_.due(step, time_up)) {
    if (stop && group_ids_.size() > 1) {
      // Between rounds: stop at this step rather than at the next round (which may be past the grace time).
      r.agreement = lane_->vote_stop(vote(step, nonfinite, stop));
      r.group_ids = group_ids_;
      r.agreed = true;
      r.stop = true;
    } else {
      lane_->progress();
    }
    return r;
  }
  // The round in flight (overlap) first: applied once it has arrived everywhere; one that a lost rank stopped is
  // dropped, each group's model as it is, and this round averages them (one a checkpoint settled goes on).
  while (lane_->in_flight()) {
    if (recovery_.attempt(step, "round arrival", Agreement::Succeeded, [&] { lane_->arrive(); })) lane_->finish();
  }
  // A round is applied only once every rank's averaging has arrived and all agree it did: one lost before leaves
  // every model as it was, and the kept groups hold the round again, weighted as before, without the lost ones.
  const auto before = schedule_;
  bool issued = false;
  recovery_.until_done(
      step, "round", Agreement::Succeeded, [&] { issued = begin(step, nonfinite, stop, r); },
      [&] {
        schedule_ = before;
        r = {};
      });
  if (issued) end(step, r);
  return r;
}

RoundResult Rounds::hold_pending(int64_t step) {
  RoundResult r;
  if (begin(step, /*nonfinite=*/false, /*stop=*/false, r)) end(step, r);
  return r;
}

bool Rounds::begin(int64_t step, bool nonfinite, bool stop, RoundResult& r) {
  if (lane_->in_flight()) lane_->finish();
  // Held groups enter the round as their mean, weighted as all of them, and all leave it with the result.
  if (held_) held_->combine(cfg_.inner_state == "average");
  r.agreement = lane_->begin(schedule_.units(step), schedule_.weight(step), vote(step, nonfinite, stop));
  r.group_ids = group_ids_;
  r.agreed = true;
  r.stop = r.agreement.any.stop;
  // Another group stopped between rounds: this round is held first thing after the resume.
  pending_ = !r.agreement.issued;
  if (pending_) return false;
  // After a membership change every group must meet at the same step of a step round: a group that completed a
  // round the others lost would mix its later model into theirs.
  if (recovery_.membership().changed() && !timed()) {
    const auto& steps = r.agreement.steps;
    if (std::any_of(steps.begin(), steps.end(), [&](int64_t s) { return s != steps.front(); }))
      throw Error(cat("after the lost group the kept groups met at different steps (", nlohmann::json(steps).dump(),
                      "): a round completed for some of them only; resume from the last checkpoint"))
          .reported_by(first_rank_)
          .everywhere(true);
  }
  schedule_.count_sync(step);
  if (!schedule_.leave_in_flight(r.agreement.any.last)) lane_->arrive();
  return true;
}

void Rounds::end(int64_t step, RoundResult& r) {
  if (!schedule_.leave_in_flight(r.agreement.any.last)) lane_->finish();
  if (held_) held_->distribute(cfg_.inner_state != "keep");
  r.aggregated = true;
  if (cfg_.audit) audit(step);
  if (timed()) {
    tokens_.agreed(step, r.agreement.launch_tokens);
    log_.round_agreed(step, r.agreement.steps.front());
  }
}

void Rounds::settle(int64_t step) {
  while (lane_->in_flight() &&
         !recovery_.attempt(step, "checkpoint", Agreement::Succeeded, [&] { lane_->arrive_model(); })) {
  }
}

void Rounds::audit(int64_t step) {
  nlohmann::json line = {{"round", schedule_.syncs()}, {"step", step},
                         {"group", group_ids_.at(static_cast<size_t>(group_))}, {"checksum", lane_->global_checksum()}};
  if (const auto r = lane_->server_round()) line["server_round"] = *r;
  log_.audit(comm::MpiRuntime::get().world_rank(), line);
}

void Rounds::record(const RoundResult& r, TrainingState& st) const {
  st.steps_since_sync = schedule_.steps_since_sync();
  st.syncs = schedule_.syncs();
  st.round_time = schedule_.round_time();
  if (!r.agreed) return;
  FS_ASSERT(r.group_ids.size() == r.agreement.steps.size(), "the round's groups are not known");
  std::vector<int64_t> steps;
  std::vector<bool> at_round;
  for (int id : group_ids_) {
    const auto g = static_cast<size_t>(std::find(r.group_ids.begin(), r.group_ids.end(), id) - r.group_ids.begin());
    steps.push_back(r.agreement.steps.at(g));
    at_round.push_back(r.agreement.at_round.at(g));
  }
  const bool differ = std::any_of(steps.begin(), steps.end(), [&](int64_t x) { return x != steps.front(); });
  // The checkpoint is named by group 0's step.
  if (timed() || differ || !r.agreement.issued) {
    st.step = steps.front();
    st.group_steps = steps;
  }
  if (!r.agreement.issued) st.pending_rounds = at_round;
}

}  // namespace fedshard::train
