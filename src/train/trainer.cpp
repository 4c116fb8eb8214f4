#include "train/trainer.h"

#include <chrono>
#include <cmath>
#include <thread>

#include "comm/ledger.h"
#include "comm/mpi_runtime.h"
#include "parallel/slow_ranks.h"
#include "train/preemption.h"
#include "train/run_config.h"
#include "util/error.h"

namespace fedshard::train {

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

}  // namespace

struct Trainer::StepResult {
  int64_t step = 0;
  double loss = 0;
  double lr = 0;
  double grad_norm = 0;
  double seconds = 0;
  double optimizer_seconds = 0;
  double round_seconds = 0;  // the training thread's wait in the federation round's calls
  bool profiled = false;     // train.profile_steps: the profiler's overhead is in `seconds`
  bool stop = false;         // every rank agreed to stop after this step (preemption)
  RoundResult round;         // the round after the step, under federation
  comm::LedgerSnapshot comm;  // what the collectives recorded during the step
  std::array<double, comm::kNumTiers> sent{};  // bytes this rank sent for the step, per tier
};

Trainer::Trainer(TrainSetup setup, const Faults& faults)
    : s_(std::move(setup)),
      faults_(faults),
      cadence_(s_.cfg, s_.strategy.federated || !s_.cfg.server.empty(), !s_.emulation.active()),
      log_(s_.cfg),
      tokens_(cadence_.timed()),
      recovery_(s_, faults_, log_, *this) {
  const auto& cfg = s_.cfg;
  configure_link_emulation(cfg);
  auto spec = engine_spec(s_, recovery_.membership().base(), place_rank(s_, compute_.threads));
  if (spec.site) spec.site->faults = &faults_;
  engine_ = parallelize(spec);
  set_token_rates();
  watch();
  lr_ = {cfg.lr, cfg.lr * cfg.min_lr_ratio, cfg.warmup_steps >= 0 ? cfg.warmup_steps : cfg.steps / 10, cfg.steps};
  make_rounds();
  deal_data();
  if (s_.join) join(*s_.join);
  if (s_.resume) resume(*s_.resume);
  // A site takes the federation's global model (a resumed one goes on where the federation has not moved on).
  if (rounds_) rounds_->start();
  stats_.count_lane_from(comm::Ledger::instance().snapshot());
  // A replacement takes the job's figure: measuring would keep every other rank waiting at the next step.
  compute_.peak_flops = cfg.peak_flops > 0 ? cfg.peak_flops
                        : s_.join         ? s_.join->peak_flops
                                          : measure_matmul_flops(engine_.sharded->options().device);
  resolved_ = resolved_config();
  open_run_files();
  if (recovery_.recoverable()) log_.hold_for_takeover(cadence_.timed());
  if (const auto range = parse_profile_steps(cfg.profile_steps); range.first > 0)
    profiler_.emplace(range, cfg.out, engine_.topo->world_rank(), engine_.sharded->options().device);
}

void Trainer::make_rounds() {
  const auto& cfg = s_.cfg;
  if (engine_.lane()) {
    federation::Schedule schedule(cfg.sync_every, cadence_.steps(), tokens_.group_per_step(),
                                  federation::parse_overlap(cfg.overlap), engine_.sharded->units().size(),
                                  federation::parse_round_seconds(cfg.round, cfg.sync_every));
    rounds_.emplace(cfg, std::move(schedule), recovery_, log_, tokens_,
                    [this](int64_t step) { return cadence_.vote(step, carried_); });
  }
  // train.slow names ranks and groups as launched: a replacement for a lost rank takes that rank's factor (its
  // groups are equal: in-job recovery covers no other).
  const int launch_rank = comm::MpiRuntime::get().world_rank();
  const comm::Layout launched =
      s_.join ? comm::Layout(std::vector<int>(static_cast<size_t>(s_.join->launch_world / s_.layout.group_size(0)),
                                              s_.layout.group_size(0)),
                             s_.layout.shard_spec())
              : engine_.topo->layout();
  const auto pace = parallel::pace_of(cfg.slow, launched, launch_rank);
  compute_.slow = pace.rank;
  // An emulated clock runs at the pace of the group's slowest rank, as a real group does.
  if (const double per_step = federation::parse_clock(cfg.clock); per_step > 0)
    compute_.clock_step = per_step * pace.group;
}

void Trainer::deal_data() {
  const int rank = engine_.topo->world_rank();
  data_.emplace(s_, rank);
  held_.reset();
  const auto& e = s_.emulation;
  if (e.groups_per_rank > 1) held_.emplace(e.groups_per_rank, *engine_.sharded, *engine_.optimizer);
  notice_.reset();
  if (!rounds_) return;
  const auto& layout = engine_.topo->layout();
  if (layout.groups() > 1) notice_.emplace(layout, rank, recovery_.membership().base());
  rounds_->attach(*engine_.lane(), held_ ? &*held_ : nullptr, s_.group_ids, engine_.topo->coords().group,
                  rank == 0);
}

void Trainer::resume(const CheckpointMeta& meta) {
  // Every group goes on from its own step (groups differ under time-based rounds and after a stop between
  // rounds), first holding the round it stopped at, if that one did not take place.
  const auto st = restore_checkpoint(meta, *engine_.topo, s_.strategy.name(), *engine_.sharded, *engine_.optimizer,
                                     engine_.lane(), s_.continues);
  tokens_.restart(st.step, st.tokens);
  log_.round_agreed(st.step, st.step);
  if (!rounds_) return;
  rounds_->set_pending(st.pending_round);
  rounds_->restore(st.step, st.steps_since_sync, st.syncs, st.round_time);
}

void Trainer::join(const JoinPlan& plan) {
  tokens_.restart(plan.step, plan.tokens);
  rounds_->restore(plan.step, /*steps_since_sync=*/0, plan.syncs, /*round_time=*/0);
  const int64_t received = recovery_.join(plan);
  // The round this replacement joins after, as the others audited it (its model is the global one), and its
  // whole state, which the rank it came from audits too.
  if (!s_.cfg.audit) return;
  rounds_->audit(plan.step);
  recovery_.audit_join(plan.step, received);
}

nlohmann::json Trainer::resolved_config() const {
  return train::resolved_config(s_, *engine_.topo,
                                {compute_.threads, engine_.sharded->options().recompute, lr_.warmup, compute_.peak_flops});
}

void Trainer::open_run_files() {
  log_.set_writer(engine_.topo->world_rank() == 0);
  const auto& resumed = s_.resume;
  nlohmann::json relayout = nullptr;
  if (resumed && !s_.continues.empty())
    relayout = {{"type", "relayout"},
                {"step", resumed->step},
                {"old_groups", resumed->layout.group_sizes()},
                {"old_group_ids", resumed->group_ids},
                {"new_groups", engine_.topo->layout().group_sizes()},
                {"group_ids", s_.group_ids}};
  const bool same = resumed && same_layout(*resumed, engine_.topo->layout(), s_.strategy.name());
  log_.open(resolved_, resumed ? &*resumed : nullptr, same, relayout,
            cat("fedshard: ", s_.strategy.name(), " on ", engine_.topo->describe(),
                s_.emulation.active() ? ", emulating " + s_.emulation.describe() : "", "; model ", s_.model.name, " (",
                model::with_commas(s_.model.param_count()), " parameters); threads per rank ", compute_.threads));
}

void Trainer::set_token_rates() {
  const auto& e = s_.emulation;
  const int64_t per_rank = s_.cfg.grad_accum * s_.cfg.batch_size * s_.cfg.seq_len;
  const int virtual_group = e.groups_of(engine_.topo->world_rank()).front();
  tokens_.set_rates(e.virtual_layout.world() * per_rank,
                    e.groups_per_rank * e.virtual_layout.group_size(virtual_group) * per_rank);
}

Recovery::Point Trainer::point(int64_t step) const {
  Recovery::Point p;
  p.syncs = rounds_ ? rounds_->syncs() : 0;
  p.group_ids = s_.group_ids;
  p.round_step = step - (rounds_ ? rounds_->steps_since_sync() : 0);
  p.round_tokens = tokens_.through(p.round_step);
  p.tokens = tokens_.through(step);
  return p;
}

void Trainer::rebuild(const comm::Layout& layout, std::vector<int> group_ids, int64_t step, int64_t tokens) {
  tokens_.restart(step, tokens);
  stats_.end_stretch();
  s_.layout = layout;
  s_.emulation.real = s_.emulation.virtual_layout = layout;
  s_.group_ids = std::move(group_ids);
  // The new engine starts from the seed's parameters (not from disk, even where the run began from a Hugging
  // Face checkpoint); this rank's state is then handed over from the old one, whose communicators may be revoked.
  // Both are held meanwhile: a rank's model and optimizer state twice, briefly.
  // The old engine's collectives still queued on the comm threads end first (with errors where their
  // communicators are revoked): they write into its buffers (a dropped round's too) and use its communicators.
  for (auto lane : {comm::Lane::Inner, comm::Lane::Federation}) comm::MpiRuntime::get().comm_thread(lane).drain();
  auto spec = engine_spec(s_, recovery_.membership().base(), engine_.sharded->options().device);
  spec.init = {};
  Engine next = parallelize(spec);
  next.aggregator->restore_round(engine_.aggregator->drop_unsettled());
  hand_over(engine_, next);
  notice_.reset();
  {
    Engine old = std::move(engine_);
    engine_ = std::move(next);
  }
  engine_.aggregator->redeal_mean_residual();
  set_token_rates();
  watch();
  s_.partition = data::partition_windows(*s_.train, s_.cfg.partition, layout.group_sizes(), s_.cfg.seed);
  deal_data();
  resolved_ = resolved_config();
  log_.set_writer(engine_.topo->world_rank() == 0);
  // The first kept rank writes the metrics from here on (the old rank 0 may have been lost).
  log_.config(resolved_);
}

at::Tensor Trainer::forward_backward(int64_t step, size_t j) {
  const int64_t t = s_.cfg.seq_len, b = s_.cfg.batch_size, accum = s_.cfg.grad_accum;
  auto& sharded = *engine_.sharded;
  const auto device = sharded.options().device;
  const int64_t micro = static_cast<int64_t>(data_->readers(j)) * accum;
  at::Tensor sum;
  int64_t done = 0;
  for (size_t reader = 0; reader < data_->readers(j); ++reader) {
    auto batch = data_->batch(step, j, reader);
    if (!device.is_cpu()) batch = s_.cfg.pin_memory ? batch.pin_memory().to(device, /*non_blocking=*/true) : batch.to(device);
    for (int64_t a = 0; a < accum; ++a) {
      const auto mb = batch.narrow(0, a * b, b);
      // Only the last micro-batch's backward reduces, the sum of all of them (FSDP's no_sync).
      sharded.set_requires_gradient_sync(++done == micro);
      auto loss = sharded.loss(mb.narrow(1, 0, t), mb.narrow(1, 1, t));
      (micro == 1 ? loss : loss / static_cast<double>(micro)).backward();
      sum = sum.defined() ? sum + loss.detach() : loss.detach();
    }
  }
  sharded.wait_grads();
  return micro == 1 ? sum : sum / static_cast<double>(micro);
}

Trainer::StepResult Trainer::train_step(int64_t step) {
  const auto t0 = Clock::now();
  const auto comm0 = comm::Ledger::instance().snapshot();
  const auto device = engine_.sharded->options().device;
  StepResult r;
  r.step = step;
  r.lr = lr_.at(step);
  // Each held group's loss, then the three flags the group agrees on in one all-reduce after the step.
  const size_t held = data_->groups();
  auto l = at::zeros({static_cast<int64_t>(held) + 3}, at::TensorOptions().dtype(at::kDouble).device(device));
  at::Tensor grad_norm;
  for (size_t j = 0; j < held; ++j) {
    if (held_) held_->load(static_cast<int>(j));
    l[static_cast<int64_t>(j)] = forward_backward(step, j);
    // With defer_host_sync the norm and the loss stay on the device until the group's loss all-reduce, so the
    // host queues the optimizer without waiting for the backward pass to finish.
    const auto norm = engine_.sharded->clip_grad_norm(s_.cfg.grad_clip);
    if (j == 0) grad_norm = norm;
    if (j == 0 && !s_.cfg.defer_host_sync) r.grad_norm = grad_norm.item<double>();
    const auto opt0 = Clock::now();
    engine_.optimizer->step(r.lr);
    r.optimizer_seconds += seconds_since(opt0);
    if (held_) held_->save(static_cast<int>(j));
  }
  faults_.at(FaultPoint::Step, step, [this] { return notice_ && notice_->received(); });
  faults_.corrupt_weights(step, engine_.sharded->units().at(1)->flat().shard());
  // train.slow: the step's kernels done, sleep (factor - 1) x its time; an emulated clock counts it instead.
  if (compute_.slow > 1 && compute_.clock_step == 0) {
    if (!device.is_cpu()) at::zeros({1}, at::TensorOptions().device(device)).item<float>();
    std::this_thread::sleep_for((compute_.slow - 1) * std::chrono::duration<double>(Clock::now() - t0));
  }
  // Counted before the group agrees: a loss learnt there (a peer revoked it) or in the round restarts the same round.
  if (rounds_) rounds_->count_step();
  const auto g = agree_in_group(step, l, compute_.clock_step > 0 ? compute_.clock_step : seconds_since(t0));
  r.loss = g.losses.front();
  if (engine_.topo->layout().groups() == 1) r.stop = g.stop;
  if (s_.cfg.defer_host_sync) r.grad_norm = grad_norm.item<double>();
  double excluded_seconds = 0;
  comm::LedgerSnapshot excluded_comm;
  if (rounds_) {
    // The group model's evaluation is not part of the step: its time and bytes are taken out of the step's.
    if (s_.cfg.eval_group_model && rounds_->due(step, g.time_up)) {
      const auto e0 = Clock::now();
      const auto c0 = comm::Ledger::instance().snapshot();
      evaluate_group(step);
      excluded_comm = comm::Ledger::instance().snapshot() - c0;
      excluded_seconds = seconds_since(e0);
    }
    const auto round0 = Clock::now();
    r.round = rounds_->after_step(step, g.time_up, g.nonfinite, g.stop);
    if (r.round.agreed) r.stop = r.round.stop;
    r.round_seconds = seconds_since(round0);
  }
  r.seconds = seconds_since(t0) - excluded_seconds;
  const auto now = comm::Ledger::instance().snapshot();
  r.comm = now - comm0 - excluded_comm;
  r.sent = stats_.step_bytes(r.comm, now);
  return r;
}

Trainer::GroupAgreement Trainer::agree_in_group(int64_t step, at::Tensor l, double step_time) {
  // The logged loss is the mean over this rank's federation group (its first held group under emulation): no
  // per-step traffic crosses groups.
  const int64_t flag = l.size(0) - 3;
  l[flag] = preemption_signal() != 0 || (notice_ && notice_->received()) ? 1.0 : 0.0;
  const bool mine_up = rounds_ && rounds_->time_up(engine_.topo->coords().position == 0, step_time);
  l[flag + 1] = mine_up ? 1.0 : 0.0;
  if (rounds_)
    if (const auto nonfinite = rounds_->nonfinite_flag(step); nonfinite.defined()) l[flag + 2] = nonfinite;
  faults_.corrupt_loss(step, l[0]);
  recovery_.agree_in_group(step, l, engine_.topo->group());
  const auto host = l.cpu();
  GroupAgreement g;
  for (int64_t j = 0; j < flag; ++j) g.losses.push_back(host[j].item<double>());
  g.stop = host[flag].item<double>() > 0;
  g.time_up = host[flag + 1].item<double>() > 0;
  g.nonfinite = host[flag + 2].item<double>() > 0;
  if (g.stop && notice_) notice_->send();
  for (size_t j = 0; j < g.losses.size(); ++j)
    if (!std::isfinite(g.losses[j]))
      throw Error(cat("loss is ", g.losses[j], " at step ", step, " in group ",
                      s_.emulation.groups_of(engine_.topo->world_rank())[j],
                      "; stopping (lower optim.lr or enable optim.grad_clip)"))
          .reported_by(engine_.topo->coords().position == 0)
          .everywhere(engine_.topo->layout().groups() == 1);
  return g;
}

void Trainer::watch() {
  recovery_.watch();
  watch_progress();
}

void Trainer::watch_progress() {
  // A recovery waits for the other groups' next round: allow three rounds of the steps so far, 20 s at least.
  const double mean_step = stats_.seconds_per_token() * static_cast<double>(tokens_.world_per_step());
  double steps_per_round = static_cast<double>(s_.cfg.sync_every);
  // Time-based rounds: T over a step's time as the rounds count it (the emulated clock's, or the wall's).
  if (rounds_ && rounds_->timed()) {
    const double counted = compute_.clock_step > 0 ? compute_.clock_step : mean_step;
    steps_per_round = counted > 0 ? rounds_->schedule().round_seconds() / counted : 0;
  }
  recovery_.progress(std::max(20.0, 3.0 * (steps_per_round + 1) * mean_step));
}

Trainer::Next Trainer::conclude(const StepResult& r, bool replayed) {
  const int64_t step = r.step;
  const auto& any = r.round.agreement.any;
  const auto due = cadence_.decide({step, r.round.aggregated, r.stop, any.last, any.evaluate, any.checkpoint}, carried_);
  carried_ = due.carried;
  if (!replayed) {
    stats_.add({step, r.seconds, static_cast<double>(tokens_.world_per_step()), r.sent, r.profiled});
    if (step % s_.cfg.log_every == 0 || due.last) log_step(r);
    watch_progress();
  }
  if (cadence_.timed() && r.round.aggregated) log_.round(step, tokens_.through(step), r.round.agreement.steps);
  if (due.evaluate) {
    evaluate_global(step);
    watch_progress();
  }
  if (!replayed)
    log_.progress(step, r.loss, r.lr, StepStats::tok_per_s(static_cast<double>(tokens_.world_per_step()), r.seconds),
                  last_eval_.ppl);
  if (due.checkpoint) {
    if (rounds_) rounds_->settle(step);
    recovery_.until_done(step, "checkpoint", Agreement::Succeeded, [&] { save(r); });
    watch_progress();
  }
  if (!r.stop) return due.last ? Next::End : Next::Continue;
  log_.finish_progress();
  if (profiler_) profiler_->finish();
  log_.preempted(step, preemption_signal(), s_.emulation.active(), kPreemptedExit);
  return Next::Stop;
}

void Trainer::log_step(const StepResult& r) {
  StepRecord line;
  line.step = r.step;
  line.tokens = tokens_.through(r.step);
  line.loss = r.loss;
  line.lr = r.lr;
  line.grad_norm = r.grad_norm;
  line.seconds = r.seconds;
  line.optimizer_seconds = r.optimizer_seconds;
  line.round_seconds = r.round_seconds;
  line.comm = r.comm;
  line.sent = r.sent;
  line.aggregated = r.round.aggregated;
  line.profiled = r.profiled;
  // Tokens of the virtual world, processed by the real ranks: throughput is this box's.
  line.tok_per_s = StepStats::tok_per_s(static_cast<double>(tokens_.world_per_step()), r.seconds);
  line.mfu = StepStats::mfu(line.tok_per_s / engine_.topo->layout().world(),
                            s_.model.forward_flops_per_token(s_.cfg.seq_len), compute_.peak_flops);
  log_.step(line);
}

void Trainer::save(const StepResult& r) {
  TrainingState st;
  st.step = r.step;
  st.group_ids = s_.group_ids;
  st.tokens = tokens_.through(r.step);
  st.tokenizer = s_.tokenizer;
  if (rounds_) rounds_->record(r.round, st);
  save_checkpoint(s_.cfg.out, static_cast<int>(s_.cfg.checkpoint_keep), st, resolved_, s_.model, *engine_.topo,
                  *engine_.sharded, *engine_.optimizer, engine_.lane(), faults_);
}

void Trainer::evaluate_global(int64_t step) {
  // Written once, after every rank agreed that the evaluation succeeded.
  EvalResult e;
  recovery_.until_done(step, "evaluation", Agreement::Succeeded, [&] {
    faults_.at(FaultPoint::Eval, step);
    const auto eval = [&] {
      e = evaluate(*engine_.sharded, *s_.val, s_.cfg.eval_windows, s_.cfg.batch_size, engine_.topo->world());
    };
    // Under overlap no step ends with the groups equal: the global model is swapped in to be evaluated.
    if (s_.cfg.overlap != "none")
      rounds_->with_global_model(eval);
    else
      eval();
  });
  last_eval_ = e;
  log_.eval(step, tokens_.through(step), "global", e, seconds_since(run_start_));
  if (!s_.cfg.eval_backlog || !cadence_.last_step(step)) return;
  EvalResult owed;
  recovery_.until_done(step, "evaluation", Agreement::Succeeded, [&] {
    rounds_->with_backlog_model([&] {
      owed = evaluate(*engine_.sharded, *s_.val, s_.cfg.eval_windows, s_.cfg.batch_size, engine_.topo->world());
    });
  });
  log_.eval(step, tokens_.through(step), "backlog", owed, seconds_since(run_start_));
}

void Trainer::evaluate_group(int64_t step) {
  const auto e = evaluate(*engine_.sharded, *s_.val, s_.cfg.eval_windows, s_.cfg.batch_size, engine_.topo->group());
  log_.eval(step, tokens_.through(step), "group", e, seconds_since(run_start_));
}

TrainSummary Trainer::run() {
  run_start_ = Clock::now();
  const auto comm_start = comm::Ledger::instance().snapshot();
  int64_t step = tokens_.start_step() - 1;  // the last step this launch has concluded
  Next next = Next::Continue;
  try {
    // A group that stopped at a round that did not take place holds it first; its step was trained and logged.
    if (rounds_ && rounds_->pending()) {
      StepResult r;
      r.step = step;
      r.round = rounds_->hold_pending(step);
      r.stop = r.round.stop;
      next = conclude(r, /*replayed=*/true);
    }
    while (next == Next::Continue) {
      ++step;
      if (profiler_) profiler_->before_step(step);
      recovery_.outside_agreement(step, [&] {
        StepResult r = train_step(step);
        r.profiled = profiler_ && profiler_->after_step(step);
        next = conclude(r, /*replayed=*/false);
      });
      // Lost groups come back after a round, federation.rejoin_after rounds after they were lost.
      if (next == Next::Continue) recovery_.rejoin_if_due(step, compute_.peak_flops);
    }
    // A site says it leaves (the round server no longer waits for it).
    if (rounds_) rounds_->leave();
    if (next == Next::Stop) {
      TrainSummary stopped;
      stopped.steps = step;
      stopped.preempted = true;
      return stopped;
    }
    log_.finish_progress();
    if (profiler_) profiler_->finish();
    // The summary's gather is an agreement too: a rank of a group that loses a rank there leaves (LeftJob).
    return finish(step, seconds_since(run_start_), comm::Ledger::instance().snapshot() - comm_start);
  } catch (const LeftJob& e) {
    // A rank whose group lost a rank leaves, saying why; the job goes on without it.
    std::fprintf(stderr, "fedshard: %s\n", e.message.c_str());
    TrainSummary left;
    left.steps = step;
    left.left = true;
    return left;
  }
}

at::Tensor Trainer::gather_per_rank(int64_t last_step) {
  const at::Device device = engine_.sharded->options().device;
  at::Tensor per_rank;
  // Over the kept ranks where one is lost meanwhile.
  recovery_.until_done(last_step, "summary", Agreement::Succeeded, [&] {
    faults_.at(FaultPoint::Summary, last_step);
    const int world = engine_.topo->layout().world();
    per_rank = at::zeros({world, kRankColumns}, at::TensorOptions().dtype(at::kDouble).device(device));
    fill_rank_row(per_rank[engine_.topo->world_rank()], device, stats_.total_bytes());
    engine_.topo->world().all_reduce(per_rank, comm::ReduceOp::Sum, comm::Traffic::Control)->wait();
  });
  return per_rank.to(at::kCPU);
}

TrainSummary Trainer::finish(int64_t last_step, double wall_s, const comm::LedgerSnapshot& comm_total) {
  // Peak memory of every rank (host RSS, and the caching allocator's peak on a GPU), for the memory comparison
  // between strategies; and what each rank's training steps sent per tier (groups of different sizes send
  // different amounts).
  const auto per_rank = gather_per_rank(last_step);
  stats_.end_stretch();
  TrainSummary summary;
  summary.steps = last_step;
  summary.tokens = tokens_.through(last_step);
  summary.final_val_loss = last_eval_.loss;
  summary.final_val_ppl = last_eval_.ppl;
  summary.unigram_val_ppl = s_.train->manifest().unigram_val_ppl.value_or(0.0);
  summary.tok_per_s = stats_.timed_steps() > 0 ? stats_.tok_per_s()
                                                : static_cast<double>(tokens_.world_per_step()) / wall_s;
  summary.reporter = log_.writer();
  if (summary.reporter)
    log_.summary(summary_line(s_, resolved_, summary, wall_s, comm_total, per_rank, compute_.peak_flops,
                              engine_.sharded->options().device.is_cuda()));
  return summary;
}

}  // namespace fedshard::train
