#include "train/setup.h"

#include <torch/version.h>

#include <algorithm>
#include <filesystem>

#include "comm/mpi_runtime.h"
#include "comm/rejoin.h"
#include "comm/survivors.h"
#include "data/manifest.h"
#include "data/shard_file.h"
#include "federation/schedule.h"
#include "kernels/cross_entropy.h"
#include "model/layers.h"
#include "optim/optimizer.h"
#include "parallel/slow_ranks.h"
#include "sites/site_config.h"
#include "sites/tls.h"
#include "train/cadence.h"
#include "train/option_space.h"
#include "train/preflight.h"
#include "train/resume_contract.h"
#include "util/build_info.h"
#include "util/error.h"
#include "util/hex.h"

namespace fedshard::train {

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

std::string describe_progress(const CheckpointMeta& meta) {
  if (meta.group_steps.empty()) return cat("it is at step ", meta.step);
  return cat("its groups are at steps ", nlohmann::json(meta.group_steps).dump());
}

// The model the run trains (s.model: the preset's or the Hugging Face directory's), reshaped by model.* (layers,
// tying, a padding vocabulary) and checked against the data's tokenizer and the HF directory; how it computes
// (attention, kernels, matmul dtype, cross-entropy).
void resolve_model(TrainSetup& s, const data::Manifest& manifest, const std::shared_ptr<model::HfCheckpoint>& hf) {
  const auto& cfg = s.cfg;
  const bool model_from_hf = hf && cfg.model.empty();
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
}

// float8 matmuls: _scaled_mm takes sizes in multiples of 16; the weight gradient's inner size is the micro-batch's
// tokens.
void check_float8_sizes(const TrainSetup& s) {
  if (s.model.matmul != model::MatmulDtype::Float8) return;
  const int64_t sizes[] = {s.model.dim, s.model.n_kv_heads * s.model.head_dim(), s.model.ffn_hidden_dim(),
                           s.cfg.batch_size * s.cfg.seq_len};
  for (int64_t n : sizes)
    FS_CHECK(n % 16 == 0, "model.matmul_dtype = float8 needs the linear layers' sizes (dim ", s.model.dim,
             ", kv dim ", sizes[1], ", ffn hidden ", sizes[2], ") and the tokens per micro-batch (", sizes[3],
             ") to be multiples of 16");
}

// The refused combinations that need what only the job knows (train/option_space.h).
void check_started_combination(const TrainSetup& s) {
  auto combination = started_combination(s);
  combination.gpu_capability = s.cfg.device == "cuda" ? gpu_compute_capability(s.topology.device) : 0;
  check_options(combination);
  FS_CHECK(s.cfg.rejoin_after == 0 || built_with_ulfm(), "federation.rejoin_after = ", s.cfg.rejoin_after, " needs a ",
           "build against an MPI with ULFM (README: what happens when a node dies); this one: ", build_description());
}

// The checkpoint train.resume names, read and checked (its own file, or every file to re-slice), refused when it
// ends the run; then the groups' ids and the resume contract.
void find_resume(TrainSetup& s, int world_rank) {
  const auto& cfg = s.cfg;
  if (!cfg.resume.empty()) {
    if (auto dir = find_checkpoint(cfg.resume, cfg.out)) {
      // Same layout: this rank reads (and verifies) its own file; re-slicing reads them all.
      auto meta = load_checkpoint_meta(*dir, s.model, /*verify_all_files=*/false, world_rank);
      if (!same_layout(meta, s.layout, s.strategy.name())) meta = load_checkpoint_meta(*dir, s.model, true, world_rank);
      const Cadence cadence(cfg, s.strategy.federated, /*checkpoints=*/true);
      FS_CHECK(!cadence.finished(meta.step, meta.group_steps, meta.pending_rounds), "checkpoint ", *dir,
               " ends the run: ", describe_progress(meta), ", train.steps is ", cfg.steps,
               ": nothing left to train (raise --steps)");
      s.resume = std::move(meta);
    }
  }
  choose_group_ids(s);
  if (s.resume) {
    const auto relayout = same_layout(*s.resume, s.layout, s.strategy.name()) ? Relayout::Same
                          : s.continues.empty()                                ? Relayout::Merge
                                                                               : Relayout::PerGroup;
    check_resume_contract(*s.resume, cfg, relayout);
  }
}

}  // namespace

Combination started_combination(const TrainSetup& s) {
  Combination c(s.cfg);
  c.started = true;
  c.backend = s.topology.backend;
  c.units = static_cast<int>(unit_layout(s.model).size());
  c.groups_per_rank = s.emulation.groups_per_rank;
  c.emulated = s.emulation.active();
  c.in_job_recovery = recovered_in_job(c);
  return c;
}

bool recovers_in_job(const TrainSetup& s) { return started_combination(s).in_job_recovery; }

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
  s.model = hf && cfg.model.empty() ? hf->config() : model::preset(cfg.model.empty() ? "small" : cfg.model);
  FS_CHECK(cfg.fused != "on" || optim::fused_adamw_available(), "optim.fused = on needs LibTorch >= 2.4 (this build has ",
           TORCH_VERSION, "); use auto or off");
  FS_CHECK(cfg.fused != "on" || cfg.optimizer == "adamw", "optim.fused = on applies to adamw only (optim.name = ",
           cfg.optimizer, ")");
  const auto manifest = data::Manifest::load(cfg.data_dir);
  s.tokenizer = absolute_tokenizer(manifest.tokenizer.spec);
  s.tokenizer_id = cat(data::tokenizer_kind_name(manifest.tokenizer.kind), " vocabulary ", manifest.tokenizer.vocab_size,
                       " fingerprint ", hex64(manifest.tokenizer.fingerprint));
  resolve_model(s, manifest, hf);
  check_float8_sizes(s);
  FS_CHECK(cfg.seq_len <= s.model.max_seq_len, "data.seq_len ", cfg.seq_len, " exceeds the max_seq_len ",
           s.model.max_seq_len, " of model ", s.model.name);
  s.train = std::make_shared<data::TokenDataset>(cfg.data_dir, "train", cfg.seq_len, s.model.vocab_size);
  s.val = std::make_shared<data::TokenDataset>(cfg.data_dir, "val", cfg.seq_len, s.model.vocab_size);
  if (cfg.site_data.empty()) {
    s.partition = data::partition_windows(*s.train, cfg.partition, s.emulation.virtual_layout.group_sizes(), cfg.seed);
  } else {
    // A site reads as one of N equal groups of one job would: the partition over N groups of its size.
    s.data_slot = sites::data_slot(cfg.site_data);
    s.partition = data::partition_windows(*s.train, cfg.partition, std::vector<int>(s.data_slot->second, world_size),
                                          cfg.seed);
  }
  // A site's TLS files are checked before anything connects (each rank reads them).
  if (!cfg.server.empty()) sites::load_tls({cfg.tls_cert, cfg.tls_key, cfg.tls_ca});
  parallel::slow_factors(cfg.slow, s.layout);
  check_started_combination(s);
  if (world_rank == 0) ensure_writable_dir(cfg.out);
  find_resume(s, world_rank);
  if (hf && !s.resume) s.init_from = hf;
  s.memory = preflight(s, world_rank);
  return s;
}

TrainSetup prepare_joining(TrainConfig cfg, MPI_Comm comm, const Faults& faults) {
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
    faults.at(FaultPoint::Join, plan.step);
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

}  // namespace fedshard::train
