#include "train/trainer.h"

#include <ATen/Context.h>
#include <ATen/Parallel.h>
#include <ATen/core/grad_mode.h>
#include <sys/resource.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <limits>
#include <thread>

#include "comm/failure_watch.h"
#include "comm/ledger.h"
#include "comm/link_emulation.h"
#include "comm/mpi_ops.h"
#include "comm/mpi_runtime.h"
#include "comm/work.h"
#include "kernels/cross_entropy.h"
#include "model/layers.h"
#include "parallel/slow_ranks.h"
#include "train/evaluator.h"
#include "train/preemption.h"
#include "util/error.h"
#include "util/memory.h"

namespace fedshard::train {

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

at::ScalarType dtype_of(const std::string& name) {
  if (name == "float64") return at::kDouble;
  if (name == "bfloat16") return at::kBFloat16;
  return at::kFloat;
}

// Peak float32 matmul rate of this rank with its thread count: the denominator of MFU on CPUs, which have
// no datasheet number that a small GEMM reaches.
double measure_matmul_flops(at::Device device) {
  const int64_t n = device.is_cpu() ? 512 : 4096;
  auto a = at::randn({n, n}, at::TensorOptions().device(device)), b = at::randn({n, n}, a.options());
  at::mm(a, b).sum().item<float>();  // warm-up; item() waits for the device
  const int reps = 8;
  const auto t0 = Clock::now();
  at::Tensor c;
  for (int i = 0; i < reps; ++i) c = at::mm(a, b);
  c.sum().item<float>();
  return 2.0 * n * n * n * reps / seconds_since(t0);
}

// optim.fused: auto takes the fused AdamW kernel where this LibTorch has it.
bool use_fused_adamw(const TrainConfig& cfg) {
  return cfg.optimizer == "adamw" && (cfg.fused == "on" || (cfg.fused == "auto" && optim::fused_adamw_available()));
}

// parallel.link_*: every collective on that tier is held to the emulated link's speed.
void configure_link_emulation(const TrainConfig& cfg) {
  const std::pair<comm::Tier, const std::string*> links[] = {{comm::Tier::Node, &cfg.link_node},
                                                             {comm::Tier::InterNode, &cfg.link_inter_node},
                                                             {comm::Tier::InterGroup, &cfg.link_inter_group}};
  for (const auto& [tier, spec] : links)
    if (!spec->empty()) comm::LinkEmulator::instance().set(tier, comm::parse_link_spec(*spec));
}

double peak_rss_mb() {
  struct rusage ru {};
  getrusage(RUSAGE_SELF, &ru);
  return static_cast<double>(ru.ru_maxrss) / 1024.0;
}

nlohmann::json memory_json(const plan::MemoryEstimate& e) {
  nlohmann::json j = {{"total", e.total()}};
  for (const auto& c : e.components) j[c.name] = c.bytes;
  return j;
}

// The head's chunk rows as the model computes them; null when the logits are made at once.
nlohmann::json loss_chunk_rows(const model::ModelConfig& m) {
  if (!m.chunked_loss) return nullptr;
  return m.loss_chunk_rows > 0 ? m.loss_chunk_rows : kernels::cross_entropy_chunk_rows(m.dim);
}

std::string json_list(const std::vector<int>& v) { return nlohmann::json(v).dump(); }

std::string two_decimals(double x) {
  char s[32];
  std::snprintf(s, sizeof s, "%.2f", x);
  return s;
}

}  // namespace

struct Trainer::StepResult {
  int64_t step = 0;
  bool agreed = false;      // the groups agreed (a round, or a stop between rounds): `round` holds it
  bool aggregated = false;  // a round took place
  bool stop = false;  // every rank agreed to stop after this step (preemption)
  double loss = 0;
  double lr = 0;
  double grad_norm = 0;
  double seconds = 0;
  double optimizer_seconds = 0;
  double round_seconds = 0;  // the training thread's wait in the federation round's calls
  bool profiled = false;        // train.profile_steps: the profiler's overhead is in `seconds`
  federation::Agreement round;  // when agreed
  std::vector<int> round_group_ids;  // the groups that agreed, in the order of round's per-group fields
  comm::LedgerSnapshot comm;    // what the collectives recorded during the step
  std::array<double, comm::kNumTiers> sent{};  // bytes this rank sent for the step, per tier
};

Trainer::Trainer(TrainSetup setup, const Faults& faults)
    : s_(std::move(setup)),
      faults_(faults),
      cadence_(s_.cfg, s_.strategy.federated, !s_.emulation.active()),
      membership_(s_.layout, s_.cfg.rejoin_after),
      log_(s_.cfg) {
  const auto& cfg = s_.cfg;
  configure_link_emulation(cfg);
  if (s_.join) membership_.joined(*s_.join);
  engine_ = parallelize(engine_spec(place_rank()));
  topo_ = engine_.topo.get();
  sharded_ = engine_.sharded.get();
  watch_membership();
  lr_ = {cfg.lr, cfg.lr * cfg.min_lr_ratio, cfg.warmup_steps >= 0 ? cfg.warmup_steps : cfg.steps / 10, cfg.steps};
  make_rounds();
  if (rounds_ && topo_->layout().groups() > 1) notice_.emplace(topo_->layout(), topo_->world_rank(), membership_.base());
  make_sampler();
  if (s_.join) join(*s_.join);
  if (s_.resume) resume(*s_.resume);
  federation_sent_ = comm::Ledger::instance().snapshot().lane_sent[static_cast<int>(comm::Lane::Federation)];
  // A replacement takes the job's figure: measuring would keep every other rank waiting at the next step.
  peak_flops_ = cfg.peak_flops > 0 ? cfg.peak_flops
                : s_.join         ? s_.join->peak_flops
                                  : measure_matmul_flops(sharded_->options().device);
  resolved_ = resolved_config();
  open_run_files();
  // A lost writer's lines since its last one are at most a round's steps and its evaluations (the others see the
  // loss at the next round, evaluation or checkpoint); under time-based rounds, whose rounds have no fixed number
  // of steps, those since this group's last round (end_round).
  if (recoverable())
    log_.hold_lines(cadence_.timed() ? std::numeric_limits<size_t>::max()
                                     : 2 * (static_cast<size_t>(cfg.sync_every) + 1));
  if (const auto range = parse_profile_steps(cfg.profile_steps); range.first > 0)
    profiler_.emplace(range, cfg.out, topo_->world_rank(), sharded_->options().device);
}

void Trainer::make_rounds() {
  const auto& cfg = s_.cfg;
  if (engine_.aggregator)
    rounds_.emplace(cfg.sync_every, cadence_.steps(), group_tokens_per_step(), federation::parse_overlap(cfg.overlap),
                    sharded_->units().size(), federation::parse_round_seconds(cfg.round, cfg.sync_every));
  // train.slow names ranks and groups as launched: a replacement for a lost rank takes that rank's factor (its
  // groups are equal: in-job recovery covers no other).
  const int launch_rank = comm::MpiRuntime::get().world_rank();
  const comm::Layout launched =
      s_.join ? comm::Layout(std::vector<int>(static_cast<size_t>(s_.join->launch_world / s_.layout.group_size(0)),
                                              s_.layout.group_size(0)),
                             s_.layout.shard_spec())
              : topo_->layout();
  const auto factors = parallel::slow_factors(cfg.slow, launched);
  slow_ = factors.at(static_cast<size_t>(launch_rank));
  // An emulated clock runs at the pace of the group's slowest rank, as a real group does.
  if (const double per_step = federation::parse_clock(cfg.clock); per_step > 0) {
    double group_factor = 1;
    for (int r : launched.group_members(launch_rank)) group_factor = std::max(group_factor, factors.at(r));
    clock_step_ = per_step * group_factor;
  }
}

void Trainer::resume(const CheckpointMeta& meta) {
  // Every group goes on from its own step (groups differ under time-based rounds and after a stop between
  // rounds), first holding the round it stopped at, if that one did not take place.
  const auto st = restore_checkpoint(meta, *topo_, s_.strategy.name(), *sharded_, *engine_.optimizer,
                                     engine_.aggregator.get(), s_.continues);
  tokens_.restart(st.step, st.tokens);
  writer_round_step_ = st.step;
  pending_round_ = st.pending_round;
  if (rounds_) rounds_->restore(st.step, st.steps_since_sync, st.syncs, st.round_time);
}

at::Device Trainer::place_rank() {
  const auto& cfg = s_.cfg;
  const int host_ranks = comm::MpiRuntime::get().host_rank_and_size().second;
  threads_ = cfg.threads > 0 ? static_cast<int>(cfg.threads)
                             : std::max(1, static_cast<int>(std::thread::hardware_concurrency()) / host_ranks);
  at::set_num_threads(threads_);
  if (cfg.device != "cuda") return at::kCPU;
  return at::Device(at::kCUDA, static_cast<c10::DeviceIndex>(s_.topology.device));  // choose_gpu's
}

EngineSpec Trainer::engine_spec(at::Device device) const {
  const auto& cfg = s_.cfg;
  EngineSpec e;
  e.layout = s_.layout;
  e.base = membership_.base();
  e.topology = s_.topology;
  e.model = s_.model;
  e.sharding.master_dtype = dtype_of(cfg.dtype);
  e.sharding.compute_dtype = dtype_of(cfg.compute_dtype);
  e.sharding.reduce_dtype = dtype_of(cfg.reduce_dtype);
  // Recomputation pays off where parameters are sharded, i.e. per group.
  int rank = 0;
  MPI_Comm_rank(membership_.base(), &rank);
  const int group = s_.layout.coords(rank).group;
  const bool sharded = s_.layout.shard_size(group) > 1;
  e.sharding.recompute = cfg.activation_checkpointing == "on" || (cfg.activation_checkpointing == "auto" && sharded);
  e.sharding.reshard_after_forward = cfg.reshard_after_forward;
  e.sharding.device = device;
  e.optimizer = {cfg.optimizer, cfg.beta1, cfg.beta2, cfg.eps, cfg.weight_decay, cfg.momentum,
                 use_fused_adamw(cfg)};
  e.decay_norms_and_embeddings = cfg.decay_norms_and_embeddings;
  if (s_.strategy.federated)
    e.federation = federation::FederationOptions{{cfg.outer_optimizer, cfg.outer_lr, cfg.outer_momentum},
                                                 cfg.inner_state,
                                                 e.sharding.reduce_dtype,
                                                 cfg.compress,
                                                 cfg.compress_block,
                                                 cfg.overlap != "none",
                                                 cfg.normalize == "steps"};
  if (s_.init_from)
    e.init = [hf = s_.init_from](const model::ParamSlot& slot, int64_t begin, at::Tensor dst) {
      hf->read(slot.name, begin, dst);
    };
  e.seed = cfg.seed;
  return e;
}

// iid: every rank reads disjoint windows of one global stream (rank r takes slot r of each step), so
// strategies with and without federation read the same data. Otherwise each group reads its own pool,
// its ranks taking disjoint slots of it. Under emulation the ranks and groups are the virtual ones; with
// gradient accumulation a rank's slot holds its micro-batches of every step, one after the other.
void Trainer::make_sampler() {
  const auto& cfg = s_.cfg;
  const auto& e = s_.emulation;
  const auto& virt = e.virtual_layout;
  const int batch = static_cast<int>(cfg.batch_size * cfg.grad_accum);
  const int rank = topo_->world_rank();
  std::shared_ptr<data::WindowSampler> stream;
  if (s_.partition.global_stream) {
    std::vector<int64_t> pool(s_.train->num_windows());
    for (int64_t i = 0; i < static_cast<int64_t>(pool.size()); ++i) pool[i] = i;
    stream = std::make_shared<data::WindowSampler>(std::move(pool), virt.world(), batch, cfg.seed, /*stream=*/0);
  }
  for (int g : e.groups_of(rank)) {
    std::vector<int> readers;
    for (int p : e.positions_of(rank)) readers.push_back(stream ? virt.first_rank(g) + p : p);
    samplers_.push_back(stream ? stream
                               : std::make_shared<data::WindowSampler>(s_.partition.pools[g], virt.group_size(g), batch,
                                                                       cfg.seed, /*stream=*/1 + g));
    readers_.push_back(std::move(readers));
  }
  if (e.groups_per_rank > 1) held_.emplace(e.groups_per_rank, *sharded_, *engine_.optimizer);
}

nlohmann::json Trainer::resolved_config() const {
  const auto& cfg = s_.cfg;
  const auto& e = s_.emulation;
  const auto& layout = e.virtual_layout;  // what the job computes; the real ranks under "emulation"
  const auto& opts = sharded_->options();
  std::vector<int> shard_sizes;
  for (int g = 0; g < layout.groups(); ++g) shard_sizes.push_back(layout.shard_size(g));
  auto j = cfg.to_json();
  j["resolved"] = {{"strategy", s_.strategy.name()},
                   {"world", layout.world()},
                   {"group_size", layout.equal_groups() ? layout.group_size(0) : 0},
                   {"shard_size", layout.equal_groups() ? layout.shard_size(0) : layout.shard_spec()},
                   {"groups", layout.groups()},
                   {"group_sizes", layout.group_sizes()},
                   {"group_ids", s_.group_ids},
                   {"shard_sizes", shard_sizes},
                   {"replicas_per_group", layout.replicas(0)},
                   {"emulation", e.active() ? nlohmann::json{{"real_world", e.real.world()},
                                                             {"real_group_sizes", e.real.group_sizes()},
                                                             {"real_shard_size", e.real.shard_size(0)},
                                                             {"groups_per_rank", e.groups_per_rank},
                                                             {"ranks_per_rank", e.ranks_per_rank}}
                                            : nlohmann::json(nullptr)},
                   {"nodes", topo_->layout().nodes()},
                   {"emulated_nodes", topo_->emulated_nodes()},
                   {"threads_per_rank", threads_},
                   {"activation_checkpointing", opts.recompute},
                   {"fused_adamw", use_fused_adamw(cfg)},
                   {"attention", cfg.attention == "math" || !model::sdpa_available() ? "math" : "sdpa"},
                   {"loss_chunk_rows", loss_chunk_rows(s_.model)},
                   {"parameters", s_.model.param_count()},
                   {"vocab_size", s_.model.vocab_size},
                   {"data_dir", std::filesystem::absolute(cfg.data_dir).lexically_normal().string()},
                   {"tokenizer", s_.tokenizer},
                   {"warmup_steps", lr_.warmup},
                   {"peak_flops_per_rank", peak_flops_},
                   {"memory_estimate_bytes", memory_json(s_.memory)}};
  return j;
}

void Trainer::open_run_files() {
  log_.set_writer(topo_->world_rank() == 0);
  const auto& resumed = s_.resume;
  nlohmann::json relayout = nullptr;
  if (resumed && !s_.continues.empty())
    relayout = {{"type", "relayout"},
                {"step", resumed->step},
                {"old_groups", resumed->layout.group_sizes()},
                {"old_group_ids", resumed->group_ids},
                {"new_groups", topo_->layout().group_sizes()},
                {"group_ids", s_.group_ids}};
  const bool same = resumed && same_layout(*resumed, topo_->layout(), s_.strategy.name());
  log_.open(resolved_, resumed ? &*resumed : nullptr, same, relayout,
            cat("fedshard: ", s_.strategy.name(), " on ", topo_->describe(),
                s_.emulation.active() ? ", emulating " + s_.emulation.describe() : "", "; model ", s_.model.name, " (",
                model::with_commas(s_.model.param_count()), " parameters); threads per rank ", threads_));
}

int64_t Trainer::group_tokens_per_step() const {
  const auto& e = s_.emulation;
  const int virtual_group = e.groups_of(topo_->world_rank()).front();
  return e.groups_per_rank * e.virtual_layout.group_size(virtual_group) * s_.cfg.grad_accum * s_.cfg.batch_size *
         s_.cfg.seq_len;
}

int64_t Trainer::world_tokens_per_step() const {
  return s_.emulation.virtual_layout.world() * s_.cfg.grad_accum * s_.cfg.batch_size * s_.cfg.seq_len;
}

int64_t Trainer::tokens_through(int64_t step) const {
  // Time-based rounds: groups take different numbers of steps; the others' are known as of the last round.
  if (cadence_.timed()) return tokens_.agreed + (step - tokens_.step_agreed) * group_tokens_per_step();
  return tokens_.before_start + (step - tokens_.start_step + 1) * world_tokens_per_step();
}

at::Tensor Trainer::forward_backward(int64_t step, size_t j) {
  const int64_t t = s_.cfg.seq_len, b = s_.cfg.batch_size, accum = s_.cfg.grad_accum;
  const auto device = sharded_->options().device;
  const int64_t micro = static_cast<int64_t>(readers_[j].size()) * accum;
  at::Tensor sum;
  int64_t done = 0;
  for (int reader : readers_[j]) {
    auto batch = s_.train->batch(samplers_[j]->windows(step - 1, reader));
    if (!device.is_cpu()) batch = s_.cfg.pin_memory ? batch.pin_memory().to(device, /*non_blocking=*/true) : batch.to(device);
    for (int64_t a = 0; a < accum; ++a) {
      const auto mb = batch.narrow(0, a * b, b);
      // Only the last micro-batch's backward reduces, the sum of all of them (FSDP's no_sync).
      sharded_->set_requires_gradient_sync(++done == micro);
      auto loss = sharded_->loss(mb.narrow(1, 0, t), mb.narrow(1, 1, t));
      (micro == 1 ? loss : loss / static_cast<double>(micro)).backward();
      sum = sum.defined() ? sum + loss.detach() : loss.detach();
    }
  }
  sharded_->wait_grads();
  return micro == 1 ? sum : sum / static_cast<double>(micro);
}

Trainer::StepResult Trainer::train_step(int64_t step) {
  const auto t0 = Clock::now();
  const auto comm0 = comm::Ledger::instance().snapshot();
  const auto device = sharded_->options().device;
  StepResult r;
  r.step = step;
  r.lr = lr_.at(step);
  // Each held group's loss, then the three flags the group agrees on in one all-reduce after the step.
  const size_t held = samplers_.size();
  auto l = at::zeros({static_cast<int64_t>(held) + 3}, at::TensorOptions().dtype(at::kDouble).device(device));
  at::Tensor grad_norm;
  for (size_t j = 0; j < held; ++j) {
    if (held_) held_->load(static_cast<int>(j));
    l[static_cast<int64_t>(j)] = forward_backward(step, j);
    // With defer_host_sync the norm and the loss stay on the device until the group's loss all-reduce, so the
    // host queues the optimizer without waiting for the backward pass to finish.
    const auto norm = sharded_->clip_grad_norm(s_.cfg.grad_clip);
    if (j == 0) grad_norm = norm;
    if (j == 0 && !s_.cfg.defer_host_sync) r.grad_norm = grad_norm.item<double>();
    const auto opt0 = Clock::now();
    engine_.optimizer->step(r.lr);
    r.optimizer_seconds += seconds_since(opt0);
    if (held_) held_->save(static_cast<int>(j));
  }
  faults_.at(FaultPoint::Step, step, [this] { return notice_ && notice_->received(); });
  faults_.corrupt_weights(step, sharded_->units().at(1)->flat().shard());
  // train.slow: the step's kernels done, sleep (factor - 1) x its time; an emulated clock counts it instead.
  if (slow_ > 1 && clock_step_ == 0) {
    if (!device.is_cpu()) at::zeros({1}, at::TensorOptions().device(device)).item<float>();
    std::this_thread::sleep_for((slow_ - 1) * std::chrono::duration<double>(Clock::now() - t0));
  }
  const auto g = agree_in_group(step, l, clock_step_ > 0 ? clock_step_ : seconds_since(t0));
  r.loss = g.losses.front();
  if (topo_->layout().groups() == 1) r.stop = g.stop;
  if (s_.cfg.defer_host_sync) r.grad_norm = grad_norm.item<double>();
  double excluded_seconds = 0;
  comm::LedgerSnapshot excluded_comm;
  if (rounds_) {
    rounds_->count_step();
    // The group model's evaluation is not part of the step: its time and bytes are taken out of the step's.
    if (s_.cfg.eval_group_model && rounds_->due(step, g.time_up)) {
      const auto e0 = Clock::now();
      const auto c0 = comm::Ledger::instance().snapshot();
      evaluate_group(step);
      excluded_comm = comm::Ledger::instance().snapshot() - c0;
      excluded_seconds = seconds_since(e0);
    }
    const auto round0 = Clock::now();
    after_step(step, g, r);
    r.round_seconds = seconds_since(round0);
  }
  r.seconds = seconds_since(t0) - excluded_seconds;
  account_bytes(comm0, excluded_comm, r);
  return r;
}

Trainer::GroupAgreement Trainer::agree_in_group(int64_t step, at::Tensor l, double step_time) {
  // The logged loss is the mean over this rank's federation group (its first held group under emulation): no
  // per-step traffic crosses groups.
  const int64_t flag = l.size(0) - 3;
  l[flag] = preemption_signal() != 0 || (notice_ && notice_->received()) ? 1.0 : 0.0;
  const bool mine_up = cadence_.timed() && topo_->coords().position == 0 && rounds_->time_up(step_time);
  l[flag + 1] = mine_up ? 1.0 : 0.0;
  if (rounds_ && (cadence_.timed() || rounds_->due(step))) l[flag + 2] = engine_.aggregator->nonfinite_flag();
  faults_.corrupt_loss(step, l[0]);
  // A kept peer that has finished this all-reduce may go on to the step's first agreement across groups (a round,
  // an evaluation, a checkpoint, the summary), see a loss there and revoke every communicator it holds, this
  // group's among them, before this rank has its result (revoked, no member lost). This rank then joins that
  // recovery, after which every kept rank agrees once more over its rebuilt group (apply_loss). A member of this
  // group lost is a loss in the group's own step, as before.
  group_sent_ = recoverable() ? l.clone() : at::Tensor();
  try {
    topo_->group().all_reduce(l, comm::ReduceOp::Mean, comm::Traffic::Control)->wait();
  } catch (const comm::PeerLost& e) {
    if (!group_sent_.defined() || !e.revoked()) throw;
    const std::string what = e.what();
    recovering(step, "group agreement", Agreement::Succeeded, [&] { throw comm::PeerLost(what, true); });
    l.copy_(group_agreed_);
  }
  const auto host = l.cpu();
  GroupAgreement g;
  for (int64_t j = 0; j < flag; ++j) g.losses.push_back(host[j].item<double>());
  group_stop_ = g.stop = host[flag].item<double>() > 0;
  g.time_up = host[flag + 1].item<double>() > 0;
  g.nonfinite = host[flag + 2].item<double>() > 0;
  if (group_stop_ && notice_) notice_->send();
  for (size_t j = 0; j < g.losses.size(); ++j)
    if (!std::isfinite(g.losses[j]))
      throw Error(cat("loss is ", g.losses[j], " at step ", step, " in group ",
                      s_.emulation.groups_of(topo_->world_rank())[j], "; stopping (lower optim.lr or enable optim.grad_clip)"))
          .reported_by(topo_->coords().position == 0)
          .everywhere(topo_->layout().groups() == 1);
  return g;
}

void Trainer::agree_in_group_again() {
  if (!group_sent_.defined()) return;
  group_agreed_ = group_sent_.clone();
  topo_->group().all_reduce(group_agreed_, comm::ReduceOp::Mean, comm::Traffic::Control)->wait();
}

void Trainer::after_step(int64_t step, const GroupAgreement& g, StepResult& r) {
  if (rounds_->due(step, g.time_up)) {
    federate_surviving(step, g.nonfinite, r);
  } else if (group_stop_ && topo_->layout().groups() > 1) {
    // Between rounds: stop at this step rather than at the next round (which may be past the grace time).
    r.round = engine_.aggregator->vote_stop(vote(step, g.nonfinite));
    r.round_group_ids = s_.group_ids;
    r.agreed = true;
    r.stop = true;
  } else {
    engine_.aggregator->progress();
  }
}

void Trainer::account_bytes(const comm::LedgerSnapshot& start, const comm::LedgerSnapshot& excluded, StepResult& r) {
  const auto now = comm::Ledger::instance().snapshot();
  r.comm = now - start - excluded;
  // The federation lane's collectives complete when they do, also between steps: the step takes what that
  // lane completed since the previous step's account, so no round's bytes fall between two steps.
  constexpr int fed = static_cast<int>(comm::Lane::Federation);
  for (comm::Tier t : comm::kTiers) {
    const int i = static_cast<int>(t);
    r.sent[i] = r.comm.sent_bytes(t) - r.comm.lane_sent[fed][i] + now.lane_sent[fed][i] - federation_sent_[i];
    federation_sent_[i] = now.lane_sent[fed][i];
  }
}

federation::Vote Trainer::vote(int64_t step, bool nonfinite) const {
  federation::Vote v;
  // Groups agree on a stop inside themselves every step and with each other here; time-based rounds also
  // agree here on the evaluations and checkpoints that any group's steps made due.
  v.stop = group_stop_;
  v.last = cadence_.last_step(step);
  v.checkpoint = cadence_.wants_checkpoint(step, carried_);
  v.evaluate = cadence_.wants_evaluation(step, carried_);
  v.nonfinite = nonfinite;
  v.step = step;
  v.steps_in_round = rounds_->steps_since_sync();
  v.round = rounds_->syncs() + 1;
  v.launch_tokens = static_cast<double>((step - tokens_.start_step + 1) * group_tokens_per_step());
  return v;
}

bool Trainer::begin_round(int64_t step, bool nonfinite, StepResult& r) {
  const auto& cfg = s_.cfg;
  auto& agg = *engine_.aggregator;
  if (agg.in_flight()) agg.finish();
  // Held groups enter the round as their mean, weighted as all of them, and all leave it with the result.
  if (held_) held_->combine(cfg.inner_state == "average");
  r.round = agg.begin(rounds_->units(step), rounds_->weight(step), vote(step, nonfinite));
  r.round_group_ids = s_.group_ids;
  r.agreed = true;
  r.stop = r.round.any.stop;
  // Another group stopped between rounds: this round is held first thing after the resume.
  pending_round_ = !r.round.issued;
  if (pending_round_) return false;
  // After a membership change every group must meet at the same step of a step round: a group that completed a
  // round the others lost would mix its later model into theirs.
  if (membership_.changed() && !cadence_.timed()) {
    const auto& steps = r.round.steps;
    if (std::any_of(steps.begin(), steps.end(), [&](int64_t s) { return s != steps.front(); }))
      throw Error(cat("after the lost group the kept groups met at different steps (", nlohmann::json(steps).dump(),
                      "): a round completed for some of them only; resume from the last checkpoint"))
          .reported_by(topo_->world_rank() == 0)
          .everywhere(true);
  }
  rounds_->count_sync(step);
  if (!rounds_->leave_in_flight(r.round.any.last)) agg.arrive();
  return true;
}

void Trainer::end_round(int64_t step, StepResult& r) {
  const auto& cfg = s_.cfg;
  if (!rounds_->leave_in_flight(r.round.any.last)) engine_.aggregator->finish();
  if (held_) held_->distribute(cfg.inner_state != "keep");
  r.aggregated = true;
  if (cfg.audit) audit_round(step);
  if (cadence_.timed()) {
    tokens_.agreed = tokens_.before_start + static_cast<int64_t>(r.round.launch_tokens);
    tokens_.step_agreed = step;
    // A new writer (the old one lost) writes its own lines from the earlier of this step and the writer group's.
    writer_round_step_ = r.round.steps.front();
    log_.forget_held_before(std::min(step, writer_round_step_));
  }
}

void Trainer::federate(int64_t step, bool nonfinite, StepResult& r) {
  if (begin_round(step, nonfinite, r)) end_round(step, r);
}

void Trainer::federate_surviving(int64_t step, bool nonfinite, StepResult& r) {
  // The round in flight (overlap) first: applied once it has arrived everywhere; one that a lost rank stopped is
  // dropped, each group's model as it is, and this round averages them (one a checkpoint settled goes on).
  while (engine_.aggregator->in_flight()) {
    if (!recovering(step, "round arrival", Agreement::Succeeded, [&] { engine_.aggregator->arrive(); }))
      engine_.aggregator->finish();
  }
  const auto schedule = *rounds_;
  bool issued = false;
  // A round is applied only once every rank's averaging has arrived and all agree it did: one lost before leaves
  // every model as it was, and the kept groups hold the round again, weighted as before, without the lost ones.
  const auto unbegun = [&] { rounds_ = schedule; };
  while (recovering(step, "round", Agreement::Succeeded, [&] { issued = begin_round(step, nonfinite, r); }, unbegun))
    r.round = {};
  if (issued) end_round(step, r);
}

bool Trainer::recoverable() const { return recovers_in_job(s_); }

void Trainer::watch_membership() {
  comm::FailureWatch::watch(membership_.base(), membership_.launch_ranks());
  watch_progress();
}

void Trainer::watch_progress() {
  // A recovery waits for the other groups' next round: allow three rounds of the steps so far, 20 s at least.
  const double mean_step = timed_tokens_ > 0 ? step_seconds_sum_ * world_tokens_per_step() / timed_tokens_ : 0;
  double steps_per_round = static_cast<double>(s_.cfg.sync_every);
  // Time-based rounds: T over a step's time as the rounds count it (the emulated clock's, or the wall's).
  if (rounds_ && rounds_->timed()) {
    const double counted = clock_step_ > 0 ? clock_step_ : mean_step;
    steps_per_round = counted > 0 ? rounds_->round_seconds() / counted : 0;
  }
  comm::FailureWatch::expect_recovery(recoverable(), std::max(20.0, 3.0 * (steps_per_round + 1) * mean_step));
  comm::FailureWatch::progress();
}

Membership::Position Trainer::position(int64_t step, const char* during) const {
  return {step, rounds_ ? rounds_->syncs() : 0, s_.group_ids, during};
}

bool Trainer::recovering(int64_t step, const char* during, Agreement how, const std::function<void()>& work,
                         const std::function<void()>& before) {
  const auto t0 = Clock::now();
  auto change = membership_.with_recovery(recoverable(), how, *topo_, position(step, during), work, before);
  if (!change) return false;
  apply_surviving(step, std::move(*change), t0);
  return true;
}

void Trainer::apply_surviving(int64_t step, MembershipChange change, Clock::time_point t0) {
  // Another loss while the change is applied (the engine rebuilt over the kept ranks) is one more change from the
  // groups of this one, logged with it: both losses in one group_lost line.
  for (;;) {
    try {
      apply_loss(step, change, t0);
      return;
    } catch (const comm::PeerLost&) {
      auto next = membership_.lost(*topo_, {step, rounds_ ? rounds_->syncs() : 0, change.group_ids, "recovery"});
      next.lost_group_ids.insert(next.lost_group_ids.begin(), change.lost_group_ids.begin(),
                                 change.lost_group_ids.end());
      next.lost_ranks.insert(next.lost_ranks.begin(), change.lost_ranks.begin(), change.lost_ranks.end());
      next.during = change.during + ", then recovery";
      change = std::move(next);
    }
  }
}

void Trainer::apply_loss(int64_t step, const MembershipChange& change, Clock::time_point t0) {
  // The run's tokens so far: every group's through the last round, the kept groups' since (the lost groups'
  // steps since the last round never reached the global model).
  const int64_t synced = step - rounds_->steps_since_sync();
  tokens_.restart(synced, tokens_through(synced));
  // The data is dealt over the kept groups from the next step on, as a relaunch of them would deal it.
  rebuild(change.layout, change.group_ids);
  faults_.at(FaultPoint::Recovery, step);
  // Every kept rank agrees once more over its rebuilt group (agree_in_group says why); a loss meanwhile is one more
  // loss of this recovery (apply_surviving).
  agree_in_group_again();
  const double seconds = seconds_since(t0);
  // The first kept rank writes the metrics from here on (the old rank 0 may have been lost).
  log_.config(resolved_);
  log_.membership({{"type", "group_lost"},
                   {"step", step},
                   {"lost_group_ids", change.lost_group_ids},
                   {"lost_ranks", change.lost_ranks},
                   {"group_ids", change.group_ids},
                   {"group_sizes", change.layout.group_sizes()},
                   {"during", change.during},
                   {"recover_s", seconds}},
                  cat("fedshard: lost rank(s) ", json_list(change.lost_ranks), " at step ", step, " (seen in: ",
                      change.during, "): groups ",
                      json_list(change.lost_group_ids), " left the job, groups ", json_list(change.group_ids),
                      " go on (", two_decimals(seconds), " s)"),
                  step, cadence_.timed() ? std::optional<int64_t>(writer_round_step_) : std::nullopt);
}

void Trainer::rebuild(const comm::Layout& layout, std::vector<int> group_ids) {
  s_.layout = layout;
  s_.emulation.real = s_.emulation.virtual_layout = layout;
  s_.group_ids = std::move(group_ids);
  // The new engine starts from the seed's parameters (not from disk, even where the run began from a Hugging
  // Face checkpoint); this rank's state is then handed over from the old one, whose communicators may be revoked.
  // Both are held meanwhile: a rank's model and optimizer state twice, briefly.
  // The old engine's collectives still queued on the comm threads end first (with errors where their
  // communicators are revoked): they write into its buffers (a dropped round's too) and use its communicators.
  for (auto lane : {comm::Lane::Inner, comm::Lane::Federation}) comm::MpiRuntime::get().comm_thread(lane).drain();
  auto spec = engine_spec(sharded_->options().device);
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
  topo_ = engine_.topo.get();
  sharded_ = engine_.sharded.get();
  watch_membership();
  if (topo_->layout().groups() > 1) notice_.emplace(topo_->layout(), topo_->world_rank(), membership_.base());
  s_.partition = data::partition_windows(*s_.train, s_.cfg.partition, layout.group_sizes(), s_.cfg.seed);
  samplers_.clear();
  readers_.clear();
  make_sampler();
  resolved_ = resolved_config();
  log_.set_writer(topo_->world_rank() == 0);
}

void Trainer::rejoin(int64_t step) {
  const auto t0 = Clock::now();
  const comm::Layout old = topo_->layout();
  JoinPlan plan;
  plan.step = step;
  plan.tokens = tokens_through(step);
  plan.syncs = rounds_->syncs();
  plan.launch_world = comm::MpiRuntime::get().world_size();
  plan.peak_flops = peak_flops_;
  const auto grown = membership_.grow(position(step, "rejoin"), old, plan, comm::MpiRuntime::get().argv());
  const auto& joined = grown.group_ids;
  // Where the replacements do not join, the job goes on without them and says why.
  const auto not_joined = [&](const std::string& why, const std::vector<int>& ids) {
    log_.membership({{"type", "rejoin_failed"}, {"step", step}, {"group_ids", ids}, {"error", why}},
                    cat("fedshard: groups ", json_list(ids), " did not rejoin after step ", step, " (", why,
                        "); going on without them"),
                    step);
  };
  if (!grown.change) return not_joined(grown.error, joined);
  // The run's tokens so far stay counted through this step; the world's tokens per step grow from the next.
  tokens_.restart(step, plan.tokens);
  rebuild(grown.change->layout, grown.change->group_ids);
  // Every replacement takes the state of the rank at its position in the first group (the donor). A rank lost
  // meanwhile, a replacement or a kept one, makes every replacement leave and the groups that lost a rank too.
  int64_t sent_bytes = 0, state_bytes = 0;
  const auto& layout = grown.change->layout;
  const auto transfer = [&] {
    faults_.at(FaultPoint::Join, step);
    for (int r = old.world(); r < layout.world(); ++r)
      if (topo_->world_rank() == layout.first_rank(0) + layout.coords(r).position)
        sent_bytes += send_state(engine_, membership_.base(), r);
    // Inside the agreement below: a member waiting here on a dead one is released as from a receive.
    comm::mpi_check(MPI_Reduce(&sent_bytes, &state_bytes, 1, MPI_INT64_T, MPI_SUM, 0, membership_.base()), "MPI_Reduce");
  };
  if (recovering(step, "rejoin", Agreement::Exchanged, transfer, [&] { not_joined("a rank was lost during the join", joined); }))
    return;
  if (s_.cfg.audit) audit_join(step, sent_bytes);
  const double seconds = seconds_since(t0);
  log_.config(resolved_);
  log_.membership({{"type", "group_joined"},
                   {"step", step},
                   {"joined_group_ids", joined},
                   {"joined_ranks", grown.change->joined_ranks},
                   {"group_ids", grown.change->group_ids},
                   {"group_sizes", layout.group_sizes()},
                   {"state_bytes", state_bytes},
                   {"join_s", seconds}},
                  cat("fedshard: groups ", json_list(joined), " rejoined after step ", step, ": ",
                      grown.change->joined_ranks.size(), " replacement rank(s) started, groups ",
                      json_list(grown.change->group_ids), " go on (", two_decimals(seconds), " s)"),
                  step);
}

void Trainer::join(const JoinPlan& plan) {
  const auto& layout = topo_->layout();
  tokens_.restart(plan.step, plan.tokens);
  rounds_->restore(plan.step, /*steps_since_sync=*/0, plan.syncs, /*round_time=*/0);
  int64_t received_bytes = 0;
  const auto receive = [&] {
    received_bytes = receive_state(engine_, membership_.base(), layout.first_rank(0) + topo_->coords().position);
    const int64_t none = 0;
    comm::mpi_check(MPI_Reduce(&none, nullptr, 1, MPI_INT64_T, MPI_SUM, 0, membership_.base()), "MPI_Reduce");
  };
  if (!succeeded_everywhere(membership_.base(), Agreement::Exchanged, receive)) {
    // The kept ranks go on without every joining group (Trainer::rejoin): this process ends here, as a lost
    // one, so their recovery counts it among the lost.
    std::fprintf(stderr, "fedshard: rank %d: a rank was lost while this replacement joined after step %lld; it "
                 "leaves, the job goes on\n", comm::MpiRuntime::get().world_rank(), static_cast<long long>(plan.step));
    comm::MpiRuntime::note_peer_lost();
    comm::MpiRuntime::get().finish(0);
  }
  // The round this replacement joins after, as the others audited it (its model is the global one), and its
  // whole state, which the rank it came from audits too.
  if (s_.cfg.audit) {
    audit_round(plan.step);
    audit_join(plan.step, received_bytes);
  }
}

void Trainer::audit_round(int64_t step) {
  log_.audit(comm::MpiRuntime::get().world_rank(),
             {{"round", rounds_->syncs()}, {"step", step}, {"group", s_.group_ids.at(topo_->coords().group)},
              {"checksum", engine_.aggregator->global_checksum()}});
}

void Trainer::audit_join(int64_t step, int64_t state_bytes) {
  log_.audit(comm::MpiRuntime::get().world_rank(),
             {{"join_step", step}, {"group", s_.group_ids.at(topo_->coords().group)},
              {"position", topo_->coords().position}, {"state_checksum", state_checksum(engine_)},
              {"state_bytes", state_bytes}});
}

Trainer::Next Trainer::conclude(const StepResult& r, bool replayed) {
  const int64_t step = r.step;
  const auto due = cadence_.decide({step, r.aggregated, r.stop, r.round.any.last, r.round.any.evaluate,
                                    r.round.any.checkpoint},
                                   carried_);
  carried_ = due.carried;
  if (!replayed) {
    for (comm::Tier t : comm::kTiers) step_bytes_[static_cast<int>(t)] += r.sent[static_cast<int>(t)];
    if (step > tokens_.start_step && !r.profiled) {  // the first step includes one-time allocation and warm-up
      step_seconds_sum_ += r.seconds;
      timed_tokens_ += static_cast<double>(world_tokens_per_step());  // the world may change (a lost group)
    }
    if (step % s_.cfg.log_every == 0 || due.last) log_step(r);
    watch_progress();
  }
  if (cadence_.timed() && r.aggregated) log_.round(step, tokens_through(step), r.round.steps);
  if (due.evaluate) {
    evaluate_global(step);
    watch_progress();
  }
  if (!replayed)
    log_.progress(step, r.loss, r.lr, tokens_per_second(static_cast<double>(world_tokens_per_step()), r.seconds),
                  last_val_ppl_);
  if (due.checkpoint) {
    // A round in flight is settled into the checkpoint: its averaging first arrives everywhere (or, lost, is
    // dropped everywhere), so that a loss during the writing finds every rank with the same round.
    while (engine_.aggregator && engine_.aggregator->in_flight() &&
           recovering(step, "checkpoint", Agreement::Succeeded, [&] { engine_.aggregator->arrive_model(); })) {
    }
    while (recovering(step, "checkpoint", Agreement::Succeeded, [&] { save(r); })) {
    }
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
  line.tokens = tokens_through(r.step);
  line.loss = r.loss;
  line.lr = r.lr;
  line.grad_norm = r.grad_norm;
  line.seconds = r.seconds;
  line.optimizer_seconds = r.optimizer_seconds;
  line.round_seconds = r.round_seconds;
  line.comm = r.comm;
  line.sent = r.sent;
  line.aggregated = r.aggregated;
  line.profiled = r.profiled;
  // Tokens of the virtual world, processed by the real ranks: throughput is this box's.
  line.tok_per_s = tokens_per_second(static_cast<double>(world_tokens_per_step()), r.seconds);
  const double rank_tok_per_s = line.tok_per_s / topo_->layout().world();
  line.mfu = 3.0 * s_.model.forward_flops_per_token(s_.cfg.seq_len) * rank_tok_per_s / peak_flops_;
  log_.step(line);
}

void Trainer::save(const StepResult& r) {
  TrainingState st;
  st.step = r.step;
  if (rounds_) {
    st.steps_since_sync = rounds_->steps_since_sync();
    st.syncs = rounds_->syncs();
    st.round_time = rounds_->round_time();
  }
  st.group_ids = s_.group_ids;
  st.tokens = tokens_through(r.step);
  st.tokenizer = s_.tokenizer;
  // Where the groups met at different steps (time-based rounds, a stop between rounds), each goes on from
  // its own; the checkpoint is named by group 0's.
  if (r.agreed) {
    // Per group as of the agreement, of the groups still here (a loss since: the checkpoint written again).
    FS_ASSERT(r.round_group_ids.size() == r.round.steps.size(), "the round's groups are not known");
    std::vector<int64_t> steps;
    std::vector<bool> at_round;
    for (int id : s_.group_ids) {
      const auto g = static_cast<size_t>(
          std::find(r.round_group_ids.begin(), r.round_group_ids.end(), id) - r.round_group_ids.begin());
      steps.push_back(r.round.steps.at(g));
      at_round.push_back(r.round.at_round.at(g));
    }
    const bool differ = std::any_of(steps.begin(), steps.end(), [&](int64_t x) { return x != steps.front(); });
    if (cadence_.timed() || differ || !r.round.issued) {
      st.step = steps.front();
      st.group_steps = steps;
    }
    if (!r.round.issued) st.pending_rounds = at_round;
  }
  save_checkpoint(s_.cfg.out, static_cast<int>(s_.cfg.checkpoint_keep), st, resolved_, s_.model, *topo_, *sharded_,
                  *engine_.optimizer, engine_.aggregator.get(), faults_);
}

void Trainer::evaluate_global(int64_t step) {
  // Written once, after every rank agreed that the evaluation succeeded.
  EvalResult e;
  const auto work = [&] {
    faults_.at(FaultPoint::Eval, step);
    const auto eval = [&] { e = evaluate(*sharded_, *s_.val, s_.cfg.eval_windows, s_.cfg.batch_size, topo_->world()); };
    // Under overlap no step ends with the groups equal: the global model is swapped in to be evaluated.
    if (s_.cfg.overlap != "none")
      engine_.aggregator->with_global_model(eval);
    else
      eval();
  };
  while (recovering(step, "evaluation", Agreement::Succeeded, work)) {
  }
  last_val_loss_ = e.loss;
  last_val_ppl_ = e.ppl;
  log_.eval(step, tokens_through(step), "global", e, seconds_since(run_start_));
}

void Trainer::evaluate_group(int64_t step) {
  const auto e = evaluate(*sharded_, *s_.val, s_.cfg.eval_windows, s_.cfg.batch_size, topo_->group());
  log_.eval(step, tokens_through(step), "group", e, seconds_since(run_start_));
}

nlohmann::json Trainer::link_summary() const {
  nlohmann::json j = nullptr;
  for (comm::Tier t : comm::kTiers)
    if (auto l = comm::LinkEmulator::instance().link(t)) j[comm::tier_metric_key(t)] = comm::describe(*l);
  return j;
}

Trainer::Next Trainer::lost_outside_agreement(int64_t step, const std::function<Next()>& work) {
  std::string failed;
  try {
    return work();
  } catch (const comm::PeerLost& e) {
    if (!recoverable()) throw;
    failed = e.what();
  }
  // Lost in a group's own collectives (a step's, a round's all-gathers inside the group): that group's ranks leave
  // at the kept groups' next agreement; a kept rank cannot take its step again (its optimizer may have stepped).
  const auto t0 = Clock::now();
  apply_surviving(step, membership_.lost(*topo_, position(step, "step")), t0);
  throw Error(cat("a rank was lost during step ", step, " (", failed, "), where this rank's group cannot take the ",
                  "step again (in-job recovery covers losses that the kept groups learn of in an agreement); resume ",
                  "from the last checkpoint"));
}

TrainSummary Trainer::run() {
  run_start_ = Clock::now();
  const auto comm_start = comm::Ledger::instance().snapshot();
  int64_t step = tokens_.start_step - 1, last_step = cadence_.steps();
  Next next = Next::Continue;
  try {
    // A group that stopped at a round that did not take place holds it first; its step was trained and logged.
    if (pending_round_) {
      StepResult r;
      r.step = step;
      federate(r.step, /*nonfinite=*/false, r);
      next = conclude(r, /*replayed=*/true);
      if (next == Next::End) last_step = r.step;
    }
    for (step = tokens_.start_step; step <= cadence_.steps() && next == Next::Continue; ++step) {
      if (profiler_) profiler_->before_step(step);
      next = lost_outside_agreement(step, [&] {
        StepResult r = train_step(step);
        r.profiled = profiler_ && profiler_->after_step(step);
        return conclude(r, /*replayed=*/false);
      });
      // Lost groups come back after a round, federation.rejoin_after rounds after they were lost.
      if (next == Next::Continue && rounds_ && rounds_->steps_since_sync() == 0 &&
          membership_.rejoin_due(rounds_->syncs()))
        rejoin(step);
      if (next != Next::Continue) last_step = step;
    }
    if (next == Next::Stop) {
      TrainSummary stopped;
      stopped.steps = last_step;
      stopped.preempted = true;
      return stopped;
    }
    log_.finish_progress();
    if (profiler_) profiler_->finish();
    return finish(last_step, seconds_since(run_start_), comm::Ledger::instance().snapshot() - comm_start);
  } catch (const LeftJob& e) {
    // A rank whose group lost a rank leaves, saying why; the job goes on without it.
    std::fprintf(stderr, "fedshard: %s\n", e.message.c_str());
    TrainSummary left;
    left.steps = step;
    left.left = true;
    return left;
  }
}

TrainSummary Trainer::finish(int64_t last_step, double wall_s, const comm::LedgerSnapshot& comm_total) {
  // Peak memory of every rank (host RSS, and the caching allocator's peak on a GPU), for the memory comparison
  // between strategies; and what each rank's training steps sent per tier (groups of different sizes send
  // different amounts).
  const at::Device device = sharded_->options().device;
  at::Tensor per_rank;
  const auto gather = [&] {
    faults_.at(FaultPoint::Summary, last_step);
    const int world = topo_->layout().world(), rank = topo_->world_rank();
    per_rank = at::zeros({world, 2 + comm::kNumTiers}, at::TensorOptions().dtype(at::kDouble).device(device));
    per_rank[rank][0] = peak_rss_mb();
    if (device.is_cuda()) per_rank[rank][1] = device_peak_allocated_bytes(device.index()) / (1024.0 * 1024.0);
    for (comm::Tier t : comm::kTiers) per_rank[rank][2 + static_cast<int>(t)] = step_bytes_[static_cast<int>(t)];
    topo_->world().all_reduce(per_rank, comm::ReduceOp::Sum, comm::Traffic::Control)->wait();
  };
  // Over the kept ranks where one is lost meanwhile.
  while (recovering(last_step, "summary", Agreement::Succeeded, gather)) {
  }
  per_rank = per_rank.to(at::kCPU);
  const int world = topo_->layout().world(), rank = topo_->world_rank();
  const auto column = [&](int c) {
    const at::Tensor t = per_rank.select(1, c).contiguous();
    return std::vector<double>(t.data_ptr<double>(), t.data_ptr<double>() + t.numel());
  };
  TrainSummary summary;
  summary.steps = last_step;
  summary.final_val_loss = last_val_loss_;
  summary.final_val_ppl = last_val_ppl_;
  summary.unigram_val_ppl = s_.train->manifest().unigram_val_ppl.value_or(0.0);
  const double step_tokens = static_cast<double>(world_tokens_per_step());
  summary.tok_per_s = timed_tokens_ > 0 ? timed_tokens_ / step_seconds_sum_ : step_tokens / wall_s;
  summary.reporter = rank == 0;
  if (rank != 0) return summary;
  // Counted at the MPI sends, next to the ring formula's figure, per tier and per communicator (rank 0's).
  nlohmann::json bytes, formula, by_comm, sent_by_rank = nlohmann::json::array();
  for (comm::Tier tier : comm::kTiers) {
    bytes[comm::tier_metric_key(tier)] = comm_total.sent_bytes(tier);
    formula[comm::tier_metric_key(tier)] = comm_total.formula_bytes(tier);
  }
  for (const auto& [name, t] : comm_total.by_comm)
    by_comm[name] = {{"sent_bytes", t.sent_bytes}, {"formula_bytes", t.formula_bytes}, {"calls", t.calls},
                     {"seconds", t.seconds}};
  for (int r = 0; r < world; ++r) {
    nlohmann::json b;
    for (comm::Tier t : comm::kTiers) b[comm::tier_metric_key(t)] = per_rank[r][2 + static_cast<int>(t)].item<double>();
    sent_by_rank.push_back(b);
  }
  const auto rss = column(0);
  nlohmann::json line = {{"type", "summary"},
                         {"strategy", s_.strategy.name()},
                         {"world", s_.emulation.virtual_layout.world()},
                         {"group_size", resolved_["resolved"]["group_size"]},
                         {"group_sizes", s_.emulation.virtual_layout.group_sizes()},
                         {"emulation", resolved_["resolved"]["emulation"]},
                         {"shard_size", resolved_["resolved"]["shard_size"]},
                         {"steps", last_step},
                         {"tokens", tokens_through(last_step)},
                         {"wall_s", wall_s},
                         {"tok_per_s", summary.tok_per_s},
                         {"final_val_loss", summary.final_val_loss},
                         {"final_val_ppl", summary.final_val_ppl},
                         {"unigram_val_ppl", summary.unigram_val_ppl},
                         {"bytes_total", bytes},
                         {"bytes_total_formula", formula},
                         {"bytes_counted", s_.topology.backend == "mpi"},
                         {"bytes_by_communicator", by_comm},
                         {"step_bytes_by_rank", sent_by_rank},
                         {"comm_exposed_s", comm_total.exposed_wait_seconds},
                         {"peak_rss_mb", rss},
                         {"peak_rss_mb_max", *std::max_element(rss.begin(), rss.end())},
                         {"peak_flops_per_rank", peak_flops_},
                         {"link_emulation", link_summary()}};
  if (device.is_cuda()) {
    const auto gpu = column(1);
    line["peak_gpu_mb"] = gpu;
    line["peak_gpu_mb_max"] = *std::max_element(gpu.begin(), gpu.end());
  }
  log_.summary(line);
  return summary;
}

}  // namespace fedshard::train
