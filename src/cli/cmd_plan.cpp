// `fedshard plan`: predicted bytes, times and throughput of each strategy for a cluster (src/plan).
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdio>
#include <iostream>
#include <memory>

#include "cli/commands.h"
#include "federation/codec.h"
#include "federation/schedule.h"
#include "plan/cost_model.h"
#include "plan/sites_plan.h"
#include "util/byte_size.h"
#include "util/error.h"
#include "util/int_list.h"

namespace fedshard::cli {

namespace {

// CLI11's PositiveNumber message prints DBL_MAX as the range's top.
const CLI::Validator kPositive(
    [](std::string& s) -> std::string {
      double v = 0;
      if (!CLI::detail::lexical_cast(s, v) || !(v > 0)) return "must be positive, got " + s;
      return "";
    },
    "> 0");
const CLI::Validator kNonNegative(
    [](std::string& s) -> std::string {
      double v = 0;
      if (!CLI::detail::lexical_cast(s, v) || !(v >= 0)) return "must be at least 0, got " + s;
      return "";
    },
    ">= 0");

struct PlanArgs {
  bool paper = false;
  std::string cluster;
  int nodes = 0;
  int ranks_per_node = 0;
  std::string model = "llama3.1-8b";
  int64_t params = 0;
  int64_t vocab = 0;
  std::vector<std::string> strategies;
  int group_size = 0, shard_size = 0, sync_every = 8;
  std::string groups;
  int64_t batch = 2, seq = 2048;
  std::vector<std::string> links;
  double flops = 0, mfu = 0, compute_seconds = 0, optimizer_seconds = 0, collective_floor = 0;
  std::string memory_per_rank;
  std::string overlap = "on";
  int bytes = 2;
  std::string reduce_dtype;
  std::string inner_state = "keep";
  std::string baseline = "fedshard";
  double check_latency_us = 25, check_per_peer_us = 5;
  int grad_accum = 1;
  bool reshard_after_forward = true;
  std::string activation_checkpointing = "auto";
  std::string compress = "none", federation_overlap = "none", slow, round = "steps";
  int64_t compress_block = 256;
  std::string sparse_mean = "union";
  std::string sites, site_link, server_link = "10Gbit/s,0us", outer = "fedavg";
  int server_shards = 1;
  bool json = false;
};

std::vector<plan::StrategySpec> default_specs(const PlanArgs& a, int world, int rpn) {
  // The paper's comparison: FL+FSDP groups of one node, FL+HSDP groups of 8 nodes sharded per node.
  const int fl_hsdp_group = std::min(world, 8 * rpn);
  std::vector<std::string> names = {"ddp", "fsdp", "hsdp:H=" + std::to_string(rpn),
                                    "fl-fsdp:S=" + std::to_string(rpn),
                                    "fl-hsdp:S=" + std::to_string(fl_hsdp_group) + ",H=" + std::to_string(rpn)};
  std::vector<plan::StrategySpec> specs;
  for (const auto& n : names) specs.push_back(plan::parse_strategy_spec(n, a.sync_every));
  return specs;
}

double gb(double bytes) { return bytes / 1e9; }

void print_table(const plan::Cluster& c, const plan::Workload& w, const std::vector<plan::StrategyPlan>& plans) {
  const int64_t params = w.params_override > 0 ? w.params_override : w.model.param_count();
  std::printf("model %s, %s parameters; cluster %s: %d nodes x %d ranks = %d ranks\n",
              w.params_override > 0 ? "(parameter count)" : w.model.name.c_str(), model::with_commas(params).c_str(),
              c.name.c_str(), c.nodes, c.ranks_per_node, c.world());
  std::printf("per rank per step: %lld x %lld tokens; %d B/element gathered, %d B reduced/aggregated, %d B master; "
              "overlap %s\n", static_cast<long long>(w.batch_per_rank), static_cast<long long>(w.seq_len),
              w.param_bytes, w.reduce_bytes, w.master_bytes, w.overlap ? "on" : "off");
  if (!w.prefetch || w.checks.latency_s > 0 || w.checks.per_peer_s > 0)
    std::printf("baseline research: gathers %s; before every collective a barrier and 2 fingerprint all-gathers "
                "over Gloo (%.3g us per message, %.3g us per peer at rank 0)\n",
                w.prefetch ? "prefetched" : "not prefetched", w.checks.latency_s * 1e6, w.checks.per_peer_s * 1e6);
  if (w.compress != "none" || w.round_overlap != "none")
    std::printf("federation rounds: compress %s (block %lld%s), overlap %s\n", w.compress.c_str(),
                static_cast<long long>(w.compress_block),
                federation::sparse_codec(w.compress) ? (", mean " + w.sparse_mean).c_str() : "", w.round_overlap.c_str());
  for (comm::Tier t : comm::kTiers) {
    const auto& l = c.links[static_cast<int>(t)];
    std::printf("link %-11s %s\n", comm::tier_name(t), comm::describe(l).c_str());
  }
  if (c.collective_floor_s > 0)
    std::printf("collective floor (this host): %.3g ms per data collective at least\n", c.collective_floor_s * 1e3);
  if (w.compute_seconds > 0)
    std::printf("compute: %.4g s per step (measured)\n", w.compute_seconds);
  else
    std::printf("compute: peak %.4g TFLOP/s per rank at MFU %.2f\n", c.peak_flops_per_rank / 1e12, c.mfu);
  std::printf("\n%-26s %-10s %11s %11s %11s %11s %9s %9s %9s %12s %8s %9s\n", "strategy", "G x S, H", "node GB",
              "inter-node", "inter-grp", "i-grp/round", "comm s", "compute s", "step s", "tokens/s", "vs fsdp",
              "memory GB");
  for (const auto& p : plans) {
    const auto layout = cat(p.layout.describe_groups(), ",", p.layout.equal_groups() ? std::to_string(p.layout.shard_size(0))
                                                         : p.layout.shard_spec() == 0 ? "S" : std::to_string(p.layout.shard_spec()));
    std::printf("%-26s %-10s %11.4g %11.4g %11.4g %11.4g %9.4g %9.4g %9.4g %12.5g %8.3f %9.3g%s\n",
                p.spec.label().c_str(), layout.c_str(), gb(p.bytes_per_step[0]), gb(p.bytes_per_step[1]),
                gb(p.bytes_per_step[2]), gb(p.bytes_per_round[2]), p.step_comm_seconds + p.round_comm_seconds / p.spec.sync_every,
                p.compute_seconds, p.step_seconds, p.tokens_per_second, p.speedup_vs_fsdp,
                gb(p.memory.total()), p.fits_memory ? "" : "  (exceeds memory per rank)");
  }
  std::printf("\nbytes: sent per rank (rank 0) per step, aggregation amortized over K; i-grp/round: one aggregation\n");
  for (const auto& p : plans) {
    if (p.layout.equal_groups() || !p.spec.strategy.federated) continue;
    std::printf("%s: inter-group GB per round per rank:", p.spec.label().c_str());
    for (int g = 0; g < p.layout.groups(); ++g)
      std::printf(" group %d (%d ranks) %.4g;", g, p.layout.group_size(g), gb(p.groups[g].per_round[2]));
    std::printf(" all ranks, data %.4g\n", gb(p.inter_group_data_bytes_per_round));
  }
  for (const auto& s : c.sources) std::printf("source: %s\n", s.c_str());
}

double mb(double bytes) { return bytes / 1e6; }

void print_sites_table(const plan::Cluster& c, const plan::Workload& w, const std::vector<plan::SitesPlan>& plans) {
  const auto& p0 = plans.front();
  std::string layout;
  for (int r : p0.sites.site_ranks) layout += (layout.empty() ? "" : ",") + std::to_string(r);
  std::printf("model %s, %s elements on the round server; %zu sites of %s ranks (each a job of its own)\n",
              w.params_override > 0 ? "(parameter count)" : w.model.name.c_str(),
              model::with_commas(p0.elements).c_str(), p0.sites.site_ranks.size(), layout.c_str());
  std::printf("per rank per step: %lld x %lld tokens; compute %s\n", static_cast<long long>(w.batch_per_rank),
              static_cast<long long>(w.seq_len),
              w.compute_seconds > 0 ? cat(w.compute_seconds, " s per step (measured)").c_str()
                                    : cat("peak ", c.peak_flops_per_rank / 1e12, " TFLOP/s per rank at MFU ", c.mfu).c_str());
  const auto link = [&](int tier) {
    return c.links[tier].bandwidth_bytes_per_s > 0 ? comm::describe(c.links[tier]) : std::string("not given (free)");
  };
  std::printf("inside a site: link node %s; inter-node %s\n", link(0).c_str(), link(1).c_str());
  std::printf("site link %s (each site's, both directions, shared by its ranks); server %d shard(s), %s %s\n",
              comm::describe(p0.sites.site_link).c_str(), p0.sites.server_shards,
              p0.sites.server_link.shared ? "one link shared:" : "each its own link:",
              comm::describe(p0.sites.server_link).c_str());
  std::printf("rounds every %d steps: compress %s, overlap %s; per site per round %.4g MB up, %.4g MB down; the server %.4g MB in, "
              "%.4g MB out per round; memory per shard %.4g MB (outer %s)\n",
              p0.inner.sync_every, w.compress.c_str(), w.round_overlap.c_str(), mb(p0.up_bytes), mb(p0.down_bytes), mb(p0.server_in_bytes),
              mb(p0.server_out_bytes), mb(p0.server_memory_bytes), p0.sites.outer.c_str());
  std::printf("\n%-16s %-6s %5s %9s %9s %10s %9s %9s %9s %12s\n", "strategy", "site", "ranks", "step s", "upload s",
              "download s", "round s", "exposed s", "s/step", "tokens/s");
  for (const auto& p : plans) {
    const bool same = std::all_of(p.per_site.begin(), p.per_site.end(),
                                  [&](const plan::SitePlan& s) { return s.ranks == p.per_site.front().ranks; });
    for (size_t i = 0; i < (same ? 1 : p.per_site.size()); ++i) {
      const auto& s = p.per_site[i];
      std::printf("%-16s %-6s %5d %9.4g %9.4g %10.4g %9.4g %9.4g %9.4g %12.5g\n", p.inner.label().c_str(),
                  same ? "each" : std::to_string(i).c_str(), s.ranks, s.inner.step_seconds, s.upload_s, s.download_s,
                  s.round_s, s.exposed_s, s.step_s, same ? p.tokens_per_s : s.tokens_per_s);
    }
    if (!same) std::printf("%-16s %-6s %5s %9s %9s %10s %9s %9s %9s %12.5g\n", "", "all", "", "", "", "", "", "",
                           "", p.tokens_per_s);
  }
  std::printf("\nstep s: the site's own step (its inner strategy on its ranks); s/step: paced by the slowest site, the "
              "round's exposed part amortized over K; the server's compute is not priced (bench/sites.sh measures it)\n");
}

nlohmann::json sites_json(const plan::Workload& w, const std::vector<plan::SitesPlan>& plans) {
  nlohmann::json j;
  j["workload"] = {{"model", w.params_override > 0 ? "params" : w.model.name}, {"batch_per_rank", w.batch_per_rank},
                   {"seq_len", w.seq_len}, {"compress", w.compress}, {"federation_overlap", w.round_overlap}};
  for (const auto& p : plans) {
    nlohmann::json e;
    e["strategy"] = p.inner.label();
    e["sync_every"] = p.inner.sync_every;
    e["site_ranks"] = p.sites.site_ranks;
    e["server_shards"] = p.sites.server_shards;
    e["elements"] = p.elements;
    e["up_bytes_per_site_round"] = p.up_bytes;
    e["down_bytes_per_site_round"] = p.down_bytes;
    e["server_in_bytes_per_round"] = p.server_in_bytes;
    e["server_out_bytes_per_round"] = p.server_out_bytes;
    e["server_memory_bytes_per_shard"] = p.server_memory_bytes;
    e["tokens_per_s"] = p.tokens_per_s;
    for (const auto& s : p.per_site)
      e["sites"].push_back({{"ranks", s.ranks}, {"site_step_s", s.inner.step_seconds}, {"upload_s", s.upload_s},
                            {"download_s", s.download_s}, {"round_s", s.round_s}, {"exposed_s", s.exposed_s},
                            {"step_s", s.step_s}, {"tokens_per_s", s.tokens_per_s}});
    j["plans"].push_back(e);
  }
  return j;
}

nlohmann::json to_json(const plan::Cluster& c, const plan::Workload& w, const std::vector<plan::StrategyPlan>& plans) {
  nlohmann::json j;
  j["cluster"] = {{"name", c.name}, {"nodes", c.nodes}, {"ranks_per_node", c.ranks_per_node},
                  {"peak_flops_per_rank", c.peak_flops_per_rank}, {"mfu", c.mfu}, {"sources", c.sources},
                  {"collective_floor_s", c.collective_floor_s}};
  for (comm::Tier t : comm::kTiers) {
    const auto& l = c.links[static_cast<int>(t)];
    j["cluster"]["links"][comm::tier_metric_key(t)] = {{"bandwidth_bytes_per_s", l.bandwidth_bytes_per_s},
                                                       {"latency_s", l.latency_s}, {"shared", l.shared}};
  }
  j["workload"] = {{"model", w.params_override > 0 ? "params" : w.model.name},
                   {"params", w.params_override > 0 ? w.params_override : w.model.param_count()},
                   {"batch_per_rank", w.batch_per_rank}, {"grad_accum", w.grad_accum}, {"seq_len", w.seq_len},
                   {"param_bytes", w.param_bytes},
                   {"reduce_bytes", w.reduce_bytes}, {"master_bytes", w.master_bytes}, {"overlap", w.overlap},
                   {"compress", w.compress}, {"compress_block", w.compress_block}, {"sparse_mean", w.sparse_mean},
                   {"federation_overlap", w.round_overlap}, {"slow", w.slow}, {"timed_rounds", w.timed_rounds},
                   {"prefetch", w.prefetch}, {"check_latency_s", w.checks.latency_s},
                   {"check_per_peer_s", w.checks.per_peer_s}};
  for (const auto& p : plans) {
    nlohmann::json e;
    e["strategy"] = p.spec.strategy.name();
    e["label"] = p.spec.label();
    e["groups"] = p.layout.groups();
    e["group_sizes"] = p.layout.group_sizes();
    for (int g = 0; g < p.layout.groups(); ++g) {
      e["shard_sizes"].push_back(p.layout.shard_size(g));
      nlohmann::json gb_;
      for (comm::Tier t : comm::kTiers) {
        gb_["bytes_per_step"][comm::tier_metric_key(t)] = p.groups[g].per_step[static_cast<int>(t)];
        gb_["bytes_per_round"][comm::tier_metric_key(t)] = p.groups[g].per_round[static_cast<int>(t)];
      }
      e["per_group_rank"].push_back(gb_);
    }
    // Every rank's bytes: per step, and per round split into the agreement and each unit's averaging (a
    // streaming round averages some units only), for comparisons with what each rank counted.
    for (const auto& rb : p.ranks) {
      nlohmann::json r;
      for (comm::Tier t : comm::kTiers) {
        r["step"][comm::tier_metric_key(t)] = rb.per_step[static_cast<int>(t)];
        r["round_control"][comm::tier_metric_key(t)] = 0.0;
      }
      r["round_by_unit"] = nlohmann::json::array();
      for (const auto& c : rb.collectives) {
        if (!c.per_round) continue;
        const double bytes = comm::ring_bus_bytes(c.kind, c.full_bytes, c.ranks) * c.count;
        auto& slot = c.unit < 0 ? r["round_control"] : r["round_by_unit"][static_cast<size_t>(c.unit)];
        const std::string key = comm::tier_metric_key(c.tier);
        slot[key] = (slot.is_object() && slot.contains(key) ? slot[key].get<double>() : 0.0) + bytes;
      }
      e["per_rank"].push_back(r);
    }
    e["inter_group_data_bytes_per_round_all_ranks"] = p.inter_group_data_bytes_per_round;
    e["sync_every"] = p.spec.sync_every;
    for (comm::Tier t : comm::kTiers) {
      const int i = static_cast<int>(t);
      e["bytes_per_step"][comm::tier_metric_key(t)] = p.bytes_per_step[i];
      e["bytes_per_round"][comm::tier_metric_key(t)] = p.bytes_per_round[i];
      e["comm_seconds_per_step"][comm::tier_metric_key(t)] = p.comm_seconds_per_step[i];
    }
    e["compute_s"] = p.compute_seconds;
    e["step_comm_s"] = p.step_comm_seconds;
    e["round_comm_s"] = p.round_comm_seconds;
    e["round_exposed_s"] = p.round_exposed_seconds;
    e["step_s"] = p.step_seconds;
    e["tokens_per_s"] = p.tokens_per_second;
    e["speedup_vs_fsdp"] = p.speedup_vs_fsdp;
    e["memory_bytes_per_rank"] = p.memory.total();
    for (const auto& c : p.memory.components) e["memory_by_component"][c.name] = c.bytes;
    e["fits_memory"] = p.fits_memory;
    j["plans"].push_back(e);
  }
  return j;
}

// `fedshard plan --sites`'s flags (plan/sites_plan.h).
void add_sites_options(CLI::App* sub, PlanArgs* a) {
  sub->add_option("--sites", a->sites,
                  "sites as separate jobs through the round server (fedshard serve): SITESxRANKS (4x2) or "
                  "RANKS,RANKS,...; each site runs --strategy (ddp, fsdp, hsdp) as one group, a round every K steps");
  sub->add_option("--site-link", a->site_link,
                  "--sites: each site's uplink, BANDWIDTH,LATENCY (one way), shared by its ranks, e.g. 20Mbit/s,20ms");
  sub->add_option("--server-link", a->server_link,
                  "--sites: each server shard's link, BANDWIDTH,LATENCY[,shared] (shared: the M shards share one)")
      ->capture_default_str();
  sub->add_option("--server-shards", a->server_shards, "--sites: the round server's shards (M of --shard i/M)")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  sub->add_option("--outer", a->outer, "--sites: the server's outer optimizer, fedavg | nesterov (its memory)")
      ->capture_default_str()
      ->check(CLI::IsMember({"fedavg", "nesterov"}));
}

// The flags of `fedshard plan`; returns the two that price --baseline research's checks (refused without it).
std::pair<CLI::Option*, CLI::Option*> add_plan_options(CLI::App* sub, PlanArgs* a) {
  sub->add_flag("--paper", a->paper,
                "the paper's setup: llama3.1-8b on 128 Leonardo nodes (512 A100), 2 x 2048 tokens per GPU, bf16, K=8");
  sub->add_option("--cluster", a->cluster, "cluster preset: leonardo");
  sub->add_option("--nodes", a->nodes, "nodes")->check(kPositive);
  sub->add_option("--ranks-per-node", a->ranks_per_node, "ranks (GPUs) per node")->check(kPositive);
  sub->add_option("--model", a->model, "model preset")->capture_default_str();
  sub->add_option("--params", a->params, "bare parameter count instead of a preset (priced as one unit)")
      ->check(kPositive);
  sub->add_option("--vocab-size", a->vocab, "vocabulary size (needed by tiny/small, which take it from the data)")
      ->check(kPositive);
  sub->add_option("--strategy", a->strategies,
                  "NAME[:S=..,H=..,K=..] (repeatable); default: ddp, fsdp, hsdp, fl-fsdp, fl-hsdp with node-sized "
                  "shards and groups");
  sub->add_option("--group-size", a->group_size, "S for fl-* strategies given without S")->check(kPositive);
  sub->add_option("--groups", a->groups, "S1,S2,... groups of different sizes for fl-* strategies given without S");
  sub->add_option("--shard-size", a->shard_size, "H for hsdp strategies given without H")->check(kPositive);
  sub->add_option("--sync-every", a->sync_every, "K for fl-* strategies given without K")
      ->capture_default_str()
      ->check(CLI::Range(1, 1000000));
  sub->add_option("--batch", a->batch, "sequences per rank per micro-batch")->capture_default_str()->check(kPositive);
  sub->add_option("--grad-accum", a->grad_accum, "micro-batches per rank per step (train.grad_accum)")
      ->capture_default_str()->check(kPositive);
  sub->add_option("--seq", a->seq, "tokens per sequence")->capture_default_str()->check(kPositive);
  sub->add_option("--link", a->links,
                  "TIER=BANDWIDTH,LATENCY[,shared], e.g. inter-group=1Gbit/s,500us (repeatable); shared: the "
                  "bandwidth is a node's uplink, split among its rings that cross it at once");
  sub->add_option("--flops", a->flops, "peak FLOP/s per rank")->check(kPositive);
  sub->add_option("--collective-floor", a->collective_floor,
                  "seconds: the least one data collective takes on this host, however few its bytes (its ranks' comm "
                  "threads need a core: about 0 with a core per thread; measured where ranks outnumber cores, "
                  "docs/cost-model.md section 8.4)")
      ->check(kNonNegative);
  sub->add_option("--mfu", a->mfu, "achieved fraction of peak (default 0.4)")
      ->check(CLI::Range(1e-6, 1.0).description("a fraction in (0, 1]"));
  sub->add_option("--compute-seconds", a->compute_seconds, "measured compute time per step (replaces --flops)")
      ->check(kPositive);
  sub->add_option("--optimizer-seconds", a->optimizer_seconds,
                  "part of --compute-seconds spent in the optimizer step (runs after the reductions)")
      ->check(kNonNegative);
  sub->add_option("--memory-per-rank", a->memory_per_rank,
                  "memory per rank, e.g. 80GB (flags strategies whose estimated peak exceeds it)");
  sub->add_option("--overlap", a->overlap, "on: per-step collectives hide behind compute; off: they add")
      ->check(CLI::IsMember({"on", "off"}));
  sub->add_option("--bytes-per-element", a->bytes, "bytes per gathered element (2 = bf16)")
      ->capture_default_str()
      ->check(CLI::IsMember({1, 2, 4, 8}));
  sub->add_option("--reduce-dtype", a->reduce_dtype,
                  "gradient reductions and the federation average (parallel.reduce_dtype): float32 | bfloat16 | "
                  "float64; default float32, bfloat16 with --paper (the paper's code)")
      ->check(CLI::IsMember({"float32", "bfloat16", "float64"}));
  sub->add_option("--reshard-after-forward", a->reshard_after_forward, "true: 2 gathers per unit per step");
  sub->add_option("--activation-checkpointing", a->activation_checkpointing, "auto | on | off")
      ->check(CLI::IsMember({"auto", "on", "off"}));
  sub->add_option("--compress", a->compress,
                  "federation.compress: none | bf16 | int8 | int4 | topk:D (the round's deltas on the wire)");
  sub->add_option("--compress-block", a->compress_block, "federation.compress_block: elements per block");
  sub->add_option("--sparse-mean", a->sparse_mean,
                  "federation.sparse_mean (topk:D): union (every group's change all-gathered) | sparsified");
  sub->add_option("--federation-overlap", a->federation_overlap,
                  "federation.overlap: none | delayed | streaming:F (the round hides behind the next K steps)");
  sub->add_option("--slow", a->slow, "emulated stragglers as in train: RANK=FACTOR,group:G=FACTOR");
  sub->add_option("--round", a->round, "federation.round: steps | seconds:T (slow groups take fewer steps)");
  sub->add_option("--inner-state", a->inner_state,
                  "federation.inner_state: keep | average (AdamW's moments averaged at every round too) | reset");
  sub->add_option("--baseline", a->baseline,
                  "fedshard: the engine as it runs; research: the research code's settings (FSDP without prefetch, "
                  "TORCH_DISTRIBUTED_DEBUG=DETAIL's Gloo barrier and fingerprint checks before every collective)")
      ->capture_default_str()
      ->check(CLI::IsMember({"fedshard", "research"}));
  auto* latency = sub->add_option("--check-latency-us", a->check_latency_us,
                                  "--baseline research: one small Gloo (TCP) message, one way, in microseconds")
                      ->capture_default_str()
                      ->check(kNonNegative);
  auto* per_peer = sub->add_option("--check-per-peer-us", a->check_per_peer_us,
                                   "--baseline research: rank 0's handling of one peer in the monitored barrier")
                       ->capture_default_str()
                       ->check(kNonNegative);
  add_sites_options(sub, a);
  sub->add_flag("--json", a->json, "print JSON instead of the table");
  return {latency, per_peer};
}

plan::Cluster cluster_of(const PlanArgs& a) {
  plan::Cluster cluster;
  if (a.paper || !a.cluster.empty()) cluster = plan::cluster_preset(a.cluster.empty() ? "leonardo" : a.cluster,
                                                                      a.nodes > 0 ? a.nodes : 128);
  if (a.nodes > 0) cluster.nodes = a.nodes;
  if (a.ranks_per_node > 0) cluster.ranks_per_node = a.ranks_per_node;
  if (a.flops > 0) cluster.peak_flops_per_rank = a.flops;
  if (a.mfu > 0) cluster.mfu = a.mfu;
  cluster.collective_floor_s = a.collective_floor;
  if (!a.memory_per_rank.empty())
    cluster.memory_bytes_per_rank = static_cast<double>(parse_byte_size(a.memory_per_rank));
  for (const auto& l : a.links) {
    const auto eq = l.find('=');
    FS_CHECK(eq != std::string::npos, "--link expects TIER=BANDWIDTH,LATENCY, got '", l, "'");
    cluster.links[static_cast<int>(comm::parse_tier(l.substr(0, eq)))] = comm::parse_link_spec(l.substr(eq + 1));
  }
  return cluster;
}

plan::Workload workload_of(const PlanArgs& a) {
  plan::Workload w;
  if (a.params > 0)
    w.params_override = a.params;
  else
    w.model = model::preset(a.model);
  if (a.vocab > 0) w.model.vocab_size = a.vocab;
  FS_CHECK(w.params_override > 0 || w.model.vocab_size > 0, "model ", a.model,
           " takes its vocabulary from the data: give --vocab-size (258 for the byte tokenizer)");
  FS_CHECK(a.optimizer_seconds <= a.compute_seconds || a.compute_seconds == 0,
           "--optimizer-seconds (", a.optimizer_seconds, ") is part of --compute-seconds (", a.compute_seconds,
           ") and cannot exceed it");
  FS_CHECK(a.optimizer_seconds == 0 || a.compute_seconds > 0, "--optimizer-seconds needs --compute-seconds");
  w.batch_per_rank = a.batch;
  w.grad_accum = a.grad_accum;
  w.seq_len = a.seq;
  w.param_bytes = a.bytes;
  const std::string reduce = !a.reduce_dtype.empty() ? a.reduce_dtype : a.paper ? "bfloat16" : "float32";
  w.reduce_bytes = reduce == "bfloat16" ? 2 : reduce == "float64" ? 8 : 4;
  w.master_bytes = std::max(4, w.reduce_bytes);  // float32 master, float64 when reducing in float64
  w.compute_seconds = a.compute_seconds;
  w.optimizer_seconds = a.optimizer_seconds;
  w.overlap = a.overlap == "on";
  w.reshard_after_forward = a.reshard_after_forward;
  w.activation_checkpointing = a.activation_checkpointing;
  FS_CHECK(a.compress_block > 0 && a.compress_block % 4 == 0, "--compress-block must be a positive multiple of 4, got ",
           a.compress_block);
  federation::parse_overlap(a.federation_overlap);
  if (a.compress != "none") federation::Codec(a.compress, a.compress_block);  // the codec's own checks
  FS_CHECK(a.sparse_mean == "union" || a.sparse_mean == "sparsified", "--sparse-mean must be union or sparsified, got '",
           a.sparse_mean, "'");
  FS_CHECK(a.sites.empty() || !federation::sparse_codec(a.compress) || a.sparse_mean == "sparsified",
           "--sites with --compress ", a.compress, ": the round server sends the averaged change top-k again (give "
           "--sparse-mean sparsified; the union of the sites' changes is not built across sites)");
  w.compress = a.compress;
  w.compress_block = a.compress_block;
  w.sparse_mean = a.sparse_mean;
  w.round_overlap = a.federation_overlap;
  w.slow = a.slow;
  FS_CHECK(a.round == "steps" || a.round.rfind("seconds:", 0) == 0, "--round must be steps or seconds:T, got '",
           a.round, "'");
  w.timed_rounds = a.round != "steps";
  FS_CHECK(a.inner_state == "keep" || a.inner_state == "average" || a.inner_state == "reset",
           "--inner-state must be keep, average or reset, got '", a.inner_state, "'");
  w.inner_state = a.inner_state;
  if (a.baseline == "research") {
    w.prefetch = false;
    w.checks = {a.check_latency_us * 1e-6, a.check_per_peer_us * 1e-6};
  }
  return w;
}

std::vector<plan::StrategySpec> specs_of(const PlanArgs& a, const plan::Cluster& cluster) {
  std::vector<plan::StrategySpec> specs;
  if (a.strategies.empty() || (a.strategies.size() == 1 && a.strategies[0] == "all")) {
    specs = default_specs(a, cluster.world(), cluster.ranks_per_node);
  } else {
    for (const auto& s : a.strategies) {
      auto spec = plan::parse_strategy_spec(s, a.sync_every);
      if (spec.group_size == 0 && spec.strategy.federated) {
        if (!a.groups.empty())
          spec.groups = parse_int_list(a.groups, "--groups");
        else
          spec.group_size = a.group_size;
      }
      if (spec.shard_size == 0 && spec.strategy.inner == parallel::InnerSharding::Hsdp) spec.shard_size = a.shard_size;
      specs.push_back(spec);
    }
  }
  return specs;
}

int run_sites(const PlanArgs& a, const plan::Cluster& cluster, const plan::Workload& w) {
  FS_CHECK(!a.paper && a.nodes == 0, "--sites: a site's nodes follow from --sites and --ranks-per-node (no --nodes, "
           "no --paper)");
  FS_CHECK(a.group_size == 0 && a.groups.empty(), "--sites: each site is one group (no --group-size, no --groups)");
  FS_CHECK(!a.site_link.empty(), "--sites needs --site-link BANDWIDTH,LATENCY (each site's uplink)");
  plan::SitesSpec sites;
  sites.site_ranks = plan::parse_sites_layout(a.sites);
  sites.site_link = comm::parse_link_spec(a.site_link);
  FS_CHECK(!sites.site_link.shared, "--site-link is the site's own uplink, already shared by its ranks: drop ',shared'");
  sites.server_link = comm::parse_link_spec(a.server_link);
  sites.server_shards = a.server_shards;
  sites.outer = a.outer;
  std::vector<plan::SitesPlan> plans;
  const std::vector<std::string> names = a.strategies.empty() ? std::vector<std::string>{"fsdp"} : a.strategies;
  for (const auto& name : names) {
    auto spec = plan::parse_strategy_spec(name, a.sync_every);
    if (spec.shard_size == 0 && spec.strategy.inner == parallel::InnerSharding::Hsdp) spec.shard_size = a.shard_size;
    plans.push_back(plan::plan_sites(cluster, w, spec, sites));
  }
  if (a.json)
    std::cout << sites_json(w, plans).dump(2) << std::endl;
  else
    print_sites_table(cluster, w, plans);
  return 0;
}

}  // namespace

Command add_plan(CLI::App& app) {
  auto a = std::make_shared<PlanArgs>();
  Command c;
  c.app = app.add_subcommand("plan", "Predict bytes, time and throughput per strategy with the alpha-beta cost model");
  const auto [latency, per_peer] = add_plan_options(c.app, a.get());
  c.run = [a, app = c.app, latency = latency, per_peer = per_peer] {
    FS_CHECK(a->baseline == "research" || (latency->count() == 0 && per_peer->count() == 0),
             "--check-latency-us and --check-per-peer-us price --baseline research's checks; add --baseline research");
    const auto cluster = cluster_of(*a);
    const auto w = workload_of(*a);
    if (!a->sites.empty()) return run_sites(*a, cluster, w);
    for (const char* name : {"--site-link", "--server-link", "--server-shards", "--outer"})
      FS_CHECK(app->get_option(name)->count() == 0, name, " prices sites: add --sites");
    const auto plans = plan::plan_all(cluster, w, specs_of(*a, cluster));
    if (a->json)
      std::cout << to_json(cluster, w, plans).dump(2) << std::endl;
    else
      print_table(cluster, w, plans);
    return 0;
  };
  return c;
}

}  // namespace fedshard::cli
