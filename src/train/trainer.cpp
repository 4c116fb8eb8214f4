#include "train/trainer.h"

#include <ATen/Context.h>
#include <ATen/Parallel.h>
#include <ATen/detail/CUDAHooksInterface.h>
#include <sys/resource.h>
#include <torch/version.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <sstream>
#include <thread>

#include "comm/ledger.h"
#include "comm/link_emulation.h"
#include "comm/mpi_runtime.h"
#include "model/hf_adapter.h"
#include "model/layers.h"
#include "data/manifest.h"
#include "train/evaluator.h"
#include "train/fault_injection.h"
#include "train/progress.h"
#include "util/build_info.h"
#include "util/error.h"
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

double peak_rss_mb() {
  struct rusage ru {};
  getrusage(RUSAGE_SELF, &ru);
  return static_cast<double>(ru.ru_maxrss) / 1024.0;
}

}  // namespace

TrainSetup prepare_training(const TrainConfig& cfg, int world_size, int world_rank) {
  TrainSetup s;
  s.cfg = cfg;
  s.strategy = parallel::parse_strategy(cfg.strategy);
  s.topology = parallel::topology_spec(s.strategy, world_size, static_cast<int>(cfg.group_size),
                                       static_cast<int>(cfg.shard_size), static_cast<int>(cfg.ranks_per_node));
  const bool nccl_built = built_with_cuda();
  FS_CHECK(cfg.device == "cpu" || nccl_built, "model.device = cuda but this fedshard was built without CUDA (against ",
           "a CPU LibTorch); build it against a CUDA LibTorch (docs/cuda.md)");
  FS_CHECK(cfg.device == "cpu" || visible_gpus() > 0, "model.device = cuda but no GPU is visible to this process (",
           build_description(), ")");
  FS_CHECK(cfg.backend != "nccl" || nccl_built, "parallel.backend = nccl needs a build against a CUDA LibTorch");
  s.topology.backend = cfg.backend == "auto" ? (cfg.device == "cuda" && nccl_built ? "nccl" : "mpi") : cfg.backend;
  s.model = model::preset(cfg.model);
  s.model.attention = model::parse_attention_kernel(cfg.attention);
  FS_CHECK(cfg.fused != "on" || fused_adamw_available(), "optim.fused = on needs LibTorch >= 2.4 (this build has ",
           TORCH_VERSION, "); use auto or off");
  FS_CHECK(cfg.fused != "on" || cfg.optimizer == "adamw", "optim.fused = on applies to adamw only (optim.name = ",
           cfg.optimizer, ")");
  const auto manifest = data::Manifest::load(cfg.data_dir);
  if (cfg.n_layers > 0) s.model.n_layers = cfg.n_layers;
  if (cfg.tie_embeddings != "preset") s.model.tie_embeddings = cfg.tie_embeddings == "true";
  const int64_t data_vocab = manifest.tokenizer.vocab_size;
  // An explicit model.vocab_size may pad the tokenizer's vocabulary (rows no token uses, as llm.c pads GPT-2's
  // 50257 to 50304); a preset's own vocabulary must be the data's.
  if (cfg.vocab_size > 0) {
    FS_CHECK(cfg.vocab_size >= data_vocab, "model.vocab_size = ", cfg.vocab_size, " is smaller than the vocab ",
             data_vocab, " of tokenizer ", manifest.tokenizer.spec, " that ", cfg.data_dir, " was prepared with");
    s.model.vocab_size = cfg.vocab_size;
  } else {
    if (s.model.vocab_size == 0) s.model.vocab_size = data_vocab;
    FS_CHECK(s.model.vocab_size == data_vocab, "model ", cfg.model, " has vocab ", s.model.vocab_size, " but ",
             cfg.data_dir, " was prepared with tokenizer ", manifest.tokenizer.spec, " (vocab ", data_vocab,
             "); set model.vocab_size or prepare the data with a matching tokenizer");
  }
  s.model.validate();
  FS_CHECK(cfg.seq_len <= s.model.max_seq_len, "data.seq_len ", cfg.seq_len, " exceeds the max_seq_len ",
           s.model.max_seq_len, " of model ", cfg.model);
  s.train = std::make_shared<data::TokenDataset>(cfg.data_dir, "train", cfg.seq_len, s.model.vocab_size);
  s.val = std::make_shared<data::TokenDataset>(cfg.data_dir, "val", cfg.seq_len, s.model.vocab_size);
  const auto layout = comm::Layout::resolve(world_size, s.topology);
  s.partition = data::partition_windows(*s.train, cfg.partition, layout.groups(), cfg.seed);
  if (world_rank == 0) ensure_writable_dir(cfg.out);
  validate_fault_plan();
  if (!cfg.resume.empty()) {
    if (auto dir = find_checkpoint(cfg.resume, cfg.out)) {
      // Same layout: this rank reads (and verifies) its own file; re-slicing reads them all.
      auto meta = load_checkpoint_meta(*dir, s.model, /*verify_all_files=*/false, world_rank);
      if (!same_layout(meta, layout, s.strategy.name())) meta = load_checkpoint_meta(*dir, s.model, true, world_rank);
      FS_CHECK(meta.step < cfg.steps, "checkpoint ", *dir, " is at step ", meta.step, ", train.steps is ", cfg.steps,
               ": nothing left to train (raise --steps)");
      s.resume = std::move(meta);
    }
  }
  if (!cfg.init_from.empty() && !s.resume) {
    const auto dir = std::filesystem::path(cfg.init_from);
    nlohmann::json hf;
    try {
      hf = nlohmann::json::parse(read_file((dir / "config.json").string()));
    } catch (const Error&) {
      throw;
    } catch (const std::exception& e) {
      throw Error(cat((dir / "config.json").string(), ": not valid JSON (", e.what(), ")"));
    }
    model::check_hf_config(hf, s.model, (dir / "config.json").string());
    const SafetensorsFile weights((dir / "model.safetensors").string());
    for (const auto& u : unit_layout(s.model))
      for (const auto& e : u.entries) {
        const auto name = model::to_hf_name(e.name);
        FS_CHECK(weights.contains(name), weights.path(), ": no tensor '", name, "'");
        FS_CHECK(weights.entries().at(name).shape == e.shape, weights.path(), ": tensor '", name,
                 "' has the wrong shape for model ", s.model.name);
      }
    s.init_from = dir.string();
  }
  return s;
}

struct Trainer::StepResult {
  int64_t step = 0;
  bool aggregated = false;
  double loss = 0;
  double lr = 0;
  double grad_norm = 0;
  double seconds = 0;
  double optimizer_seconds = 0;
  comm::LedgerSnapshot comm;
};

Trainer::Trainer(TrainSetup setup) : s_(std::move(setup)) {
  const auto& cfg = s_.cfg;
  auto& mpi = comm::MpiRuntime::get();
  const auto [host_rank, host_ranks] = mpi.host_rank_and_size();
  const int threads = cfg.threads > 0 ? static_cast<int>(cfg.threads)
                                      : std::max(1, static_cast<int>(std::thread::hardware_concurrency()) / host_ranks);
  at::set_num_threads(threads);
  at::Device device = at::kCPU;
  if (cfg.device == "cuda") {
    const int gpus = static_cast<int>(at::detail::getCUDAHooks().getNumGPUs());
    device = at::Device(at::kCUDA, static_cast<c10::DeviceIndex>(host_rank % gpus));
    // NCCL refuses two ranks on one GPU: that needs the host-staged MPI backend.
    if (s_.topology.backend == "nccl" && host_ranks > gpus)
      throw Error(cat(host_ranks, " ranks share ", gpus, " GPU(s) on a host: NCCL needs one rank per GPU; use "
                      "--set parallel.backend=mpi (host-staged collectives)"))
          .reported_by(mpi.world_rank() == 0)
          .everywhere(true);
    s_.topology.device = device.index();
  }
  const std::pair<comm::Tier, const std::string*> links[] = {{comm::Tier::Node, &cfg.link_node},
                                                             {comm::Tier::InterNode, &cfg.link_inter_node},
                                                             {comm::Tier::InterGroup, &cfg.link_inter_group}};
  for (const auto& [tier, spec] : links)
    if (!spec->empty()) comm::LinkEmulator::instance().set(tier, comm::parse_link_spec(*spec));
  topo_ = std::make_unique<comm::Topology>(s_.topology);
  const auto& layout = topo_->layout();

  parallel::ShardingOptions opts;
  opts.master_dtype = dtype_of(cfg.dtype);
  opts.compute_dtype = dtype_of(cfg.compute_dtype);
  opts.reduce_dtype = dtype_of(cfg.reduce_dtype);
  opts.recompute = cfg.activation_checkpointing == "on" ||
                   (cfg.activation_checkpointing == "auto" && layout.shard_size > 1);
  opts.reshard_after_forward = cfg.reshard_after_forward;
  opts.device = device;
  model_ = std::make_unique<model::Llama>(s_.model, opts.master_dtype, /*materialize=*/false);
  if (!s_.init_from.empty()) {
    const SafetensorsFile weights((std::filesystem::path(s_.init_from) / "model.safetensors").string());
    sharded_ = std::make_unique<parallel::ShardedModel>(
        *model_, topo_->shard(), topo_->replica(), opts, layout.group_size,
        [&weights](const model::ParamSlot& slot) { slot.tensor->copy_(weights.tensor(model::to_hf_name(slot.name))); });
  } else {
    sharded_ = std::make_unique<parallel::ShardedModel>(*model_, topo_->shard(), topo_->replica(), opts,
                                                        layout.group_size, cfg.seed);
  }

  std::vector<ParamSlice> slices;
  for (auto& u : sharded_->units())
    slices.push_back({u->flat().shard(), u->flat().grad(), decay_mask(u->flat(), cfg.decay_norms_and_embeddings)});
  OptimizerConfig oc;
  oc.name = cfg.optimizer;
  oc.beta1 = cfg.beta1;
  oc.beta2 = cfg.beta2;
  oc.eps = cfg.eps;
  oc.weight_decay = cfg.weight_decay;
  oc.momentum = cfg.momentum;
  oc.fused = cfg.optimizer == "adamw" && (cfg.fused == "on" || (cfg.fused == "auto" && fused_adamw_available()));
  optimizer_ = make_optimizer(oc, std::move(slices));

  schedule_.peak = cfg.lr;
  schedule_.floor = cfg.lr * cfg.min_lr_ratio;
  schedule_.total = cfg.steps;
  schedule_.warmup = cfg.warmup_steps >= 0 ? cfg.warmup_steps : cfg.steps / 10;

  if (s_.strategy.federated) {
    federation::FederationOptions fo;
    fo.outer = {cfg.outer_optimizer, cfg.outer_lr, cfg.outer_momentum};
    fo.inner_state = cfg.inner_state;
    fo.reduce_dtype = opts.reduce_dtype;
    aggregator_ = std::make_unique<federation::Aggregator>(*sharded_, *topo_, *optimizer_, fo);
  }

  // iid: every rank reads disjoint windows of one global stream (rank r takes slot r of each step), so
  // strategies with and without federation read the same data. Otherwise each group reads its own pool,
  // its ranks taking disjoint slots of it.
  const auto& partition = s_.partition;
  const int batch = static_cast<int>(cfg.batch_size);
  if (partition.global_stream) {
    std::vector<int64_t> pool(s_.train->num_windows());
    for (int64_t i = 0; i < static_cast<int64_t>(pool.size()); ++i) pool[i] = i;
    sampler_ = std::make_unique<data::WindowSampler>(std::move(pool), layout.world, batch, cfg.seed, /*stream=*/0);
    sampler_reader_ = topo_->world_rank();
  } else {
    sampler_ = std::make_unique<data::WindowSampler>(partition.pools[topo_->group_index()], layout.group_size, batch,
                                                     cfg.seed, /*stream=*/1 + topo_->group_index());
    sampler_reader_ = topo_->position();
  }

  if (s_.resume) {
    const auto st = restore_checkpoint(*s_.resume, *topo_, s_.strategy.name(), *sharded_, *optimizer_, aggregator_.get());
    start_step_ = st.step + 1;
    steps_since_sync_ = st.steps_since_sync;
  }

  peak_flops_ = cfg.peak_flops > 0 ? cfg.peak_flops : measure_matmul_flops(device);
  resolved_ = cfg.to_json();
  resolved_["resolved"] = {{"strategy", s_.strategy.name()},
                            {"world", layout.world},
                            {"group_size", layout.group_size},
                            {"shard_size", layout.shard_size},
                            {"groups", layout.groups()},
                            {"replicas_per_group", layout.replicas()},
                            {"nodes", topo_->nodes()},
                            {"emulated_nodes", topo_->emulated_nodes()},
                            {"threads_per_rank", threads},
                            {"activation_checkpointing", opts.recompute},
                            {"fused_adamw", oc.fused},
                            {"attention", cfg.attention == "math" || !model::sdpa_available() ? "math" : "sdpa"},
                            {"parameters", s_.model.param_count()},
                            {"vocab_size", s_.model.vocab_size},
                            {"warmup_steps", schedule_.warmup},
                            {"peak_flops_per_rank", peak_flops_}};
  if (topo_->world_rank() == 0) {
    write_file_atomically((std::filesystem::path(cfg.out) / "config.json").string(), resolved_.dump(2) + "\n");
    if (s_.resume) {
      reopen_metrics_after(s_.resume->step);
      metrics_.write({{"type", "resume"},
                      {"step", s_.resume->step},
                      {"checkpoint", s_.resume->dir},
                      {"same_layout", same_layout(*s_.resume, layout, s_.strategy.name())}});
      std::fprintf(stderr, "fedshard: resuming from %s (step %lld)\n", s_.resume->dir.c_str(),
                   static_cast<long long>(s_.resume->step));
    } else {
      metrics_.open((std::filesystem::path(cfg.out) / "metrics.jsonl").string(), /*append=*/false);
    }
    std::fprintf(stderr, "fedshard: %s on %s; model %s (%s parameters); threads per rank %d\n",
                 s_.strategy.name().c_str(), topo_->describe().c_str(), s_.model.name.c_str(),
                 model::with_commas(s_.model.param_count()).c_str(), threads);
  }
}

Trainer::~Trainer() = default;

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

Trainer::StepResult Trainer::train_step(int64_t step) {
  const auto t0 = Clock::now();
  const auto comm0 = comm::Ledger::instance().snapshot();
  const int64_t t = s_.cfg.seq_len;
  const auto device = sharded_->options().device;
  auto batch = s_.train->batch(sampler_->windows(step - 1, sampler_reader_));
  if (!device.is_cpu()) batch = s_.cfg.pin_memory ? batch.pin_memory().to(device, /*non_blocking=*/true) : batch.to(device);
  auto logits = sharded_->forward(batch.narrow(1, 0, t));
  auto loss = model::next_token_loss(logits, batch.narrow(1, 1, t));
  loss.backward();
  sharded_->wait_grads();
  maybe_inject_fault(FaultPoint::Step, topo_->world_rank(), step);

  StepResult r;
  r.step = step;
  // With defer_host_sync the norm and the loss stay on the device until the end of the step, so the host
  // queues the optimizer and the aggregation without waiting for the backward pass to finish.
  const auto grad_norm = sharded_->clip_grad_norm(s_.cfg.grad_clip);
  if (!s_.cfg.defer_host_sync) r.grad_norm = grad_norm.item<double>();
  r.lr = schedule_.at(step);
  const auto opt0 = Clock::now();
  optimizer_->step(r.lr);
  r.optimizer_seconds = std::chrono::duration<double>(Clock::now() - opt0).count();
  ++steps_since_sync_;
  if (aggregator_ && (step % s_.cfg.sync_every == 0 || step == s_.cfg.steps)) {
    if (s_.cfg.eval_group_model) log_eval(step, "group", topo_->group());
    // Weight: tokens this group processed since the last sync.
    const double tokens = static_cast<double>(steps_since_sync_ * topo_->layout().group_size *
                                              s_.cfg.batch_size * s_.cfg.seq_len);
    aggregator_->sync(tokens);
    steps_since_sync_ = 0;
    r.aggregated = true;
  }

  // The logged loss is the mean over this rank's federation group: no per-step traffic crosses groups.
  auto l = loss.detach().to(at::kDouble).reshape({1}).clone();
  if (inject_nan(topo_->world_rank(), step)) l.fill_(std::nan(""));
  topo_->group().all_reduce(l, comm::ReduceOp::Mean, comm::Traffic::Control)->wait();
  r.loss = l.item<double>();
  if (s_.cfg.defer_host_sync) r.grad_norm = grad_norm.item<double>();
  if (!std::isfinite(r.loss))
    throw Error(cat("loss is ", r.loss, " at step ", step, " in group ", topo_->group_index(),
                    "; stopping (lower optim.lr or enable optim.grad_clip)"))
        .reported_by(topo_->position() == 0)
        .everywhere(topo_->layout().groups() == 1);
  r.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  r.comm = comm::Ledger::instance().snapshot() - comm0;
  return r;
}

void Trainer::log_step(const StepResult& r) {
  const auto& layout = topo_->layout();
  const double step_tokens = static_cast<double>(layout.world * s_.cfg.batch_size * s_.cfg.seq_len);
  const double tok_per_s = step_tokens / r.seconds;
  const double rank_tok_per_s = tok_per_s / layout.world;
  const double mfu = 3.0 * s_.model.forward_flops_per_token(s_.cfg.seq_len) * rank_tok_per_s / peak_flops_;
  nlohmann::json bytes;
  for (comm::Tier tier : comm::kTiers) bytes[comm::tier_metric_key(tier)] = r.comm.bus_bytes(tier);
  metrics_.write({{"type", "step"},
                  {"step", r.step},
                  {"tokens", static_cast<int64_t>(step_tokens) * r.step},
                  {"loss", r.loss},
                  {"lr", r.lr},
                  {"grad_norm", r.grad_norm},
                  {"time_s",
                   {{"total", r.seconds},
                    {"compute", r.seconds - r.comm.exposed_wait_seconds},
                    {"comm_exposed", r.comm.exposed_wait_seconds},
                    {"optimizer", r.optimizer_seconds},
                    {"comm_real", comm_seconds(r.comm, false)},
                    {"comm_emulated_hold", comm_seconds(r.comm, true)}}},
                  {"bytes", bytes},
                  {"tok_per_s", tok_per_s},
                  {"mfu", mfu},
                  {"aggregated", r.aggregated}});
}

void Trainer::log_eval(int64_t step, const std::string& model_kind, comm::Communicator& comm) {
  const auto r = evaluate(*sharded_, *s_.val, s_.cfg.eval_windows, s_.cfg.batch_size, comm);
  if (model_kind == "global") {
    last_val_loss_ = r.loss;
    last_val_ppl_ = r.ppl;
  }
  const auto& layout = topo_->layout();
  metrics_.write({{"type", "eval"},
                  {"step", step},
                  {"tokens", layout.world * s_.cfg.batch_size * s_.cfg.seq_len * step},
                  {"val_loss", r.loss},
                  {"val_ppl", r.ppl},
                  {"val_tokens", r.tokens},
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
  const bool rank0 = topo_->world_rank() == 0;
  Progress progress(cfg.steps);
  const auto start = Clock::now();
  const auto comm_start = comm::Ledger::instance().snapshot();
  bool eval_due = false;
  for (int64_t step = start_step_; step <= cfg.steps; ++step) {
    const StepResult r = train_step(step);
    if (step > start_step_) {  // the first step includes one-time allocation and warm-up
      step_seconds_sum_ += r.seconds;
      ++timed_steps_;
    }
    if (step % cfg.log_every == 0 || step == cfg.steps) log_step(r);
    // Under federation only an aggregation produces the global model: a due evaluation waits for the next.
    eval_due = eval_due || step == cfg.steps || (cfg.eval_every > 0 && step % cfg.eval_every == 0) ||
               (r.aggregated && cfg.eval_after_sync);
    if (eval_due && (!aggregator_ || r.aggregated)) {
      log_eval(step, "global", topo_->world());
      eval_due = false;
    }
    if (rank0) {
      const double tok_per_s = static_cast<double>(topo_->layout().world * cfg.batch_size * cfg.seq_len) / r.seconds;
      char extra[64] = "";
      if (last_val_ppl_ > 0) std::snprintf(extra, sizeof extra, "val ppl %.3f", last_val_ppl_);
      progress.update(step, r.loss, r.lr, tok_per_s, extra);
    }
    if ((cfg.checkpoint_every > 0 && step % cfg.checkpoint_every == 0) || step == cfg.steps)
      save_checkpoint(cfg.out, static_cast<int>(cfg.checkpoint_keep), {step, steps_since_sync_}, resolved_, s_.model,
                      *topo_, *sharded_, *optimizer_, aggregator_.get());
  }
  progress.finish();

  const double wall = std::chrono::duration<double>(Clock::now() - start).count();
  const auto comm_total = comm::Ledger::instance().snapshot() - comm_start;
  // Peak memory of every rank, for the memory comparison between strategies.
  auto rss = at::zeros({topo_->layout().world}, at::TensorOptions().dtype(at::kDouble).device(sharded_->options().device));
  rss[topo_->world_rank()] = peak_rss_mb();
  topo_->world().all_reduce(rss, comm::ReduceOp::Sum, comm::Traffic::Control)->wait();
  rss = rss.to(at::kCPU);

  TrainSummary summary;
  summary.steps = cfg.steps;
  summary.final_val_loss = last_val_loss_;
  summary.final_val_ppl = last_val_ppl_;
  summary.unigram_val_ppl = s_.train->manifest().unigram_val_ppl.value_or(0.0);
  const double step_tokens = static_cast<double>(topo_->layout().world * cfg.batch_size * cfg.seq_len);
  summary.tok_per_s = timed_steps_ > 0 ? step_tokens * timed_steps_ / step_seconds_sum_ : step_tokens / wall;
  if (rank0) {
    nlohmann::json bytes;
    for (comm::Tier tier : comm::kTiers) bytes[comm::tier_metric_key(tier)] = comm_total.bus_bytes(tier);
    std::vector<double> rss_v(rss.data_ptr<double>(), rss.data_ptr<double>() + rss.numel());
    metrics_.write({{"type", "summary"},
                    {"strategy", s_.strategy.name()},
                    {"world", topo_->layout().world},
                    {"group_size", topo_->layout().group_size},
                    {"shard_size", topo_->layout().shard_size},
                    {"steps", cfg.steps},
                    {"tokens", static_cast<int64_t>(step_tokens) * cfg.steps},
                    {"wall_s", wall},
                    {"tok_per_s", summary.tok_per_s},
                    {"final_val_loss", summary.final_val_loss},
                    {"final_val_ppl", summary.final_val_ppl},
                    {"unigram_val_ppl", summary.unigram_val_ppl},
                    {"bytes_total", bytes},
                    {"comm_exposed_s", comm_total.exposed_wait_seconds},
                    {"peak_rss_mb", rss_v},
                    {"peak_rss_mb_max", *std::max_element(rss_v.begin(), rss_v.end())},
                    {"peak_flops_per_rank", peak_flops_},
                    {"link_emulation", link_summary()}});
  }
  return summary;
}

}  // namespace fedshard::train
