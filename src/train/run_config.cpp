#include "train/run_config.h"

#include <ATen/Parallel.h>

#include <filesystem>
#include <thread>

#include "comm/link_emulation.h"
#include "comm/mpi_runtime.h"
#include "federation/codec.h"
#include "model/layers.h"
#include "sites/site_config.h"
#include "util/error.h"

namespace fedshard::train {

namespace {

at::ScalarType dtype_of(const std::string& name) {
  if (name == "float64") return at::kDouble;
  if (name == "bfloat16") return at::kBFloat16;
  return at::kFloat;
}

nlohmann::json memory_json(const plan::MemoryEstimate& e) {
  nlohmann::json j = {{"total", e.total()}};
  for (const auto& c : e.components) j[c.name] = c.bytes;
  return j;
}

}  // namespace

void configure_link_emulation(const TrainConfig& cfg) {
  const std::pair<comm::Tier, const std::string*> links[] = {{comm::Tier::Node, &cfg.link_node},
                                                             {comm::Tier::InterNode, &cfg.link_inter_node},
                                                             {comm::Tier::InterGroup, &cfg.link_inter_group}};
  for (const auto& [tier, spec] : links)
    if (!spec->empty()) comm::LinkEmulator::instance().set(tier, comm::parse_link_spec(*spec));
}

bool use_fused_adamw(const TrainConfig& cfg) {
  return cfg.optimizer == "adamw" && (cfg.fused == "on" || (cfg.fused == "auto" && optim::fused_adamw_available()));
}

at::Device place_rank(const TrainSetup& s, int& threads) {
  const int host_ranks = comm::MpiRuntime::get().host_rank_and_size().second;
  threads = s.cfg.threads > 0 ? static_cast<int>(s.cfg.threads)
                              : std::max(1, static_cast<int>(std::thread::hardware_concurrency()) / host_ranks);
  at::set_num_threads(threads);
  if (s.cfg.device != "cuda") return at::kCPU;
  return at::Device(at::kCUDA, static_cast<c10::DeviceIndex>(s.topology.device));  // choose_gpu's
}

sites::SiteOptions site_options(const TrainSetup& s) {
  const auto& cfg = s.cfg;
  const auto& m = s.model;
  sites::SiteOptions o;
  o.name = cfg.site;
  o.servers = sites::server_list(cfg.server);
  o.tls = {cfg.tls_cert, cfg.tls_key, cfg.tls_ca};
  o.server_name = cfg.server_name;
  o.patience = cfg.patience;
  o.identity.model = cat(m.name, ": dim ", m.dim, ", ", m.n_layers, " layers, ", m.n_heads, " heads (", m.n_kv_heads,
                         " kv), vocabulary ", m.vocab_size, ", ffn ", m.ffn_hidden_dim(), ", ",
                         m.tie_embeddings ? "tied" : "untied", ", rope theta ", m.rope_theta, ", norm eps ", m.norm_eps);
  o.identity.tokenizer = s.tokenizer_id;
  o.identity.codec = cfg.compress;
  o.identity.block = federation::blockwise_codec(cfg.compress) ? cfg.compress_block : 0;
  o.identity.values = federation::sparse_codec(cfg.compress) ? cfg.topk_values : "";
  return o;
}

EngineSpec engine_spec(const TrainSetup& s, MPI_Comm base, at::Device device) {
  const auto& cfg = s.cfg;
  EngineSpec e;
  e.layout = s.layout;
  e.base = base;
  e.topology = s.topology;
  e.model = s.model;
  e.sharding.master_dtype = dtype_of(cfg.dtype);
  e.sharding.compute_dtype = dtype_of(cfg.compute_dtype);
  e.sharding.reduce_dtype = dtype_of(cfg.reduce_dtype);
  // Recomputation pays off where parameters are sharded, i.e. per group.
  int rank = 0;
  MPI_Comm_rank(base, &rank);
  const int group = s.layout.coords(rank).group;
  const bool sharded = s.layout.shard_size(group) > 1;
  e.sharding.recompute = cfg.activation_checkpointing == "on" || (cfg.activation_checkpointing == "auto" && sharded);
  e.sharding.reshard_after_forward = cfg.reshard_after_forward;
  e.sharding.device = device;
  e.optimizer = {cfg.optimizer, cfg.beta1, cfg.beta2, cfg.eps, cfg.weight_decay, cfg.momentum,
                 use_fused_adamw(cfg)};
  e.decay_norms_and_embeddings = cfg.decay_norms_and_embeddings;
  if (s.strategy.federated || !cfg.server.empty())
    e.federation = federation::FederationOptions{{cfg.outer_optimizer, cfg.outer_lr, cfg.outer_momentum},
                                                 cfg.inner_state,
                                                 e.sharding.reduce_dtype,
                                                 cfg.compress,
                                                 cfg.compress_block,
                                                 federation::parse_topk_values(cfg.topk_values),
                                                 cfg.ef_decay,
                                                 cfg.sparse_mean,
                                                 cfg.overlap != "none",
                                                 cfg.normalize == "steps"};
  if (!cfg.server.empty()) e.site = site_options(s);
  if (s.init_from)
    e.init = [hf = s.init_from](const model::ParamSlot& slot, int64_t begin, at::Tensor dst) {
      hf->read(slot.name, begin, dst);
    };
  e.seed = cfg.seed;
  return e;
}

nlohmann::json resolved_config(const TrainSetup& s, const comm::Topology& topo, const RankFacts& facts) {
  const auto& cfg = s.cfg;
  const auto& e = s.emulation;
  const auto& layout = e.virtual_layout;  // what the job computes; the real ranks under "emulation"
  std::vector<int> shard_sizes;
  for (int g = 0; g < layout.groups(); ++g) shard_sizes.push_back(layout.shard_size(g));
  auto j = cfg.to_json();
  j["resolved"] = {{"strategy", s.strategy.name()},
                   {"world", layout.world()},
                   {"group_size", layout.equal_groups() ? layout.group_size(0) : 0},
                   {"shard_size", layout.equal_groups() ? layout.shard_size(0) : layout.shard_spec()},
                   {"groups", layout.groups()},
                   {"group_sizes", layout.group_sizes()},
                   {"group_ids", s.group_ids},
                   {"shard_sizes", shard_sizes},
                   {"replicas_per_group", layout.replicas(0)},
                   {"emulation", e.active() ? nlohmann::json{{"real_world", e.real.world()},
                                                             {"real_group_sizes", e.real.group_sizes()},
                                                             {"real_shard_size", e.real.shard_size(0)},
                                                             {"groups_per_rank", e.groups_per_rank},
                                                             {"ranks_per_rank", e.ranks_per_rank}}
                                            : nlohmann::json(nullptr)},
                   {"nodes", topo.layout().nodes()},
                   {"emulated_nodes", topo.emulated_nodes()},
                   {"threads_per_rank", facts.threads},
                   {"activation_checkpointing", facts.recompute},
                   {"fused_adamw", use_fused_adamw(cfg)},
                   {"attention", cfg.attention == "math" || !model::sdpa_available() ? "math" : "sdpa"},
                   {"loss_chunk_rows", s.model.chunked_loss ? nlohmann::json(s.model.loss_rows()) : nullptr},
                   {"parameters", s.model.param_count()},
                   {"vocab_size", s.model.vocab_size},
                   {"data_dir", std::filesystem::absolute(cfg.data_dir).lexically_normal().string()},
                   {"tokenizer", s.tokenizer},
                   {"warmup_steps", facts.warmup_steps},
                   {"peak_flops_per_rank", facts.peak_flops},
                   {"memory_estimate_bytes", memory_json(s.memory)}};
  return j;
}

}  // namespace fedshard::train
