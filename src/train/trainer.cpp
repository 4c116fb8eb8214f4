#include "train/trainer.h"

#include <ATen/Context.h>
#include <ATen/Parallel.h>
#include <ATen/core/grad_mode.h>
#include <sys/resource.h>
#include <torch/version.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>
#include <thread>

#include "comm/ledger.h"
#include "comm/link_emulation.h"
#include "comm/mpi_ops.h"
#include "comm/mpi_runtime.h"
#include "comm/rejoin.h"
#include "comm/survivors.h"
#include "comm/work.h"
#include "model/hf_adapter.h"
#include "model/layers.h"
#include "parallel/slow_ranks.h"
#include "data/manifest.h"
#include "train/evaluator.h"
#include "train/fault_injection.h"
#include "train/preemption.h"
#include "train/option_space.h"
#include "train/preflight.h"
#include "train/resume_contract.h"
#include "train/progress.h"
#include "util/build_info.h"
#include "util/error.h"
#include "util/memory.h"
#include "util/posix_file.h"
#include "util/safetensors.h"

namespace fedshard::train {

namespace {

using Clock = std::chrono::steady_clock;

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
  const double s = std::chrono::duration<double>(Clock::now() - t0).count();
  return 2.0 * n * n * n * reps / s;
}

// Seconds collectives spent really running (emulated=false) or held back by link emulation (true).
double comm_seconds(const comm::LedgerSnapshot& d, bool emulated) {
  double s = 0;
  for (comm::Tier t : comm::kTiers)
    for (comm::Traffic k : {comm::Traffic::Data, comm::Traffic::Control})
      s += emulated ? d.at(t, k).emulated_seconds : d.at(t, k).seconds;
  return s;
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

// Thrown by Trainer::recover on the ranks of a group that lost a rank: they leave the job, which goes on.
struct LeftJob {
  std::string message;
};

double peak_rss_mb() {
  struct rusage ru {};
  getrusage(RUSAGE_SELF, &ru);
  return static_cast<double>(ru.ru_maxrss) / 1024.0;
}

}  // namespace

namespace {

// Groups keep an id across restarts that lose some of them. Resuming a federated checkpoint of several groups
// onto another layout, each group continues the checkpoint group of its id (train.resume_groups; by default
// the same ids, which needs the same number of groups; one group continues one when named); any other change
// of layout restarts every group from the groups' average.
void choose_group_ids(TrainSetup& s) {
  const auto& want = s.cfg.resume_groups;
  const int groups = s.layout.groups();
  FS_CHECK(want.empty() || static_cast<int>(want.size()) == groups, "train.resume_groups lists ", want.size(),
           " group id(s) for ", groups, " group(s)");
  for (size_t i = 0; i < want.size(); ++i)
    FS_CHECK(std::count(want.begin(), want.end(), want[i]) == 1, "train.resume_groups names group ", want[i], " twice");
  if (!s.resume) {
    s.group_ids = want;
    if (s.group_ids.empty())
      for (int g = 0; g < groups; ++g) s.group_ids.push_back(g);
    return;
  }
  const auto& meta = *s.resume;
  s.group_ids = want.empty() ? meta.group_ids : want;
  if (same_layout(meta, s.layout, s.strategy.name())) {
    FS_CHECK(s.group_ids == meta.group_ids, "train.resume_groups must name the checkpoint's groups (",
             nlohmann::json(meta.group_ids).dump(), ") when the layout is the same");
    return;
  }
  // One group may continue one checkpoint group too (the last survivor of a lost group): named, it does.
  const bool per_group = s.strategy.federated && meta.strategy.rfind("fl-", 0) == 0 && meta.layout.groups() > 1 &&
                         (groups > 1 || !want.empty());
  if (!per_group) {
    FS_CHECK(want.empty(), "train.resume_groups applies to a federated checkpoint of several groups resumed by an fl-* ",
             "strategy");
    s.group_ids.clear();
    for (int g = 0; g < groups; ++g) s.group_ids.push_back(g);
    return;
  }
  FS_CHECK(static_cast<int>(s.group_ids.size()) == groups, "checkpoint ", meta.dir, " has ", meta.layout.groups(),
           " groups, this run ", groups, ": set train.resume_groups to the ids of the checkpoint groups that continue, ",
           "one per group");
  for (int id : s.group_ids) {
    const auto it = std::find(meta.group_ids.begin(), meta.group_ids.end(), id);
    FS_CHECK(it != meta.group_ids.end(), "train.resume_groups: checkpoint ", meta.dir, " has no group with id ", id);
    s.continues.push_back(static_cast<int>(it - meta.group_ids.begin()));
  }
}

// The GPU of this rank: its index among the host's ranks modulo the host's GPUs. Chosen (and made current)
// in the start-up phase, before the preflight measures its free memory, so every CUDA call of the rank is on
// its own GPU and uneven hosts end every rank with one line instead of some ranks waiting in a collective.
void choose_gpu(TrainSetup& s) {
  if (s.cfg.device != "cuda") return;
  const auto [host_rank, host_ranks] = comm::MpiRuntime::get().host_rank_and_size();
  const int gpus = visible_gpus();
  // NCCL refuses two ranks on one GPU: that needs the host-staged MPI backend.
  FS_CHECK(s.topology.backend != "nccl" || host_ranks <= gpus, host_ranks, " ranks share ", gpus, " GPU(s) on a host: ",
           "NCCL needs one rank per GPU; use --set parallel.backend=mpi (host-staged collectives)");
  s.topology.device = host_rank % gpus;
  use_gpu(s.topology.device);
}

// The training data's tokenizer spec with its file's path absolute, so a checkpoint names it from anywhere.
std::string absolute_tokenizer(const std::string& spec) {
  const std::string prefix = "tiktoken:";
  if (spec.rfind(prefix, 0) != 0) return spec;
  const std::filesystem::path file = spec.substr(prefix.size());
  return prefix + (file.is_absolute() || !std::filesystem::exists(file) ? file : std::filesystem::absolute(file)).string();
}

nlohmann::json memory_json(const plan::MemoryEstimate& e) {
  nlohmann::json j = {{"total", e.total()}};
  for (const auto& c : e.components) j[c.name] = c.bytes;
  return j;
}

// Whether a checkpoint is where the job's end rule stops it: step rounds end when every group has trained
// train.steps; time-based rounds at the round where the first group reaches it. A round some group stopped
// at without holding it (a stop between rounds) is still to come.
bool finished(const CheckpointMeta& meta, const TrainConfig& cfg) {
  for (bool pending : meta.pending_rounds)
    if (pending) return false;
  if (meta.group_steps.empty()) return meta.step >= cfg.steps;
  const auto [lo, hi] = std::minmax_element(meta.group_steps.begin(), meta.group_steps.end());
  return (cfg.round.rfind("seconds", 0) == 0 ? *hi : *lo) >= cfg.steps;
}

std::string describe_progress(const CheckpointMeta& meta) {
  if (meta.group_steps.empty()) return cat("it is at step ", meta.step);
  return cat("its groups are at steps ", nlohmann::json(meta.group_steps).dump());
}

}  // namespace

bool recovers_in_job(const TrainSetup& s) {
  const auto& cfg = s.cfg;
  const auto& layout = s.layout;
  if (!s.strategy.federated || federation::parse_round_seconds(cfg.round, cfg.sync_every) > 0) return false;
  // Equal groups: the kept groups' padding (a multiple of every group size) and so every shard stay as they were.
  if (!layout.equal_groups()) return false;
  for (int g = 0; g < layout.groups(); ++g)
    if (layout.replicas(g) != 1) return false;  // a round ends by an all-gather inside the group
  return cfg.overlap == "none" && cfg.compress == "none" && cfg.inner_state != "average" && !s.emulation.active() &&
         s.topology.backend == "mpi";
}

TrainSetup prepare_training(const TrainConfig& cfg, int world_size, int world_rank) {
  TrainSetup s;
  s.cfg = cfg;
  s.strategy = parallel::parse_strategy(cfg.strategy);
  s.emulation = parallel::plan_emulation(s.strategy, cfg.emulate, world_size, cfg.groups,
                                         static_cast<int>(cfg.group_size), static_cast<int>(cfg.shard_size));
  s.layout = s.emulation.real;
  if (cfg.ranks_per_node > 0) s.layout.place_on_nodes(static_cast<int>(cfg.ranks_per_node));
  s.topology.ranks_per_node = static_cast<int>(cfg.ranks_per_node);
  const bool nccl_built = built_with_cuda();
  FS_CHECK(cfg.device == "cpu" || nccl_built, "model.device = cuda but this fedshard was built without CUDA (against ",
           "a CPU LibTorch); build it against a CUDA LibTorch (docs/cuda.md)");
  FS_CHECK(cfg.device == "cpu" || visible_gpus() > 0, "model.device = cuda but no GPU is visible to this process (",
           build_description(), ")");
  FS_CHECK(cfg.backend != "nccl" || nccl_built, "parallel.backend = nccl needs a build against a CUDA LibTorch");
  s.topology.backend = cfg.backend == "auto" ? (cfg.device == "cuda" && nccl_built ? "nccl" : "mpi") : cfg.backend;
  choose_gpu(s);
  // The HF directory is read (headers only) and checked whole before anything else: it may decide the model.
  std::shared_ptr<model::HfCheckpoint> hf;
  if (!cfg.init_from.empty()) hf = std::make_shared<model::HfCheckpoint>(cfg.init_from);
  const bool model_from_hf = hf && cfg.model.empty();
  s.model = model_from_hf ? hf->config() : model::preset(cfg.model.empty() ? "small" : cfg.model);
  FS_CHECK(cfg.fused != "on" || optim::fused_adamw_available(), "optim.fused = on needs LibTorch >= 2.4 (this build has ",
           TORCH_VERSION, "); use auto or off");
  FS_CHECK(cfg.fused != "on" || cfg.optimizer == "adamw", "optim.fused = on applies to adamw only (optim.name = ",
           cfg.optimizer, ")");
  const auto manifest = data::Manifest::load(cfg.data_dir);
  s.tokenizer = absolute_tokenizer(manifest.tokenizer.spec);
  FS_CHECK(!model_from_hf || (cfg.n_layers == 0 && cfg.tie_embeddings == "preset" && cfg.vocab_size == 0),
           "model.n_layers, model.tie_embeddings and model.vocab_size do not apply with model.init_from: the model is ",
           "the one ", hf->config_path(), " describes");
  if (cfg.n_layers > 0) s.model.n_layers = cfg.n_layers;
  if (cfg.tie_embeddings != "preset") s.model.tie_embeddings = cfg.tie_embeddings == "true";
  const int64_t data_vocab = manifest.tokenizer.vocab_size;
  // An explicit model.vocab_size may pad the tokenizer's vocabulary (rows no token uses, as llm.c pads GPT-2's
  // 50257 to 50304), and so may a Hugging Face model's; a preset's own vocabulary must be the data's.
  if (model_from_hf) {
    FS_CHECK(s.model.vocab_size >= data_vocab, hf->config_path(), ": vocab_size ", s.model.vocab_size,
             " is smaller than the vocab ", data_vocab, " of tokenizer ", manifest.tokenizer.spec, " that ",
             cfg.data_dir, " was prepared with");
  } else if (cfg.vocab_size > 0) {
    FS_CHECK(cfg.vocab_size >= data_vocab, "model.vocab_size = ", cfg.vocab_size, " is smaller than the vocab ",
             data_vocab, " of tokenizer ", manifest.tokenizer.spec, " that ", cfg.data_dir, " was prepared with");
    s.model.vocab_size = cfg.vocab_size;
  } else {
    if (s.model.vocab_size == 0) s.model.vocab_size = data_vocab;
    FS_CHECK(s.model.vocab_size == data_vocab, "model ", s.model.name, " has vocab ", s.model.vocab_size, " but ",
             cfg.data_dir, " was prepared with tokenizer ", manifest.tokenizer.spec, " (vocab ", data_vocab,
             "); set model.vocab_size or prepare the data with a matching tokenizer");
  }
  s.model.validate();
  if (hf && !model_from_hf) {
    const auto diff = model::architecture_difference(s.model, hf->config());
    FS_CHECK(diff.empty(), "model ", s.model.name, " is not the model ", hf->config_path(), " describes (", diff,
             "); leave out model.name to take config.json's");
  }
  s.model.attention = model::parse_attention_kernel(cfg.attention);
  s.model.kernels = model::parse_kernels(cfg.kernels);
  s.model.matmul = model::parse_matmul_dtype(cfg.matmul_dtype);
  model::parse_cross_entropy(cfg.cross_entropy, s.model);
  if (s.model.matmul == model::MatmulDtype::Float8) {
    // _scaled_mm takes sizes in multiples of 16; the weight gradient's inner size is the micro-batch's tokens.
    const int64_t sizes[] = {s.model.dim, s.model.n_kv_heads * s.model.head_dim(), s.model.ffn_hidden_dim(),
                             cfg.batch_size * cfg.seq_len};
    for (int64_t n : sizes)
      FS_CHECK(n % 16 == 0, "model.matmul_dtype = float8 needs the linear layers' sizes (dim ", s.model.dim,
               ", kv dim ", sizes[1], ", ffn hidden ", sizes[2], ") and the tokens per micro-batch (", sizes[3],
               ") to be multiples of 16");
  }
  FS_CHECK(cfg.seq_len <= s.model.max_seq_len, "data.seq_len ", cfg.seq_len, " exceeds the max_seq_len ",
           s.model.max_seq_len, " of model ", s.model.name);
  s.train = std::make_shared<data::TokenDataset>(cfg.data_dir, "train", cfg.seq_len, s.model.vocab_size);
  s.val = std::make_shared<data::TokenDataset>(cfg.data_dir, "val", cfg.seq_len, s.model.vocab_size);
  const auto& layout = s.layout;
  s.partition = data::partition_windows(*s.train, cfg.partition, s.emulation.virtual_layout.group_sizes(), cfg.seed);
  parallel::slow_factors(cfg.slow, s.layout);
  // The refused combinations that need what only the job knows (train/option_space.h).
  Combination combination(cfg);
  combination.started = true;
  combination.backend = s.topology.backend;
  combination.units = static_cast<int>(unit_layout(s.model).size());
  combination.groups_per_rank = s.emulation.groups_per_rank;
  combination.in_job_recovery = recovers_in_job(s);
  combination.gpu_capability = cfg.device == "cuda" ? gpu_compute_capability(s.topology.device) : 0;
  check_options(combination);
  FS_CHECK(cfg.rejoin_after == 0 || built_with_ulfm(), "federation.rejoin_after = ", cfg.rejoin_after, " needs a ",
           "build against an MPI with ULFM (README: what happens when a node dies); this one: ", build_description());
  if (world_rank == 0) ensure_writable_dir(cfg.out);
  validate_fault_plan();
  if (!cfg.resume.empty()) {
    if (auto dir = find_checkpoint(cfg.resume, cfg.out)) {
      // Same layout: this rank reads (and verifies) its own file; re-slicing reads them all.
      auto meta = load_checkpoint_meta(*dir, s.model, /*verify_all_files=*/false, world_rank);
      if (!same_layout(meta, layout, s.strategy.name())) meta = load_checkpoint_meta(*dir, s.model, true, world_rank);
      FS_CHECK(!finished(meta, cfg), "checkpoint ", *dir, " ends the run: ", describe_progress(meta),
               ", train.steps is ", cfg.steps, ": nothing left to train (raise --steps)");
      s.resume = std::move(meta);
    }
  }
  choose_group_ids(s);
  if (s.resume) {
    const auto relayout = same_layout(*s.resume, layout, s.strategy.name()) ? Relayout::Same
                          : s.continues.empty()                              ? Relayout::Merge
                                                                             : Relayout::PerGroup;
    check_resume_contract(*s.resume, cfg, relayout);
  }
  if (hf && !s.resume) s.init_from = hf;
  s.memory = preflight(s, world_rank);
  return s;
}

TrainSetup prepare_joining(TrainConfig cfg, MPI_Comm comm) {
  auto plan = JoinPlan::from_json(nlohmann::json::parse(comm::broadcast_text("", 0, comm)));
  plan.comm = comm;
  MPI_Comm_rank(comm, &plan.rank);
  auto& mpi = comm::MpiRuntime::get();
  mpi.join_job(plan.launch_ranks.at(plan.rank), plan.launch_world);
  mpi.count_host_ranks(comm, mpi.world_rank());
  cfg.groups = plan.group_sizes;
  cfg.group_size = 0;
  cfg.resume.clear();
  cfg.resume_groups.clear();
  TrainSetup s;
  try {
    maybe_inject_fault(FaultPoint::Join, plan.step);
    s = prepare_training(cfg, static_cast<int>(plan.launch_ranks.size()), plan.rank);
  } catch (const std::exception&) {
    // Every replacement and kept rank learns that this one cannot join (Trainer::rejoin); it then ends as a
    // lost rank does.
    comm::all_succeeded(comm, false);
    comm::MpiRuntime::note_peer_lost();
    throw;
  }
  if (!comm::all_succeeded(comm, true)) {
    comm::MpiRuntime::note_peer_lost();
    throw Error("another replacement could not start, so none joins; the job goes on without them");
  }
  s.init_from = nullptr;
  s.group_ids = plan.group_ids;
  s.join = std::move(plan);
  return s;
}

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
  comm::LedgerSnapshot comm;    // what the collectives recorded during the step
  std::array<double, comm::kNumTiers> sent{};  // bytes this rank sent for the step, per tier
};

Trainer::Trainer(TrainSetup setup) : s_(std::move(setup)) {
  const auto& cfg = s_.cfg;
  configure_link_emulation(cfg);
  if (s_.join) base_ = s_.join->comm;
  engine_ = parallelize(engine_spec(place_rank()));
  topo_ = engine_.topo.get();
  sharded_ = engine_.sharded.get();
  lr_ = {cfg.lr, cfg.lr * cfg.min_lr_ratio, cfg.warmup_steps >= 0 ? cfg.warmup_steps : cfg.steps / 10, cfg.steps};
  if (engine_.aggregator)
    rounds_.emplace(cfg.sync_every, cfg.steps, group_tokens_per_step(), federation::parse_overlap(cfg.overlap),
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
  if (rounds_ && topo_->layout().groups() > 1) notice_.emplace(topo_->layout(), topo_->world_rank(), base_);
  make_sampler();
  for (int r = 0; r < topo_->layout().world(); ++r) launch_ranks_.push_back(r);
  if (s_.join) join(*s_.join);
  if (s_.resume) {
    // Every group goes on from its own step (groups differ under time-based rounds and after a stop between
    // rounds), first holding the round it stopped at, if that one did not take place.
    const auto st = restore_checkpoint(*s_.resume, *topo_, s_.strategy.name(), *sharded_, *engine_.optimizer,
                                       engine_.aggregator.get(), s_.continues);
    start_step_ = st.step + 1;
    pending_round_ = st.pending_round;
    tokens_before_start_ = st.tokens;
    if (rounds_) rounds_->restore(st.step, st.steps_since_sync, st.syncs, st.round_time);
  }
  tokens_agreed_ = tokens_before_start_;
  step_agreed_ = start_step_ - 1;
  federation_sent_ = comm::Ledger::instance().snapshot().lane_sent[static_cast<int>(comm::Lane::Federation)];
  // A replacement takes the job's figure: measuring would keep every other rank waiting at the next step.
  peak_flops_ = cfg.peak_flops > 0 ? cfg.peak_flops
                : s_.join         ? s_.join->peak_flops
                                  : measure_matmul_flops(sharded_->options().device);
  resolved_ = resolved_config();
  open_run_files();
  // A lost writer's lines since its last one are at most a round's steps and its evaluations (the others see the
  // loss at the next round, evaluation or checkpoint).
  if (recoverable()) metrics_.hold_lines(2 * (static_cast<size_t>(cfg.sync_every) + 1));
  if (const auto range = parse_profile_steps(cfg.profile_steps); range.first > 0)
    profiler_.emplace(range, cfg.out, topo_->world_rank(), sharded_->options().device);
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
  e.base = base_;
  e.topology = s_.topology;
  e.model = s_.model;
  e.sharding.master_dtype = dtype_of(cfg.dtype);
  e.sharding.compute_dtype = dtype_of(cfg.compute_dtype);
  e.sharding.reduce_dtype = dtype_of(cfg.reduce_dtype);
  // Recomputation pays off where parameters are sharded, i.e. per group.
  int rank = 0;
  MPI_Comm_rank(base_, &rank);
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

namespace {

// The head's chunk rows as the model computes them; null when the logits are made at once.
nlohmann::json loss_chunk_rows(const model::ModelConfig& m) {
  if (!m.chunked_loss) return nullptr;
  return m.loss_chunk_rows > 0 ? m.loss_chunk_rows : kernels::cross_entropy_chunk_rows(m.dim);
}

}  // namespace

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
  if (topo_->world_rank() != 0) return;
  const auto& cfg = s_.cfg;
  // First: a TensorBoard directory that cannot be made stops the run before it writes anything.
  if (!cfg.tensorboard.empty()) metrics_.mirror_to_tensorboard(cfg.tensorboard, s_.resume ? s_.resume->step : -1);
  write_file_atomically((std::filesystem::path(cfg.out) / "config.json").string(), resolved_.dump(2) + "\n");
  if (s_.resume) {
    reopen_metrics_after(s_.resume->step);
    metrics_.write({{"type", "resume"},
                    {"step", s_.resume->step},
                    {"checkpoint", s_.resume->dir},
                    {"same_layout", same_layout(*s_.resume, topo_->layout(), s_.strategy.name())}});
    if (!s_.continues.empty())
      metrics_.write({{"type", "relayout"},
                      {"step", s_.resume->step},
                      {"old_groups", s_.resume->layout.group_sizes()},
                      {"old_group_ids", s_.resume->group_ids},
                      {"new_groups", topo_->layout().group_sizes()},
                      {"group_ids", s_.group_ids}});
    std::fprintf(stderr, "fedshard: resuming from %s (step %lld)\n", s_.resume->dir.c_str(),
                 static_cast<long long>(s_.resume->step));
  } else {
    metrics_.open((std::filesystem::path(cfg.out) / "metrics.jsonl").string(), /*append=*/false);
  }
  std::fprintf(stderr, "fedshard: %s on %s%s; model %s (%s parameters); threads per rank %d\n",
               s_.strategy.name().c_str(), topo_->describe().c_str(),
               s_.emulation.active() ? (", emulating " + s_.emulation.describe()).c_str() : "", s_.model.name.c_str(),
               model::with_commas(s_.model.param_count()).c_str(), threads_);
}

Trainer::~Trainer() {
  if (base_ != MPI_COMM_WORLD) MPI_Comm_free(&base_);
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
  if (rounds_ && rounds_->timed()) return tokens_agreed_ + (step - step_agreed_) * group_tokens_per_step();
  return tokens_before_start_ + (step - start_step_ + 1) * world_tokens_per_step();
}

void Trainer::reopen_metrics_after(int64_t step) {
  const auto path = (std::filesystem::path(s_.cfg.out) / "metrics.jsonl").string();
  std::string kept;
  if (std::filesystem::exists(path)) {
    std::istringstream in(read_file(path));
    for (std::string line; std::getline(in, line);) {
      nlohmann::json j;
      try {
        j = nlohmann::json::parse(line);
      } catch (const std::exception&) {
        break;  // a line cut short by the crash ends what is kept
      }
      if (j.value("type", "") == "summary" || j.value("step", int64_t{0}) > step) continue;
      kept += line + "\n";
    }
  }
  write_file_atomically(path, kept);
  metrics_.open(path, /*append=*/true);
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
  double excluded_seconds = 0;
  comm::LedgerSnapshot excluded_comm;
  StepResult r;
  r.step = step;
  r.lr = lr_.at(step);
  // Each held group's loss, then the preemption signal, under time-based rounds the group's first rank's
  // "time is up", and under federation whether a rank's slices hold a non-finite value: the group agrees on
  // all of them in one all-reduce after the step.
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
    r.optimizer_seconds += std::chrono::duration<double>(Clock::now() - opt0).count();
    if (held_) held_->save(static_cast<int>(j));
  }
  maybe_inject_fault(FaultPoint::Step, step, [this] { return notice_ && notice_->received(); });
  if (inject_inf(step)) {
    at::NoGradGuard no_grad;
    sharded_->units().at(1)->flat().shard().detach()[0].fill_(std::numeric_limits<double>::infinity());
  }
  // train.slow: the step's kernels done, sleep (factor - 1) x its time; an emulated clock counts it instead.
  if (slow_ > 1 && clock_step_ == 0) {
    if (!device.is_cpu()) at::zeros({1}, at::TensorOptions().device(device)).item<float>();
    std::this_thread::sleep_for((slow_ - 1) * std::chrono::duration<double>(Clock::now() - t0));
  }

  // The logged loss is the mean over this rank's federation group (its first held group under emulation): no
  // per-step traffic crosses groups.
  const auto flag = static_cast<int64_t>(held);
  l[flag] = preemption_signal() != 0 || (notice_ && notice_->received()) ? 1.0 : 0.0;
  const double step_time = clock_step_ > 0 ? clock_step_ : std::chrono::duration<double>(Clock::now() - t0).count();
  const bool mine_up = rounds_ && rounds_->timed() && topo_->coords().position == 0 && rounds_->time_up(step_time);
  l[flag + 1] = mine_up ? 1.0 : 0.0;
  if (rounds_ && (rounds_->timed() || rounds_->due(step))) l[flag + 2] = engine_.aggregator->nonfinite_flag();
  if (inject_nan(step)) l[0].fill_(std::nan(""));
  topo_->group().all_reduce(l, comm::ReduceOp::Mean, comm::Traffic::Control)->wait();
  const auto host = l.cpu();
  r.loss = host[0].item<double>();
  group_stop_ = host[flag].item<double>() > 0;
  const bool time_up = host[flag + 1].item<double>() > 0;
  const bool nonfinite = host[flag + 2].item<double>() > 0;
  if (group_stop_ && notice_) notice_->send();
  if (topo_->layout().groups() == 1) r.stop = group_stop_;
  if (s_.cfg.defer_host_sync) r.grad_norm = grad_norm.item<double>();
  for (size_t j = 0; j < held; ++j) {
    const double loss = host[static_cast<int64_t>(j)].item<double>();
    if (!std::isfinite(loss))
      throw Error(cat("loss is ", loss, " at step ", step, " in group ", s_.emulation.groups_of(topo_->world_rank())[j],
                      "; stopping (lower optim.lr or enable optim.grad_clip)"))
          .reported_by(topo_->coords().position == 0)
          .everywhere(topo_->layout().groups() == 1);
  }

  if (rounds_) {
    const auto& cfg = s_.cfg;
    rounds_->count_step();
    const bool due = rounds_->due(step, time_up);
    // The group model's evaluation is not part of the step: its time and bytes are taken out of the step's.
    if (cfg.eval_group_model && due) {
      const auto e0 = Clock::now();
      const auto c0 = comm::Ledger::instance().snapshot();
      log_eval(step, "group", topo_->group());
      excluded_comm = comm::Ledger::instance().snapshot() - c0;
      excluded_seconds = std::chrono::duration<double>(Clock::now() - e0).count();
    }
    const auto round0 = Clock::now();
    if (due) {
      federate_surviving(step, nonfinite, r);
    } else if (group_stop_ && topo_->layout().groups() > 1) {
      // Between rounds: stop at this step rather than at the next round (which may be past the grace time).
      r.round = engine_.aggregator->vote_stop(vote(step, nonfinite));
      r.agreed = true;
      r.stop = true;
    } else {
      engine_.aggregator->progress();
      if (rounds_->timed()) {
        checkpoint_wanted_ = checkpoint_wanted_ || (cfg.checkpoint_every > 0 && step % cfg.checkpoint_every == 0);
        eval_wanted_ = eval_wanted_ || (cfg.eval_every > 0 && step % cfg.eval_every == 0);
      }
    }
    r.round_seconds = std::chrono::duration<double>(Clock::now() - round0).count();
  }
  r.seconds = std::chrono::duration<double>(Clock::now() - t0).count() - excluded_seconds;
  const auto now = comm::Ledger::instance().snapshot();
  r.comm = now - comm0 - excluded_comm;
  // The federation lane's collectives complete when they do, also between steps: the step takes what that
  // lane completed since the previous step's account, so no round's bytes fall between two steps.
  constexpr int fed = static_cast<int>(comm::Lane::Federation);
  for (comm::Tier t : comm::kTiers) {
    const int i = static_cast<int>(t);
    r.sent[i] = r.comm.sent_bytes(t) - r.comm.lane_sent[fed][i] + now.lane_sent[fed][i] - federation_sent_[i];
    federation_sent_[i] = now.lane_sent[fed][i];
  }
  return r;
}

federation::Vote Trainer::vote(int64_t step, bool nonfinite) const {
  const auto& cfg = s_.cfg;
  federation::Vote v;
  // Groups agree on a stop inside themselves every step and with each other here; time-based rounds also
  // agree here on the evaluations and checkpoints that any group's steps made due.
  v.stop = group_stop_;
  v.last = step == cfg.steps;
  v.checkpoint = checkpoint_wanted_ || (cfg.checkpoint_every > 0 && step % cfg.checkpoint_every == 0);
  v.evaluate = eval_wanted_ || (cfg.eval_every > 0 && step % cfg.eval_every == 0);
  v.nonfinite = nonfinite;
  v.step = step;
  v.steps_in_round = rounds_->steps_since_sync();
  v.round = rounds_->syncs() + 1;
  v.launch_tokens = static_cast<double>((step - start_step_ + 1) * group_tokens_per_step());
  return v;
}

void Trainer::federate(int64_t step, bool nonfinite, StepResult& r) {
  const auto& cfg = s_.cfg;
  auto& agg = *engine_.aggregator;
  if (agg.in_flight()) agg.finish();
  // Held groups enter the round as their mean, weighted as all of them, and all leave it with the result.
  if (held_) held_->combine(cfg.inner_state == "average");
  round_unapplied_ = true;
  r.round = agg.begin(rounds_->units(step), rounds_->weight(step), vote(step, nonfinite));
  r.agreed = true;
  r.stop = r.round.any.stop;
  // Another group stopped between rounds: this round is held first thing after the resume.
  pending_round_ = !r.round.issued;
  if (pending_round_) {
    round_unapplied_ = false;
    return;
  }
  // After a recovery every group must meet at the same step of a step round: a group that completed a round
  // the others lost (ULFM reports a failure to some survivors only) would mix its later model into theirs.
  if (recovered_ && !rounds_->timed()) {
    const auto& steps = r.round.steps;
    if (std::any_of(steps.begin(), steps.end(), [&](int64_t s) { return s != steps.front(); }))
      throw Error(cat("after the lost group the kept groups met at different steps (", nlohmann::json(steps).dump(),
                      "): a round completed for some of them only; resume from the last checkpoint"))
          .reported_by(topo_->world_rank() == 0)
          .everywhere(true);
  }
  rounds_->count_sync(step);
  if (!rounds_->leave_in_flight(r.round.any.last)) agg.finish();
  round_unapplied_ = false;
  if (held_) held_->distribute(cfg.inner_state != "keep");
  r.aggregated = true;
  if (cfg.audit) audit_round(step);
  if (rounds_->timed()) {
    tokens_agreed_ = tokens_before_start_ + static_cast<int64_t>(r.round.launch_tokens);
    step_agreed_ = step;
  }
}

void Trainer::federate_surviving(int64_t step, bool nonfinite, StepResult& r) {
  const auto schedule = *rounds_;
  try {
    federate(step, nonfinite, r);
    return;
  } catch (const comm::PeerLost&) {
    if (!recoverable() || !round_unapplied_) throw;
  }
  // Every survivor stopped before applying the round (a round applies after all of its averaging has
  // arrived): held again by the kept groups, it averages their models only, weighted as before.
  round_unapplied_ = false;
  rounds_ = schedule;
  recover(step);
  r.round = {};
  federate(step, nonfinite, r);
}

void Trainer::surviving(int64_t step, const std::function<void()>& work) {
  if (!recoverable()) return work();
  bool done = true;
  try {
    work();
  } catch (const comm::PeerLost&) {
    topo_->revoke_all();  // the ranks still inside `work`'s collectives (a ring waits on a live peer) leave them
    done = false;
  }
  if (comm::all_succeeded(topo_->base(), done)) return;
  recover(step);
  work();
}

bool Trainer::recoverable() const { return recovers_in_job(s_); }

void Trainer::rebuild(const comm::Layout& layout, std::vector<int> group_ids, MPI_Comm base) {
  s_.layout = layout;
  s_.emulation.real = s_.emulation.virtual_layout = layout;
  s_.group_ids = std::move(group_ids);
  if (base_ != MPI_COMM_WORLD) MPI_Comm_free(&base_);
  base_ = base;
  // The new engine starts from the seed's parameters (not from disk, even where the run began from a Hugging
  // Face checkpoint); this rank's state is then handed over from the old one, whose communicators may be revoked.
  // Both are held meanwhile: a rank's model and optimizer state twice, briefly.
  auto spec = engine_spec(sharded_->options().device);
  spec.init = {};
  Engine next = parallelize(spec);
  engine_.aggregator->abandon_round();
  hand_over(engine_, next);
  notice_.reset();
  {
    // The old engine's collectives still queued on the comm threads end (with errors where their communicators
    // are revoked) before those communicators are freed with it.
    for (auto lane : {comm::Lane::Inner, comm::Lane::Federation}) comm::MpiRuntime::get().comm_thread(lane).drain();
    Engine old = std::move(engine_);
    engine_ = std::move(next);
  }
  recovered_ = true;
  topo_ = engine_.topo.get();
  sharded_ = engine_.sharded.get();
  if (topo_->layout().groups() > 1) notice_.emplace(topo_->layout(), topo_->world_rank(), base_);
  s_.partition = data::partition_windows(*s_.train, s_.cfg.partition, layout.group_sizes(), s_.cfg.seed);
  samplers_.clear();
  readers_.clear();
  make_sampler();
  resolved_ = resolved_config();
}

void Trainer::recover(int64_t step) {
  const auto t0 = Clock::now();
  const comm::Layout old = topo_->layout();
  topo_->revoke_all();
  auto survivors = comm::shrink_after_failure(topo_->base());
  auto kept = comm::regroup(survivors, old);
  MPI_Comm_free(&survivors.comm);
  // Named as at launch: after an earlier loss or a rejoin, ranks of the base communicator are numbered differently.
  std::vector<int> lost_ranks, kept_launch_ranks;
  for (int r : survivors.lost) lost_ranks.push_back(launch_ranks_.at(r));
  const int launch_rank = comm::MpiRuntime::get().world_rank();
  std::vector<int> lost_ids, kept_ids;
  for (int g : kept.lost_groups) {
    lost_ids.push_back(s_.group_ids.at(g));
    std::vector<int> members;  // the whole group: its live ranks leave too
    for (int r : old.group_members(old.first_rank(g))) members.push_back(launch_ranks_.at(r));
    lost_groups_.emplace_back(s_.group_ids.at(g), std::move(members));
  }
  for (int g : kept.kept_groups) {
    kept_ids.push_back(s_.group_ids.at(g));
    for (int r : old.group_members(old.first_rank(g))) kept_launch_ranks.push_back(launch_ranks_.at(r));
  }
  launch_ranks_ = kept_launch_ranks;
  rejoin_round_ = rounds_->syncs() + s_.cfg.rejoin_after;
  const std::string lost_json = nlohmann::json(lost_ids).dump(), kept_json = nlohmann::json(kept_ids).dump();
  const std::string lost_ranks_json = nlohmann::json(lost_ranks).dump();
  if (kept.comm == MPI_COMM_NULL)
    throw LeftJob{cat("rank ", launch_rank, " of group ", s_.group_ids.at(topo_->coords().group),
                      ": lost rank(s) ", lost_ranks_json, " at step ", step, "; groups ",
                      lost_json, " leave the job, which goes on with groups ", kept_json)};
  FS_CHECK(!kept.kept_groups.empty(), "every group lost a rank at step ", step);
  // The run's tokens so far: every group's through the last round, the kept groups' since (the lost groups'
  // steps since the last round never reached the global model).
  const int64_t synced = step - rounds_->steps_since_sync();
  tokens_before_start_ = tokens_through(synced);
  start_step_ = synced + 1;
  // The data is dealt over the kept groups from the next step on, as a relaunch of them would deal it.
  rebuild(kept.layout, kept_ids, kept.comm);
  const double seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  if (topo_->world_rank() != 0) return;
  // The first kept rank writes the metrics from here on (the old rank 0 may have been lost): after the lost
  // writer's last whole line, the step and eval lines it did not write, as this rank logged them (its group's
  // loss), and their TensorBoard mirror in a new event file that starts after this step.
  const auto dir = std::filesystem::path(s_.cfg.out);
  const bool took_over = !metrics_.is_open();
  if (took_over) {
    if (!s_.cfg.tensorboard.empty()) metrics_.mirror_to_tensorboard(s_.cfg.tensorboard, step);
    reopen_metrics_after(std::numeric_limits<int64_t>::max());
  }
  write_file_atomically((dir / "config.json").string(), resolved_.dump(2) + "\n");
  metrics_.write({{"type", "group_lost"},
                  {"step", step},
                  {"lost_group_ids", lost_ids},
                  {"lost_ranks", lost_ranks},
                  {"group_ids", kept_ids},
                  {"group_sizes", kept.layout.group_sizes()},
                  {"recover_s", seconds}});
  if (took_over) metrics_.write_held();
  std::fprintf(stderr, "fedshard: lost rank(s) %s at step %lld: groups %s left the job, groups %s go on (%.2f s)\n",
               lost_ranks_json.c_str(), static_cast<long long>(step), lost_json.c_str(),
               kept_json.c_str(), seconds);
}

void Trainer::rejoin(int64_t step) {
  const auto t0 = Clock::now();
  const comm::Layout old = topo_->layout();
  JoinPlan plan;
  plan.step = step;
  plan.tokens = tokens_through(step);
  plan.syncs = rounds_->syncs();
  plan.group_sizes = old.group_sizes();
  plan.group_ids = s_.group_ids;
  plan.launch_ranks = launch_ranks_;
  plan.launch_world = comm::MpiRuntime::get().world_size();
  plan.peak_flops = peak_flops_;
  std::vector<int> joined_ids, joined_ranks;
  for (const auto& [id, ranks] : lost_groups_) {
    plan.group_sizes.push_back(static_cast<int>(ranks.size()));
    plan.group_ids.push_back(id);
    joined_ids.push_back(id);
    joined_ranks.insert(joined_ranks.end(), ranks.begin(), ranks.end());
  }
  lost_groups_.clear();
  plan.launch_ranks.insert(plan.launch_ranks.end(), joined_ranks.begin(), joined_ranks.end());
  const std::string ids_json = nlohmann::json(joined_ids).dump();
  // Where the replacements do not join, the job goes on without them and says why.
  const auto not_joined = [&](const std::string& why) {
    if (topo_->world_rank() != 0) return;
    std::fprintf(stderr, "fedshard: groups %s did not rejoin after step %lld (%s); going on without them\n",
                 ids_json.c_str(), static_cast<long long>(step), why.c_str());
    metrics_.write({{"type", "rejoin_failed"}, {"step", step}, {"group_ids", joined_ids}, {"error", why}});
  };
  auto grown = comm::spawn_replacements(base_, static_cast<int>(joined_ranks.size()), comm::MpiRuntime::get().argv());
  if (grown.comm == MPI_COMM_NULL) return not_joined(grown.error);
  comm::broadcast_text(plan.to_json().dump(), 0, grown.comm);
  comm::MpiRuntime::get().count_host_ranks(grown.comm, comm::MpiRuntime::get().world_rank());
  // The replacements' start-up (prepare_joining) may fail on their node: then they have left.
  if (!comm::all_succeeded(grown.comm, true)) {
    MPI_Comm_free(&grown.comm);
    return not_joined("a replacement could not start up");
  }
  // The run's tokens so far stay counted through this step; the world's tokens per step grow from the next.
  tokens_before_start_ = plan.tokens;
  start_step_ = step + 1;
  launch_ranks_ = plan.launch_ranks;
  const comm::Layout layout(plan.group_sizes, old.shard_spec());
  rebuild(layout, plan.group_ids, grown.comm);
  // Every replacement takes the state of the rank at its position in the first group (the donor). A rank lost
  // meanwhile, a replacement or a kept one, makes every replacement leave and the groups that lost a rank too.
  bool sent = true;
  int64_t sent_bytes = 0, state_bytes = 0;
  try {
    maybe_inject_fault(FaultPoint::Join, step);
    for (int r = old.world(); r < layout.world(); ++r)
      if (topo_->world_rank() == layout.first_rank(0) + layout.coords(r).position)
        sent_bytes += send_state(engine_, base_, r);
    // Inside the agreement below: a member waiting here on a dead one is released as from a receive.
    comm::mpi_check(MPI_Reduce(&sent_bytes, &state_bytes, 1, MPI_INT64_T, MPI_SUM, 0, base_), "MPI_Reduce");
  } catch (const comm::PeerLost&) {
    sent = false;
  }
  if (!comm::all_exchanged(base_, sent)) {
    not_joined("a rank was lost during the join");
    return recover(step);
  }
  if (s_.cfg.audit) audit_join(step, sent_bytes);
  const double seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  if (topo_->world_rank() != 0) return;
  write_file_atomically((std::filesystem::path(s_.cfg.out) / "config.json").string(), resolved_.dump(2) + "\n");
  metrics_.write({{"type", "group_joined"},
                  {"step", step},
                  {"joined_group_ids", joined_ids},
                  {"joined_ranks", joined_ranks},
                  {"group_ids", plan.group_ids},
                  {"group_sizes", plan.group_sizes},
                  {"state_bytes", state_bytes},
                  {"join_s", seconds}});
  std::fprintf(stderr, "fedshard: groups %s rejoined after step %lld: %zu replacement rank(s) started, groups %s "
               "go on (%.2f s)\n", ids_json.c_str(), static_cast<long long>(step), joined_ranks.size(),
               nlohmann::json(plan.group_ids).dump().c_str(), seconds);
}

void Trainer::join(const JoinPlan& plan) {
  const auto& layout = topo_->layout();
  start_step_ = plan.step + 1;
  tokens_before_start_ = plan.tokens;
  rounds_->restore(plan.step, /*steps_since_sync=*/0, plan.syncs, /*round_time=*/0);
  launch_ranks_ = plan.launch_ranks;
  recovered_ = true;
  bool received = true;
  int64_t received_bytes = 0;
  try {
    received_bytes = receive_state(engine_, base_, layout.first_rank(0) + topo_->coords().position);
    const int64_t none = 0;
    comm::mpi_check(MPI_Reduce(&none, nullptr, 1, MPI_INT64_T, MPI_SUM, 0, base_), "MPI_Reduce");
  } catch (const comm::PeerLost&) {
    received = false;
  }
  if (!comm::all_exchanged(base_, received)) {
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
  append_audit({{"round", rounds_->syncs()}, {"step", step}, {"group", s_.group_ids.at(topo_->coords().group)},
                {"checksum", engine_.aggregator->global_checksum()}});
}

void Trainer::audit_join(int64_t step, int64_t state_bytes) {
  append_audit({{"join_step", step}, {"group", s_.group_ids.at(topo_->coords().group)},
                {"position", topo_->coords().position}, {"state_checksum", state_checksum(engine_)},
                {"state_bytes", state_bytes}});
}

void Trainer::append_audit(const nlohmann::json& line) {
  // Each rank its own file: no communication, so the audit changes no byte count and no timing of the run.
  // Named by launch rank (a replacement's: the rank it replaces), which stays when groups are lost or rejoin.
  const auto dir = std::filesystem::path(s_.cfg.out) / "audit";
  std::filesystem::create_directories(dir);
  char name[40];
  std::snprintf(name, sizeof name, "rank-%05d.jsonl", comm::MpiRuntime::get().world_rank());
  std::ofstream f(dir / name, std::ios::app);
  f << line.dump() << "\n";
  FS_CHECK(f.good(), "cannot write ", (dir / name).string());
}

void Trainer::save(const StepResult& r) {
  const auto& cfg = s_.cfg;
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
    const auto& steps = r.round.steps;
    const bool differ = std::any_of(steps.begin(), steps.end(), [&](int64_t x) { return x != steps.front(); });
    if (rounds_->timed() || differ || !r.round.issued) {
      st.step = steps.front();
      st.group_steps = steps;
    }
    if (!r.round.issued) st.pending_rounds = r.round.at_round;
  }
  save_checkpoint(cfg.out, static_cast<int>(cfg.checkpoint_keep), st, resolved_, s_.model, *topo_, *sharded_,
                  *engine_.optimizer, engine_.aggregator.get());
  checkpoint_wanted_ = false;
}

void Trainer::log_step(const StepResult& r) {
  // Tokens of the virtual world, processed by the real ranks: throughput is this box's.
  const double tok_per_s = static_cast<double>(world_tokens_per_step()) / r.seconds;
  const double rank_tok_per_s = tok_per_s / topo_->layout().world();
  const double mfu = 3.0 * s_.model.forward_flops_per_token(s_.cfg.seq_len) * rank_tok_per_s / peak_flops_;
  nlohmann::json bytes;
  for (comm::Tier tier : comm::kTiers) bytes[comm::tier_metric_key(tier)] = r.sent[static_cast<int>(tier)];
  metrics_.write({{"type", "step"},
                  {"step", r.step},
                  {"tokens", tokens_through(r.step)},
                  {"loss", r.loss},
                  {"lr", r.lr},
                  {"grad_norm", r.grad_norm},
                  {"time_s",
                   {{"total", r.seconds},
                    {"compute", r.seconds - r.comm.exposed_wait_seconds},
                    {"comm_exposed", r.comm.exposed_wait_seconds},
                    {"optimizer", r.optimizer_seconds},
                    {"round", r.round_seconds},
                    {"comm_real", comm_seconds(r.comm, false)},
                    {"comm_emulated_hold", comm_seconds(r.comm, true)}}},
                  {"bytes", bytes},
                  {"tok_per_s", tok_per_s},
                  {"mfu", mfu},
                  {"aggregated", r.aggregated},
                  {"profiled", r.profiled}});
}

void Trainer::log_eval(int64_t step, const std::string& model_kind, comm::Communicator& comm) {
  write_eval(step, model_kind, evaluate(*sharded_, *s_.val, s_.cfg.eval_windows, s_.cfg.batch_size, comm));
}

void Trainer::log_global_eval(int64_t step) {
  // Written once, after every rank agreed that the evaluation succeeded.
  EvalResult r;
  surviving(step, [&] {
    maybe_inject_fault(FaultPoint::Eval, step);
    r = evaluate(*sharded_, *s_.val, s_.cfg.eval_windows, s_.cfg.batch_size, topo_->world());
  });
  write_eval(step, "global", r);
}

void Trainer::write_eval(int64_t step, const std::string& model_kind, const EvalResult& r) {
  if (model_kind == "global") {
    last_val_loss_ = r.loss;
    last_val_ppl_ = r.ppl;
  }
  metrics_.write({{"type", "eval"},
                  {"step", step},
                  {"tokens", tokens_through(step)},
                  {"val_loss", r.loss},
                  {"val_ppl", r.ppl},
                  {"val_tokens", r.tokens},
                  {"wall_s", std::chrono::duration<double>(Clock::now() - run_start_).count()},
                  {"model", model_kind}});
}

nlohmann::json Trainer::link_summary() const {
  nlohmann::json j = nullptr;
  for (comm::Tier t : comm::kTiers)
    if (auto l = comm::LinkEmulator::instance().link(t)) j[comm::tier_metric_key(t)] = comm::describe(*l);
  return j;
}

TrainSummary Trainer::run() {
  const auto& cfg = s_.cfg;
  Progress progress(cfg.steps);
  const auto start = Clock::now();
  run_start_ = start;
  const auto comm_start = comm::Ledger::instance().snapshot();
  bool eval_due = false;
  const bool timed = rounds_ && rounds_->timed();
  int64_t last_step = cfg.steps;
  // What follows a step (or, after a resume, the round this group stopped at): evaluation, checkpoint, the
  // stop or the end. `replayed`: that step was trained and logged before the checkpoint.
  enum class Next { Continue, Stop, End };
  auto conclude = [&](StepResult& r, bool replayed) {
    const int64_t step = r.step;
    // Time-based rounds end the job at the round where the first group reaches train.steps.
    const bool last = timed ? r.aggregated && r.round.any.last : step == cfg.steps;
    if (!replayed) {
      for (comm::Tier t : comm::kTiers) step_bytes_[static_cast<int>(t)] += r.sent[static_cast<int>(t)];
      if (step > start_step_ && !r.profiled) {  // the first step includes one-time allocation and warm-up
        step_seconds_sum_ += r.seconds;
        timed_tokens_ += static_cast<double>(world_tokens_per_step());  // the world may change (a lost group)
      }
      if (step % cfg.log_every == 0 || last) log_step(r);
    }
    if (timed && r.aggregated)
      metrics_.write({{"type", "round"}, {"step", step}, {"tokens", tokens_through(step)}, {"group_steps", r.round.steps}});
    // Under federation only an aggregation produces the global model: a due evaluation waits for the next.
    // Under time-based rounds the groups' steps differ, so what is due is what the round agreed.
    if (timed)
      eval_due = r.aggregated && (r.round.any.evaluate || last || cfg.eval_after_sync);
    else
      eval_due = eval_due || last || (cfg.eval_every > 0 && step % cfg.eval_every == 0) ||
                 (r.aggregated && cfg.eval_after_sync);
    if (eval_due && (!rounds_ || r.aggregated)) {
      // Under overlap no step ends with the groups equal: the global model is swapped in to be evaluated.
      if (s_.cfg.overlap != "none")
        engine_.aggregator->with_global_model([&] { log_eval(step, "global", topo_->world()); });
      else
        log_global_eval(step);
      eval_due = false;
      eval_wanted_ = false;
    }
    if (topo_->world_rank() == 0 && !replayed) {
      const double tok_per_s = static_cast<double>(world_tokens_per_step()) / r.seconds;
      char extra[64] = "";
      if (last_val_ppl_ > 0) std::snprintf(extra, sizeof extra, "val ppl %.3f", last_val_ppl_);
      progress.update(step, r.loss, r.lr, tok_per_s, extra);
    }
    // A stop is agreed by every rank at the same point: at an agreement, or every step with one group.
    const bool checkpoint = !s_.emulation.active() && (r.stop || (timed ? r.aggregated && (r.round.any.checkpoint || last)
                                             : (cfg.checkpoint_every > 0 && step % cfg.checkpoint_every == 0) || last));
    if (checkpoint) surviving(step, [&] { save(r); });
    if (r.stop) {
      progress.finish();
      if (profiler_) profiler_->finish();
      if (topo_->world_rank() == 0) {
        metrics_.write({{"type", "preempted"}, {"step", step}, {"signal", preemption_signal()}});
        std::fprintf(stderr, "fedshard: preempted: stopped after step %lld %s; exit %d (requeue)\n",
                     static_cast<long long>(step),
                     s_.emulation.active() ? "(emulated: no checkpoint)" : "with a checkpoint", kPreemptedExit);
      }
      return Next::Stop;
    }
    return last ? Next::End : Next::Continue;
  };
  // A rank whose group lost a rank leaves (Trainer::recover), saying why.
  const auto left = [](const LeftJob& e, int64_t step) {
    std::fprintf(stderr, "fedshard: %s\n", e.message.c_str());
    TrainSummary summary;
    summary.steps = step;
    summary.left = true;
    return summary;
  };
  Next next = Next::Continue;
  if (pending_round_) {
    StepResult r;
    r.step = start_step_ - 1;
    try {
      federate(r.step, /*nonfinite=*/false, r);
      next = conclude(r, /*replayed=*/true);
    } catch (const LeftJob& e) {
      return left(e, r.step);
    }
    if (next == Next::End) last_step = r.step;
  }
  for (int64_t step = start_step_; step <= cfg.steps && next == Next::Continue; ++step) {
    if (profiler_) profiler_->before_step(step);
    StepResult r;
    try {
      try {
        r = train_step(step);
      } catch (const comm::PeerLost&) {
        if (!recoverable()) throw;
        // Lost in a group's per-step collectives: that group's ranks leave; a kept rank cannot take its step
        // again (its optimizer may have stepped).
        recover(step);
        throw Error(cat("a rank was lost during step ", step, ", where this rank's group cannot take the step again ",
                        "(in-job recovery covers losses that the kept groups see at a federation round); resume ",
                        "from the last checkpoint"));
      }
      r.profiled = profiler_ && profiler_->after_step(step);
      next = conclude(r, /*replayed=*/false);
      if (next == Next::Continue && !lost_groups_.empty() && s_.cfg.rejoin_after > 0 &&
          rounds_->steps_since_sync() == 0 && rounds_->syncs() >= rejoin_round_)
        rejoin(step);
    } catch (const LeftJob& e) {
      return left(e, step);
    }
    if (next != Next::Continue) last_step = step;
  }
  if (next == Next::Stop) {
    TrainSummary summary;
    summary.steps = last_step;
    summary.preempted = true;
    return summary;
  }
  progress.finish();
  if (profiler_) profiler_->finish();

  const double wall = std::chrono::duration<double>(Clock::now() - start).count();
  const auto comm_total = comm::Ledger::instance().snapshot() - comm_start;
  // Peak memory of every rank (host RSS, and the caching allocator's peak on a GPU), for the memory
  // comparison between strategies.
  const at::Device device = sharded_->options().device;
  auto peaks = at::zeros({topo_->layout().world(), 2}, at::TensorOptions().dtype(at::kDouble).device(device));
  peaks[topo_->world_rank()][0] = peak_rss_mb();
  if (device.is_cuda()) peaks[topo_->world_rank()][1] = device_peak_allocated_bytes(device.index()) / (1024.0 * 1024.0);
  topo_->world().all_reduce(peaks, comm::ReduceOp::Sum, comm::Traffic::Control)->wait();
  peaks = peaks.to(at::kCPU);
  // What each rank's training steps sent per tier: groups of different sizes send different amounts.
  auto sent = at::zeros({topo_->layout().world(), comm::kNumTiers}, peaks.options().device(device));
  for (comm::Tier t : comm::kTiers) sent[topo_->world_rank()][static_cast<int>(t)] = step_bytes_[static_cast<int>(t)];
  topo_->world().all_reduce(sent, comm::ReduceOp::Sum, comm::Traffic::Control)->wait();
  sent = sent.to(at::kCPU);

  TrainSummary summary;
  summary.steps = last_step;
  summary.final_val_loss = last_val_loss_;
  summary.final_val_ppl = last_val_ppl_;
  summary.unigram_val_ppl = s_.train->manifest().unigram_val_ppl.value_or(0.0);
  const double step_tokens = static_cast<double>(world_tokens_per_step());
  summary.tok_per_s = timed_tokens_ > 0 ? timed_tokens_ / step_seconds_sum_ : step_tokens / wall;
  summary.reporter = topo_->world_rank() == 0;
  if (topo_->world_rank() == 0) {
    // Counted at the MPI sends, next to the ring formula's figure, per tier and per communicator (rank 0's).
    nlohmann::json bytes, formula, by_comm;
    for (comm::Tier tier : comm::kTiers) {
      bytes[comm::tier_metric_key(tier)] = comm_total.sent_bytes(tier);
      formula[comm::tier_metric_key(tier)] = comm_total.formula_bytes(tier);
    }
    for (const auto& [name, t] : comm_total.by_comm)
      by_comm[name] = {{"sent_bytes", t.sent_bytes}, {"formula_bytes", t.formula_bytes}, {"calls", t.calls},
                       {"seconds", t.seconds}};
    const auto per_rank = [&](int column) {
      const at::Tensor c = peaks.select(1, column).contiguous();
      return std::vector<double>(c.data_ptr<double>(), c.data_ptr<double>() + c.numel());
    };
    const std::vector<double> rss_v = per_rank(0);
    nlohmann::json sent_by_rank = nlohmann::json::array();
    for (int r = 0; r < topo_->layout().world(); ++r) {
      nlohmann::json b;
      for (comm::Tier t : comm::kTiers) b[comm::tier_metric_key(t)] = sent[r][static_cast<int>(t)].item<double>();
      sent_by_rank.push_back(b);
    }
    nlohmann::json summary_record = {{"type", "summary"},
                    {"strategy", s_.strategy.name()},
                    {"world", s_.emulation.virtual_layout.world()},
                    {"group_size", resolved_["resolved"]["group_size"]},
                    {"group_sizes", s_.emulation.virtual_layout.group_sizes()},
                    {"emulation", resolved_["resolved"]["emulation"]},
                    {"shard_size", resolved_["resolved"]["shard_size"]},
                    {"steps", last_step},
                    {"tokens", tokens_through(last_step)},
                    {"wall_s", wall},
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
                    {"peak_rss_mb", rss_v},
                    {"peak_rss_mb_max", *std::max_element(rss_v.begin(), rss_v.end())},
                    {"peak_flops_per_rank", peak_flops_},
                    {"link_emulation", link_summary()}};
    if (device.is_cuda()) {
      const std::vector<double> gpu_v = per_rank(1);
      summary_record["peak_gpu_mb"] = gpu_v;
      summary_record["peak_gpu_mb_max"] = *std::max_element(gpu_v.begin(), gpu_v.end());
    }
    metrics_.write(summary_record);
  }
  return summary;
}

}  // namespace fedshard::train
