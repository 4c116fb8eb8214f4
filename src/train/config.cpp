#include "train/config.h"

#include <toml++/toml.h>

#include <cmath>
#include <filesystem>
#include <functional>
#include <sstream>

#include "comm/link_emulation.h"
#include "federation/codec.h"
#include "federation/schedule.h"
#include "model/layers.h"
#include "sites/site_config.h"
#include "sites/site_options.h"
#include "train/option_space.h"
#include "train/step_profiler.h"
#include "util/error.h"
#include "util/int_list.h"

namespace fedshard::train {

namespace {

struct Binding {
  std::string key;
  std::string help;
  std::function<void(TrainConfig&, const toml::node&, const std::string& where)> from_toml;
  std::function<void(TrainConfig&, const std::string&, const std::string& where)> from_string;
  std::function<nlohmann::json(const TrainConfig&)> to_json;
};

template <class T>
Binding key_binding(std::string key, T TrainConfig::*field, std::string help) {
  Binding b;
  b.key = key;
  b.help = std::move(help);
  b.to_json = [field](const TrainConfig& c) { return nlohmann::json(c.*field); };
  b.from_toml = [field, key](TrainConfig& c, const toml::node& n, const std::string& where) {
    if constexpr (std::is_same_v<T, std::string>) {
      auto v = n.value<std::string>();
      FS_CHECK(v.has_value(), where, ": '", key, "' must be a string");
      c.*field = *v;
    } else if constexpr (std::is_same_v<T, bool>) {
      auto v = n.value<bool>();
      FS_CHECK(v.has_value(), where, ": '", key, "' must be true or false");
      c.*field = *v;
    } else if constexpr (std::is_same_v<T, std::vector<int>>) {
      // An array of sizes, or the command line's "4,2,2" as a string.
      std::string text;
      if (auto str = n.value<std::string>()) {
        text = *str;
      } else {
        auto* arr = n.as_array();
        FS_CHECK(arr != nullptr, where, ": '", key, "' must be an array of group sizes, e.g. [4, 2, 2]");
        for (auto&& e : *arr) {
          FS_CHECK(e.is_integer(), where, ": '", key, "' must hold integers");
          text += (text.empty() ? "" : ",") + std::to_string(*e.value<int64_t>());
        }
      }
      c.*field = parse_int_list(text, cat(where, ": ", key));
    } else if constexpr (std::is_same_v<T, double>) {
      auto v = n.value<double>();  // integers convert
      FS_CHECK(v.has_value(), where, ": '", key, "' must be a number");
      c.*field = *v;
    } else {
      FS_CHECK(n.is_integer(), where, ": '", key, "' must be an integer");
      c.*field = static_cast<T>(*n.value<int64_t>());
    }
  };
  b.from_string = [field, key](TrainConfig& c, const std::string& s, const std::string& where) {
    if constexpr (std::is_same_v<T, std::string>) {
      c.*field = s;
    } else if constexpr (std::is_same_v<T, std::vector<int>>) {
      c.*field = parse_int_list(s, cat(where, ": ", key));
    } else if constexpr (std::is_same_v<T, bool>) {
      FS_CHECK(s == "true" || s == "false" || s == "1" || s == "0", where, ": '", s, "' is not true/false");
      c.*field = (s == "true" || s == "1");
    } else {
      std::istringstream is(s);
      T v{};
      is >> v;
      FS_CHECK(!is.fail() && is.eof(), where, ": '", s, "' is not ",
               std::is_floating_point_v<T> ? "a number" : "an integer");
      if constexpr (std::is_unsigned_v<T>) FS_CHECK(s.find('-') == std::string::npos, where, ": '", s, "' must not be negative");
      c.*field = v;
    }
  };
  return b;
}

const std::vector<Binding>& bindings() {
  static const std::vector<Binding> b = {
      key_binding("model.name", &TrainConfig::model, "model preset: tiny, small, llama3.2-1b, llama3.1-8b, llama3.1-70b (default: model.init_from's config.json, else small)"),
      key_binding("model.vocab_size", &TrainConfig::vocab_size, "vocabulary size; 0 = the preset's or the data's tokenizer's; larger than the tokenizer's = padding rows"),
      key_binding("model.n_layers", &TrainConfig::n_layers, "transformer blocks; 0 = the preset's (e.g. 4 for a cut-down llama3.1-8b)"),
      key_binding("model.tie_embeddings", &TrainConfig::tie_embeddings, "output head shares the embedding: preset | true | false"),
      key_binding("model.dtype", &TrainConfig::dtype, "master weights and optimizer state: float32 | float64"),
      key_binding("model.compute_dtype", &TrainConfig::compute_dtype, "parameters and activations in compute: float32 | bfloat16 | float64"),
      key_binding("model.device", &TrainConfig::device, "cpu | cuda"),
      key_binding("model.attention", &TrainConfig::attention, "attention kernel: auto (sdpa where LibTorch has it) | sdpa | math"),
      key_binding("model.kernels", &TrainConfig::kernels, "RMSNorm (with the residual add), RoPE and the SwiGLU gate: aten (ATen's compositions) | fused (one kernel each: CUDA on GPUs, a loop over the same arithmetic on the CPU)"),
      key_binding("model.matmul_dtype", &TrainConfig::matmul_dtype, "the blocks' linear layers: compute (model.compute_dtype) | float8 (e4m3/e5m2 with per-tensor dynamic scales through _scaled_mm; CUDA GPUs of compute capability 8.9+, bfloat16 compute)"),
      key_binding("model.cross_entropy", &TrainConfig::cross_entropy, "the head's loss: chunked (rows per chunk from the model's dim; the [tokens, vocab] logits never exist at once) | chunked:ROWS | full (the logits at once)"),
      key_binding("model.init_from", &TrainConfig::init_from, "initialize from a Hugging Face Llama directory (config.json + model.safetensors or a sharded index); the model is the one its config.json describes"),
      key_binding("data.dir", &TrainConfig::data_dir, "directory written by fedshard prepare"),
      key_binding("data.seq_len", &TrainConfig::seq_len, "tokens per sequence"),
      key_binding("data.batch_size", &TrainConfig::batch_size, "sequences per rank per step"),
      key_binding("data.partition", &TrainConfig::partition, "split of the training data across groups: iid | by-source | dirichlet:ALPHA"),
      key_binding("data.pin_memory", &TrainConfig::pin_memory, "cuda: copy each batch from pinned host memory without blocking"),
      key_binding("optim.name", &TrainConfig::optimizer, "inner optimizer: adamw | sgd"),
      key_binding("optim.lr", &TrainConfig::lr, "peak learning rate"),
      key_binding("optim.min_lr_ratio", &TrainConfig::min_lr_ratio, "cosine floor as a fraction of the peak lr"),
      key_binding("optim.warmup_steps", &TrainConfig::warmup_steps, "linear warmup steps; -1 = 10% of steps"),
      key_binding("optim.beta1", &TrainConfig::beta1, "AdamW beta1"),
      key_binding("optim.beta2", &TrainConfig::beta2, "AdamW beta2"),
      key_binding("optim.eps", &TrainConfig::eps, "AdamW epsilon"),
      key_binding("optim.weight_decay", &TrainConfig::weight_decay, "decoupled weight decay"),
      key_binding("optim.decay_norms_and_embeddings", &TrainConfig::decay_norms_and_embeddings, "apply weight decay to norm weights and embeddings too"),
      key_binding("optim.grad_clip", &TrainConfig::grad_clip, "max global gradient norm; 0 = no clipping"),
      key_binding("optim.momentum", &TrainConfig::momentum, "SGD momentum"),
      key_binding("optim.fused", &TrainConfig::fused, "AdamW in one fused kernel: auto (where LibTorch has it) | on | off"),
      key_binding("parallel.strategy", &TrainConfig::strategy, "ddp | fsdp | hsdp | fl-ddp | fl-fsdp | fl-hsdp"),
      key_binding("parallel.group_size", &TrainConfig::group_size, "ranks per federation group S (fl-*)"),
      key_binding("parallel.groups", &TrainConfig::groups, "federation groups of different sizes, e.g. 4,2,2 (fl-*; instead of group_size)"),
      key_binding("parallel.shard_size", &TrainConfig::shard_size, "ranks per shard group H (hsdp, fl-hsdp)"),
      key_binding("parallel.sync_every", &TrainConfig::sync_every, "optimizer steps between aggregations K (fl-*)"),
      key_binding("parallel.reshard_after_forward", &TrainConfig::reshard_after_forward, "free gathered parameters after forward"),
      key_binding("parallel.activation_checkpointing", &TrainConfig::activation_checkpointing, "auto | on | off (auto: on when parameters are sharded)"),
      key_binding("parallel.ranks_per_node", &TrainConfig::ranks_per_node, "0 = detect nodes; N = emulate nodes of N ranks"),
      key_binding("parallel.emulate", &TrainConfig::emulate, "virtual layout the real ranks play: W (ddp/fsdp/hsdp: a world of W ranks) or GxS (G groups of S ranks); empty = the real world"),
      key_binding("parallel.threads", &TrainConfig::threads, "intra-op threads per rank; 0 = cores per node / ranks per node"),
      key_binding("parallel.backend", &TrainConfig::backend, "collectives: auto | mpi (host-staged for cuda) | nccl"),
      key_binding("parallel.reduce_dtype", &TrainConfig::reduce_dtype, "gradient reductions and the federation average on the wire: float32 | bfloat16 | float64 (not wider than model.dtype)"),
      key_binding("federation.outer_optimizer", &TrainConfig::outer_optimizer, "fedavg | nesterov"),
      key_binding("federation.outer_lr", &TrainConfig::outer_lr, "outer learning rate (nesterov)"),
      key_binding("federation.outer_momentum", &TrainConfig::outer_momentum, "outer momentum (nesterov)"),
      key_binding("federation.inner_state", &TrainConfig::inner_state, "inner optimizer state after a sync: keep | average | reset"),
      key_binding("federation.overlap", &TrainConfig::overlap, "none | delayed (a round stays in flight until the next, K steps later) | streaming:F (F fragments, one every K/F steps)"),
      key_binding("federation.compress", &TrainConfig::compress, "a group's model delta on the wire: none | bf16 | int8 | int4 | topk:D (federation/codec.h; error feedback)"),
      key_binding("federation.compress_block", &TrainConfig::compress_block, "int8, int4, topk:D: elements per block (a multiple of 4; int4: of 8; topk: at most 16384)"),
      key_binding("federation.topk_values", &TrainConfig::topk_values, "topk:D's kept values: means (sign and two magnitude bins, each its mean) | levels (-1, -1/3, 1/3, 1 of the largest)"),
      key_binding("federation.ef_decay", &TrainConfig::ef_decay, "error feedback: the residual's factor before it joins the next round's delta, in [0, 1]"),
      key_binding("federation.sparse_mean", &TrainConfig::sparse_mean, "topk:D: the groups' mean as the union of their sparse changes (union) or the owner's top-k of it (sparsified)"),
      key_binding("federation.round", &TrainConfig::round, "steps (every parallel.sync_every steps) | steps:K | seconds:T (each group takes the steps that fit in T seconds of its own time)"),
      key_binding("federation.clock", &TrainConfig::clock, "what federation.round = seconds:T measures a step with: wall (its wall time) | emulated:SECONDS (SECONDS times the group's train.slow factor, the same on any machine; train.slow then sleeps not)"),
      key_binding("federation.normalize", &TrainConfig::normalize, "none | steps (FedNova: each group's delta divided by its steps, rescaled by the mean)"),
      key_binding("federation.eval_after_sync", &TrainConfig::eval_after_sync, "evaluate the global model after every aggregation"),
      key_binding("federation.eval_group_model", &TrainConfig::eval_group_model, "also evaluate group 0's local model before each aggregation"),
      key_binding("federation.audit", &TrainConfig::audit, "after every round each rank appends its part of a checksum of the global model to RUN/audit/rank-R.jsonl (summed over a group's ranks, equal in every group; tests/pairwise.py compares them); after a rejoin (federation.rejoin_after) each rank also appends its whole state's checksum, a replacement's equal to that of the rank it took its state from"),
      key_binding("federation.rejoin_after", &TrainConfig::rejoin_after, "in-job recovery (ULFM): after this many rounds without a lost group, the kept ranks start replacements for its ranks (MPI_Comm_spawn), which rejoin with the global model; 0 = a lost group stays out"),
      key_binding("sites.name", &TrainConfig::site, "this job is a site of a federation across facilities: its name, which its certificate (sites.tls_cert) must carry as common name"),
      key_binding("sites.server", &TrainConfig::server, "HOST:PORT of each shard of the round server (fedshard serve), in shard order, comma-separated; empty = not a site"),
      key_binding("sites.tls_cert", &TrainConfig::tls_cert, "this site's certificate (PEM), signed by the federation's CA"),
      key_binding("sites.tls_key", &TrainConfig::tls_key, "its private key (PEM)"),
      key_binding("sites.tls_ca", &TrainConfig::tls_ca, "the federation's CA certificate (PEM): the round server's certificate must be signed by it"),
      key_binding("sites.server_name", &TrainConfig::server_name, "the name the round server's certificate carries (default: each address's host)"),
      key_binding("sites.patience", &TrainConfig::patience, "seconds a round server shard may be unreachable (restarting, a link down) before the site gives up"),
      key_binding("sites.data", &TrainConfig::site_data, "I/N: read the training data as group I of N equal groups of one job would (data.partition over N groups); empty = the site reads it alone"),
      key_binding("network.node", &TrainConfig::link_node, "emulated link of the node tier: BANDWIDTH,LATENCY (e.g. 100Gbit/s,2us)"),
      key_binding("network.inter_node", &TrainConfig::link_inter_node, "emulated link between nodes of a group"),
      key_binding("network.inter_group", &TrainConfig::link_inter_group, "emulated link between federation groups"),
      key_binding("eval.every", &TrainConfig::eval_every, "steps between evaluations; 0 = only at the end"),
      key_binding("eval.windows", &TrainConfig::eval_windows, "validation windows per evaluation; 0 = all"),
      key_binding("eval.backlog", &TrainConfig::eval_backlog, "compressed in-job rounds: the last evaluation also evaluates the global model plus every residual error feedback still owes (model \"backlog\": what rounds that lost nothing would have reached)"),
      key_binding("checkpoint.every", &TrainConfig::checkpoint_every, "steps between checkpoints; 0 = only at the end"),
      key_binding("checkpoint.keep", &TrainConfig::checkpoint_keep, "complete checkpoints to keep"),
      key_binding("train.resume", &TrainConfig::resume, "auto (latest checkpoint of train.out, if any) or a checkpoint directory"),
      key_binding("train.resume_groups", &TrainConfig::resume_groups, "fl-*: ids of the checkpoint's groups that continue, one per group of this run, e.g. 0,2,3 after group 1 was lost (default: the same groups)"),
      key_binding("train.steps", &TrainConfig::steps, "optimizer steps"),
      key_binding("train.force", &TrainConfig::force, "run even when the preflight predicts that a rank's peak memory exceeds what it can have (a warning instead of the refusal)"),
      key_binding("train.grad_accum", &TrainConfig::grad_accum, "micro-batches of data.batch_size per rank per optimizer step (gradients reduced once per step)"),
      key_binding("train.seed", &TrainConfig::seed, "seed of initialization and data order"),
      key_binding("train.profile_steps", &TrainConfig::profile_steps, "FIRST:LAST: profile these steps on every rank into RUN/profile/ (an op table by self time; a Chrome trace where LibTorch has Kineto); empty = off"),
      key_binding("train.slow", &TrainConfig::slow, "emulated stragglers: RANK=FACTOR,group:G=FACTOR (each named rank's compute takes FACTOR times as long)"),
      key_binding("train.out", &TrainConfig::out, "run directory"),
      key_binding("train.log_every", &TrainConfig::log_every, "steps between metrics lines"),
      key_binding("train.tensorboard", &TrainConfig::tensorboard, "directory for TensorBoard event files: every step and eval line's numbers as scalars (rank 0 writes them); empty = none"),
      key_binding("train.peak_flops", &TrainConfig::peak_flops, "peak FLOP/s per rank for MFU; 0 = measure a matmul"),
      key_binding("train.defer_host_sync", &TrainConfig::defer_host_sync, "keep the loss and grad norm on the device until the step's log line"),
  };
  return b;
}

const Binding& binding(const std::string& key, const std::string& where) {
  for (const auto& b : bindings())
    if (b.key == key) return b;
  throw Error(cat(where, ": unknown configuration key '", key, "' (fedshard train --help lists them)"));
}

bool one_of(const std::string& v, std::initializer_list<const char*> options) {
  for (const char* o : options)
    if (v == o) return true;
  return false;
}

// sites.*: a site names its round server, itself and its TLS files; without a server none of them is read.
void validate_sites(const TrainConfig& c) {
  if (c.server.empty()) {
    const std::pair<const char*, const std::string*> keys[] = {{"sites.name", &c.site}, {"sites.tls_cert", &c.tls_cert},
                                                               {"sites.tls_key", &c.tls_key}, {"sites.tls_ca", &c.tls_ca},
                                                               {"sites.server_name", &c.server_name},
                                                               {"sites.data", &c.site_data}};
    for (const auto& [key, value] : keys)
      FS_CHECK(value->empty(), key, " = '", *value, "' is set but sites.server is not (a site names its round server)");
    return;
  }
  FS_CHECK(sites::available(), "sites.server is set, but this fedshard was built without sites (gRPC C++ and ",
           "OpenSSL's headers were not found: install libgrpc++-dev and libssl-dev, then build again)");
  FS_CHECK(!c.site.empty(), "sites.server is set: name the site (sites.name, --site)");
  sites::server_list(c.server);
  for (const auto& [key, value] : {std::pair<const char*, const std::string*>{"sites.tls_cert", &c.tls_cert},
                                   {"sites.tls_key", &c.tls_key}, {"sites.tls_ca", &c.tls_ca}})
    FS_CHECK(!value->empty(), "sites.server is set: ", key, " is missing (every connection to the round server is mutual TLS)");
  FS_CHECK(c.patience > 0, "sites.patience must be positive, got ", c.patience);
  if (!c.site_data.empty()) sites::data_slot(c.site_data);
}

void validate(const TrainConfig& c) {
  FS_CHECK(c.steps > 0, "train.steps must be positive, got ", c.steps);
  FS_CHECK(c.rejoin_after >= 0, "federation.rejoin_after must not be negative, got ", c.rejoin_after);
  FS_CHECK(c.seq_len > 0, "data.seq_len must be positive, got ", c.seq_len);
  FS_CHECK(c.batch_size > 0, "data.batch_size must be positive, got ", c.batch_size);
  FS_CHECK(c.vocab_size >= 0, "model.vocab_size must not be negative");
  FS_CHECK(c.n_layers >= 0, "model.n_layers must not be negative");
  FS_CHECK(one_of(c.tie_embeddings, {"preset", "true", "false"}), "model.tie_embeddings must be preset, true or false, got '",
           c.tie_embeddings, "'");
  FS_CHECK(one_of(c.dtype, {"float32", "float64"}), "model.dtype must be float32 or float64, got '", c.dtype, "'");
  FS_CHECK(one_of(c.compute_dtype, {"float32", "bfloat16", "float64"}),
           "model.compute_dtype must be float32, bfloat16 or float64, got '", c.compute_dtype, "'");
  FS_CHECK(one_of(c.device, {"cpu", "cuda"}), "model.device must be cpu or cuda, got '", c.device, "'");
  FS_CHECK(one_of(c.attention, {"auto", "sdpa", "math"}), "model.attention must be auto, sdpa or math, got '",
           c.attention, "'");
  FS_CHECK(one_of(c.fused, {"auto", "on", "off"}), "optim.fused must be auto, on or off, got '", c.fused, "'");
  model::parse_kernels(c.kernels);
  model::parse_matmul_dtype(c.matmul_dtype);
  model::ModelConfig chunks;
  model::parse_cross_entropy(c.cross_entropy, chunks);
  FS_CHECK(one_of(c.reduce_dtype, {"float32", "bfloat16", "float64"}),
           "parallel.reduce_dtype must be float32, bfloat16 or float64, got '", c.reduce_dtype, "'");
  FS_CHECK(one_of(c.backend, {"auto", "mpi", "nccl"}), "parallel.backend must be auto, mpi or nccl, got '", c.backend, "'");
  FS_CHECK(c.backend != "nccl" || c.device == "cuda", "parallel.backend = nccl needs model.device = cuda");
  FS_CHECK(one_of(c.optimizer, {"adamw", "sgd"}), "optim.name must be adamw or sgd, got '", c.optimizer, "'");
  FS_CHECK(c.lr > 0 && std::isfinite(c.lr), "optim.lr must be a positive number, got ", c.lr);
  FS_CHECK(c.min_lr_ratio >= 0 && c.min_lr_ratio <= 1, "optim.min_lr_ratio must be in [0, 1], got ", c.min_lr_ratio);
  FS_CHECK(c.warmup_steps >= -1 && c.warmup_steps < c.steps, "optim.warmup_steps must be -1 or in [0, steps), got ",
           c.warmup_steps);
  FS_CHECK(c.beta1 >= 0 && c.beta1 < 1 && c.beta2 >= 0 && c.beta2 < 1, "optim.beta1/beta2 must be in [0, 1)");
  FS_CHECK(c.eps > 0, "optim.eps must be positive");
  FS_CHECK(c.weight_decay >= 0, "optim.weight_decay must not be negative");
  FS_CHECK(c.grad_clip >= 0, "optim.grad_clip must not be negative");
  FS_CHECK(c.momentum >= 0 && c.momentum < 1, "optim.momentum must be in [0, 1)");
  FS_CHECK(one_of(c.strategy, {"ddp", "fsdp", "hsdp", "fl-ddp", "fl-fsdp", "fl-hsdp"}),
           "unknown strategy '", c.strategy, "' (expected ddp, fsdp, hsdp, fl-ddp, fl-fsdp or fl-hsdp)");
  FS_CHECK(c.sync_every > 0, "parallel.sync_every must be positive, got ", c.sync_every);
  FS_CHECK(one_of(c.activation_checkpointing, {"auto", "on", "off"}),
           "parallel.activation_checkpointing must be auto, on or off, got '", c.activation_checkpointing, "'");
  FS_CHECK(c.ranks_per_node >= 0 && c.threads >= 0, "parallel.ranks_per_node and threads must not be negative");
  FS_CHECK(one_of(c.outer_optimizer, {"fedavg", "nesterov"}), "federation.outer_optimizer must be fedavg or nesterov, got '",
           c.outer_optimizer, "'");
  FS_CHECK(c.outer_lr > 0, "federation.outer_lr must be positive");
  FS_CHECK(c.outer_momentum >= 0 && c.outer_momentum < 1, "federation.outer_momentum must be in [0, 1)");
  FS_CHECK(one_of(c.inner_state, {"keep", "average", "reset"}), "federation.inner_state must be keep, average or reset, got '",
           c.inner_state, "'");
  federation::parse_overlap(c.overlap);
  federation::parse_round_seconds(c.round, c.sync_every);
  federation::parse_clock(c.clock);
  FS_CHECK(one_of(c.normalize, {"none", "steps"}), "federation.normalize must be none or steps, got '", c.normalize, "'");
  FS_CHECK(c.compress_block > 0 && c.compress_block % 4 == 0,
           "federation.compress_block must be a positive multiple of 4, got ", c.compress_block);
  if (c.compress != "none") federation::Codec(c.compress, c.compress_block);  // the codec's own checks
  federation::parse_topk_values(c.topk_values);
  FS_CHECK(c.ef_decay >= 0 && c.ef_decay <= 1, "federation.ef_decay must be in [0, 1], got ", c.ef_decay);
  FS_CHECK(c.sparse_mean == "union" || c.sparse_mean == "sparsified",
           "federation.sparse_mean must be union or sparsified, got '", c.sparse_mean, "'");
  FS_CHECK(c.eval_every >= 0 && c.eval_windows >= 0, "eval.every and eval.windows must not be negative");
  FS_CHECK(!c.eval_backlog || (c.compress != "none" && c.server.empty() && c.strategy.rfind("fl-", 0) == 0),
           "eval.backlog needs in-job compressed rounds (an fl-* strategy with federation.compress, not a site): only "
           "they leave a backlog in error feedback");
  FS_CHECK(c.log_every > 0, "train.log_every must be positive");
  FS_CHECK(c.grad_accum > 0, "train.grad_accum must be positive, got ", c.grad_accum);
  FS_CHECK(c.checkpoint_every >= 0, "checkpoint.every must not be negative");
  FS_CHECK(c.checkpoint_keep >= 1, "checkpoint.keep must be at least 1");
  FS_CHECK(c.peak_flops >= 0, "train.peak_flops must not be negative");
  FS_CHECK(!c.out.empty(), "train.out must not be empty");
  FS_CHECK(parse_profile_steps(c.profile_steps).last <= c.steps, "train.profile_steps '", c.profile_steps,
           "' reaches past train.steps (", c.steps, ")");
  for (const auto* link : {&c.link_node, &c.link_inter_node, &c.link_inter_group})
    if (!link->empty())
      FS_CHECK(!comm::parse_link_spec(*link).shared, "link '", *link, "': 'shared' is priced by fedshard plan only; ",
               "the link emulation holds each rank's collectives on a link of their own");
  validate_sites(c);
  // The combinations of values that are refused (what needs no start-up fact): train/option_space.h.
  check_options(Combination(c));
}

}  // namespace

nlohmann::json TrainConfig::to_json() const {
  nlohmann::json j;
  for (const auto& b : bindings()) {
    const auto dot = b.key.find('.');
    j[b.key.substr(0, dot)][b.key.substr(dot + 1)] = b.to_json(*this);
  }
  return j;
}

TrainConfig load_config(const std::string& path, const Overrides& overrides) {
  TrainConfig c;
  if (!path.empty()) {
    FS_CHECK(std::filesystem::is_regular_file(path), "config file ", path, " not found");
    toml::table file;
    try {
      file = toml::parse_file(path);
    } catch (const toml::parse_error& e) {
      const auto& where = e.source().begin;
      throw Error(cat(path, ":", where.line, ":", where.column, ": ", e.description()));
    }
    for (auto&& [section, node] : file) {
      const std::string s(section.str());
      auto* table = node.as_table();
      FS_CHECK(table != nullptr, path, ": '", s, "' must be a [section]");
      for (auto&& [key, value] : *table) {
        const std::string full = s + "." + std::string(key.str());
        binding(full, path).from_toml(c, value, path);
      }
    }
  }
  for (const auto& o : overrides) binding(o.key, o.origin).from_string(c, o.value, o.origin);
  validate(c);
  return c;
}

std::vector<std::pair<std::string, std::string>> config_keys() {
  std::vector<std::pair<std::string, std::string>> out;
  for (const auto& b : bindings()) out.emplace_back(b.key, b.help);
  return out;
}

}  // namespace fedshard::train
