#include "plan/cost_model.h"

#include <algorithm>
#include <map>
#include <set>
#include <sstream>

#include "federation/codec.h"
#include "federation/schedule.h"
#include "parallel/slow_ranks.h"
#include "util/error.h"

namespace fedshard::plan {

std::string StrategySpec::label() const {
  std::ostringstream os;
  os << strategy.name();
  if (strategy.federated && !groups.empty()) os << " S=" << comm::Layout(groups, 0).describe_groups();
  if (strategy.federated && groups.empty()) os << " S=" << group_size;
  if (strategy.inner == parallel::InnerSharding::Hsdp) os << " H=" << shard_size;
  if (strategy.federated) os << " K=" << sync_every;
  return os.str();
}

StrategySpec parse_strategy_spec(const std::string& text, int default_sync_every) {
  StrategySpec s;
  s.sync_every = default_sync_every;
  const auto colon = text.find(':');
  s.strategy = parallel::parse_strategy(text.substr(0, colon));
  if (colon == std::string::npos) return s;
  std::stringstream ss(text.substr(colon + 1));
  for (std::string item; std::getline(ss, item, ',');) {
    const auto eq = item.find('=');
    FS_CHECK(eq != std::string::npos, "strategy '", text, "': expected KEY=VALUE after ':', got '", item, "'");
    const std::string key = item.substr(0, eq);
    int value = 0;
    try {
      value = std::stoi(item.substr(eq + 1));
    } catch (const std::exception&) {
      throw Error(cat("strategy '", text, "': ", key, " must be an integer"));
    }
    FS_CHECK(value > 0, "strategy '", text, "': ", key, " must be positive");
    if (key == "S")
      s.group_size = value;
    else if (key == "H")
      s.shard_size = value;
    else if (key == "K")
      s.sync_every = value;
    else
      throw Error(cat("strategy '", text, "': unknown parameter '", key, "' (S, H or K)"));
  }
  return s;
}

Cluster cluster_preset(const std::string& name, int nodes) {
  FS_CHECK(name == "leonardo", "unknown cluster preset '", name, "' (known: leonardo)");
  Cluster c;
  c.name = "leonardo";
  c.nodes = nodes;
  c.ranks_per_node = 4;
  // NVLink 3 between the 4 A100s of a node: 600 GB/s bidirectional per GPU, i.e. 300 GB/s each way.
  c.links[static_cast<int>(comm::Tier::Node)] = {300e9, 5e-6};
  // 2 dual-port HDR NICs per node, 400 Gbit/s aggregated: 100 Gbit/s = 12.5 GB/s per GPU.
  c.links[static_cast<int>(comm::Tier::InterNode)] = {12.5e9, 10e-6};
  // Groups are nodes (or sets of nodes) on the same HDR Dragonfly+ fabric.
  c.links[static_cast<int>(comm::Tier::InterGroup)] = {12.5e9, 10e-6};
  c.peak_flops_per_rank = 312e12;  // A100 dense BF16 tensor-core peak
  c.mfu = 0.4;
  c.memory_bytes_per_rank = 64e9;
  c.sources = {
      "4x A100 SXM4 64 GB + 2x dual-port HDR (400 Gbit/s aggregated) per Booster node: "
      "https://leonardo-supercomputer.cineca.eu/hpc-system",
      "NVLink 3: 600 GB/s total per A100 (NVIDIA A100 datasheet); 300 GB/s per direction used here",
      "A100 BF16 dense peak 312 TFLOP/s (NVIDIA A100 datasheet)",
      "latencies (5 us NVLink, 10 us HDR per ring step) and MFU 0.4 are assumptions, not measurements",
  };
  return c;
}

std::vector<int64_t> unit_params(const Workload& w) {
  if (w.params_override > 0) return {w.params_override};
  const auto& m = w.model;
  std::vector<int64_t> units;
  // Tied embeddings put the head's norm into the embedding's unit (one FlatParam, two call sites).
  units.push_back(m.embedding_params() + (m.tie_embeddings ? m.dim : 0));
  for (int64_t i = 0; i < m.n_layers; ++i) units.push_back(m.params_per_block());
  if (!m.tie_embeddings) units.push_back(m.head_params());
  return units;
}

namespace {

// Forward FLOPs per token of each unit, in unit_params order (the embedding lookup does none).
std::vector<double> unit_forward_flops(const Workload& w) {
  if (w.params_override > 0) return {2.0 * static_cast<double>(w.params_override)};
  const auto& m = w.model;
  std::vector<double> f;
  f.push_back(m.tie_embeddings ? 2.0 * static_cast<double>(m.vocab_size * m.dim) : 0.0);  // tied: the head's matmul
  const double block = 2.0 * static_cast<double>(m.params_per_block() - 2 * m.dim) +
                       4.0 * static_cast<double>(w.seq_len * m.dim);
  for (int64_t i = 0; i < m.n_layers; ++i) f.push_back(block);
  if (!m.tie_embeddings) f.push_back(2.0 * static_cast<double>(m.vocab_size * m.dim));
  return f;
}

}  // namespace

double CollectiveChecks::seconds(int ranks) const {
  if (ranks <= 1) return 0;
  return 2 * latency_s + 2.0 * (ranks - 1) * (per_peer_s + latency_s);
}

double simulate_step(const std::vector<UnitTimes>& u, bool recompute, double serial_seconds, bool prefetch) {
  double queue_free = 0;
  auto issue = [&](double at, double d) {
    queue_free = std::max(at, queue_free) + d;
    return queue_free;
  };
  const size_t n = u.size();
  std::vector<double> gathered(n, -1);  // completion time of the unit's gather; -1: not gathered
  double t = 0;
  auto gather = [&](size_t k) {
    if (k >= n || gathered[k] >= 0) return;
    if (u[k].gather <= 0) {
      gathered[k] = t;
      return;
    }
    t += u[k].shard_check;
    gathered[k] = issue(t, u[k].gather);
  };
  for (size_t k = 0; k < n; ++k) {
    gather(k);
    if (prefetch) gather(k + 1);
    t = std::max(t, gathered[k]) + u[k].fwd;
    if (u[k].freed_after_forward) gathered[k] = -1;
  }
  double reductions_done = 0;
  for (size_t k = n; k-- > 0;) {
    gather(k);
    if (prefetch && k > 0) gather(k - 1);
    t = std::max(t, gathered[k]) + (recompute ? u[k].fwd : 0.0) + u[k].bwd;
    double done = t;
    if (u[k].reduce > 0) {
      t += u[k].shard_check;
      done = issue(t, u[k].reduce);
    }
    if (u[k].replica > 0) {
      t += u[k].replica_check;
      done = issue(t, u[k].replica);
    }
    reductions_done = std::max(reductions_done, done);
  }
  t = std::max(t, reductions_done);
  return issue(t, serial_seconds);
}

namespace {

// Every instance of one communicator kind, each as its members in ring order (topology.cpp splits them so).
std::vector<std::vector<int>> instances(const comm::Layout& l, const std::string& kind) {
  std::set<std::vector<int>> all;
  if (kind == "segment") {
    for (const auto& seg : l.segments()) all.insert(seg.ranks);
  } else {
    for (int q = 0; q < l.world(); ++q)
      all.insert(kind == "shard" ? l.shard_members(q) : kind == "replica" ? l.replica_members(q) : l.group_members(q));
  }
  return {all.begin(), all.end()};
}

// On a shared link (a node's uplink) the instances of a kind run the same collective at once, so a node's
// bandwidth is split among the ring hops leaving it; `ring` moves at the pace of its most crowded hop.
// Its ring hops only: a ring that never leaves a node pays no share.
int uplink_flows(const comm::Layout& l, const std::vector<int>& ring, const std::vector<std::vector<int>>& all) {
  std::map<int, int> leaving;  // node -> hops leaving it at once
  for (const auto& r : all)
    for (size_t i = 0; r.size() > 1 && i < r.size(); ++i)
      if (l.node_of(r[i]) != l.node_of(r[(i + 1) % r.size()])) ++leaving[l.node_of(r[i])];
  int most = 1;
  for (size_t i = 0; ring.size() > 1 && i < ring.size(); ++i)
    if (l.node_of(ring[i]) != l.node_of(ring[(i + 1) % ring.size()]))
      most = std::max(most, leaving[l.node_of(ring[i])]);
  return most;
}

}  // namespace

double data_seconds(const Cluster& cluster, const comm::LinkSpec& link, comm::Collective kind, double bytes, int p) {
  return p > 1 ? std::max(cluster.collective_floor_s, link.seconds(kind, bytes, p)) : 0.0;
}

comm::LinkSpec ring_link(const Cluster& cluster, const comm::Layout& l, const std::string& kind,
                         const std::vector<int>& members) {
  comm::LinkSpec link = cluster.links[static_cast<int>(l.tier(members))];
  if (link.shared) link.bandwidth_bytes_per_s /= uplink_flows(l, members, instances(l, kind));
  return link;
}

namespace {

// One rank's collectives as the plan prices them, each on its communicator's link.
class RankPricer {
 public:
  // A communicator as the plan prices it: its size and tier, worked out once.
  struct Comm {
    std::string name;
    int size;
    comm::Tier tier;
    comm::LinkSpec link;
  };
  RankPricer(const comm::Layout& l, const Cluster& cluster, RankBytes& out) : l_(l), cluster_(cluster), out_(out) {}
  Comm make(const std::string& name, const std::vector<int>& members) const {
    return Comm{name, static_cast<int>(members.size()), l_.tier(members), ring_link(cluster_, l_, name, members)};
  }
  void add(const Comm& c, comm::Collective kind, double bytes, bool per_round, bool control, int unit = -1) {
    if (c.size <= 1) return;
    CollectiveCost cc;
    cc.unit = unit;
    cc.comm = c.name;
    cc.tier = c.tier;
    cc.kind = kind;
    cc.full_bytes = bytes;
    cc.ranks = c.size;
    cc.per_round = per_round;
    cc.control = control;
    // Control all-reduces of a few scalars go through MPI's own latency-bound algorithms, not our rings.
    cc.seconds = control ? c.link.seconds(kind, bytes, c.size) : data_seconds(cluster_, c.link, kind, bytes, c.size);
    out_.collectives.push_back(cc);
  }

 private:
  const comm::Layout& l_;
  const Cluster& cluster_;
  RankBytes& out_;
};

using PricedSegments = std::vector<std::pair<comm::Segment, RankPricer::Comm>>;

// A round's collectives of unit u (its padded size) for a rank holding `shard_len` of it. Mirrors Aggregator.
void price_round(RankPricer& p, const comm::Layout& l, const Workload& w, const PricedSegments& segments,
                 const RankPricer::Comm& replica, size_t u, double padded, double shard_len) {
  const int unit = static_cast<int>(u);
  for (const auto& [seg, c] : segments) {
    const auto [sa, sb] = l.segment_range(seg, static_cast<int64_t>(padded));
    if (w.compress == "none") {
      p.add(c, comm::Collective::AllReduce, static_cast<double>(sb - sa) * w.reduce_bytes, true, false, unit);
      continue;
    }
    // Mirrors Aggregator::issue_compressed: G chunks of whole granules, all-to-all then all-gather; topk:D's union
    // mean: the whole piece in whole granules, all-gathered.
    const federation::Codec codec(w.compress, w.compress_block);
    const int64_t g = c.size, granule = codec.granule();
    if (federation::sparse_codec(w.compress) && w.sparse_mean == "union") {
      const int64_t piece = (sb - sa + granule - 1) / granule * granule;
      p.add(c, comm::Collective::AllGather, static_cast<double>(g * codec.encoded_bytes(piece)), true, false, unit);
      continue;
    }
    const int64_t chunk = (sb - sa + g * granule - 1) / (g * granule) * granule;
    const double wire = static_cast<double>(g * codec.encoded_bytes(chunk));
    p.add(c, comm::Collective::AllToAll, wire, true, false, unit);
    p.add(c, comm::Collective::AllGather, wire, true, false, unit);
  }
  p.add(replica, comm::Collective::AllGather, shard_len * w.master_bytes, true, false, unit);
  // Mirrors Aggregator::average_state: AdamW's exp_avg and exp_avg_sq, averaged as a plain round in the master
  // dtype and gathered over `replica`.
  if (w.inner_state != "average") return;
  for (int moment = 0; moment < 2; ++moment) {
    for (const auto& [seg, c] : segments) {
      const auto [sa, sb] = l.segment_range(seg, static_cast<int64_t>(padded));
      p.add(c, comm::Collective::AllReduce, static_cast<double>(sb - sa) * w.master_bytes, true, false, unit);
    }
    p.add(replica, comm::Collective::AllGather, shard_len * w.master_bytes, true, false, unit);
  }
}

}  // namespace

RankBytes rank_bytes(const comm::Layout& l, int rank, const Cluster& cluster, const Workload& w, const StrategySpec& s) {
  RankBytes out;
  RankPricer p(l, cluster, out);
  const int H = l.shard_size(l.coords(rank).group);
  const auto shard = p.make("shard", l.shard_members(rank)), replica = p.make("replica", l.replica_members(rank)),
             group = p.make("group", l.group_members(rank));
  PricedSegments segments;
  if (l.groups() > 1)
    for (const auto& seg : l.segments())
      if (std::count(seg.ranks.begin(), seg.ranks.end(), rank)) segments.emplace_back(seg, p.make("segment", seg.ranks));

  const bool recompute = w.activation_checkpointing == "on" || (w.activation_checkpointing == "auto" && H > 1);
  const auto units = unit_params(w);
  const bool tied = w.params_override == 0 && w.model.tie_embeddings;
  const int64_t L = l.pad_multiple();
  for (size_t u = 0; u < units.size(); ++u) {
    const double padded = static_cast<double>((units[u] + L - 1) / L * L);
    const int call_sites = (tied && u == 0) ? 2 : 1;
    // Mirrors ShardedUnit: a second gather in backward only when the unit was freed after forward.
    const int gathers = recompute && w.reshard_after_forward && call_sites == 1 ? 2 : 1;
    // Every micro-batch gathers again (ShardedUnit: the reduction waits for the last one, with sync on).
    for (int k = 0; k < gathers * w.grad_accum; ++k)
      p.add(shard, comm::Collective::AllGather, padded * w.param_bytes, false, false);
    p.add(shard, comm::Collective::ReduceScatter, padded * w.reduce_bytes, false, false);
    const auto [a, b] = l.shard_range(static_cast<int64_t>(padded), rank);
    const double shard_len = static_cast<double>(b - a);
    p.add(replica, comm::Collective::AllReduce, shard_len * w.reduce_bytes, false, false);
    if (s.strategy.federated) price_round(p, l, w, segments, replica, u, padded, shard_len);
  }
  p.add(shard, comm::Collective::AllReduce, 8, false, true);  // global grad norm
  p.add(group, comm::Collective::AllReduce, 32, false, true);  // logged loss, stop request, round time up, non-finite
  if (s.strategy.federated)
    for (const auto& [seg, c] : segments)  // weight, votes, every group's step and flags (Aggregator::agree)
      p.add(c, comm::Collective::AllReduce, (8.0 + 2 * l.groups()) * 8, true, true);
  for (const auto& c : out.collectives)
    (c.per_round ? out.per_round : out.per_step)[static_cast<int>(c.tier)] +=
        comm::ring_bus_bytes(c.kind, c.full_bytes, c.ranks) * c.count;
  return out;
}

namespace {

// The layout the strategy cuts the cluster into, and every rank's collectives with their bytes.
void plan_layout(StrategyPlan& p, const Cluster& cluster, const Workload& w, const StrategySpec& s) {
  const int world = cluster.world();
  p.layout = parallel::make_layout(s.strategy, world, s.groups, s.group_size, s.shard_size);
  p.layout.place_on_nodes(cluster.ranks_per_node);
  const auto& l = p.layout;
  if (l.equal_groups()) p.spec.group_size = l.group_size(0);
  p.spec.shard_size = l.shard_size(0);
  for (int r = 0; r < world; ++r) {
    auto b = rank_bytes(l, r, cluster, w, s);
    for (const auto& c : b.collectives)
      if (!c.control && c.per_round && c.tier == comm::Tier::InterGroup)
        p.inter_group_data_bytes_per_round += comm::ring_bus_bytes(c.kind, c.full_bytes, c.ranks) * c.count;
    if (r == l.first_rank(l.coords(r).group)) p.groups.push_back(b);
    p.ranks.push_back(std::move(b));
  }
  p.collectives = p.groups.front().collectives;
}

// Each unit's per-step collectives on group 0's first rank (gather, reduce, replica all-reduce, checks); the
// rank's shard of all units and the largest padded unit, for the memory of a bare parameter count.
std::vector<UnitTimes> unit_comm_times(const StrategyPlan& p, const Cluster& cluster, const Workload& w, bool recompute,
                                       double& shard_total, double& largest) {
  const auto& l = p.layout;
  const auto units = unit_params(w);
  const bool tied = w.params_override == 0 && w.model.tie_embeddings;
  const int64_t L = l.pad_multiple();
  const auto shard = l.shard_members(0), replica = l.replica_members(0);
  const auto shard_link = ring_link(cluster, l, "shard", shard);
  const auto replica_link = ring_link(cluster, l, "replica", replica);
  auto one = [&](const std::vector<int>& members, const comm::LinkSpec& link, comm::Collective kind, double bytes) {
    const int n = static_cast<int>(members.size());
    return n > 1 ? data_seconds(cluster, link, kind, bytes, n) : 0.0;
  };
  shard_total = 0;
  largest = 0;
  std::vector<UnitTimes> times(units.size());
  for (size_t u = 0; u < units.size(); ++u) {
    const double padded = static_cast<double>((units[u] + L - 1) / L * L);
    largest = std::max(largest, padded);
    const int call_sites = (tied && u == 0) ? 2 : 1;
    times[u].gather = one(shard, shard_link, comm::Collective::AllGather, padded * w.param_bytes);
    times[u].reduce = one(shard, shard_link, comm::Collective::ReduceScatter, padded * w.reduce_bytes);
    const auto [a, b] = l.shard_range(static_cast<int64_t>(padded), 0);
    shard_total += static_cast<double>(b - a);
    times[u].replica =
        one(replica, replica_link, comm::Collective::AllReduce, static_cast<double>(b - a) * w.reduce_bytes);
    times[u].freed_after_forward = recompute && w.reshard_after_forward && call_sites == 1;
    times[u].shard_check = w.checks.seconds(static_cast<int>(shard.size()));
    times[u].replica_check = w.checks.seconds(static_cast<int>(replica.size()));
  }
  return times;
}

// Bytes and seconds per step and per round, per tier (a round's spread over its K steps); returns the round's
// control seconds (its agreement, which no overlap hides).
double sum_collectives(StrategyPlan& p, const Workload& w, double k) {
  double round_control_seconds = 0;
  for (const auto& c : p.collectives) {
    const double secs = (c.seconds + w.checks.seconds(c.ranks)) * c.count;
    if (c.per_round && c.control) round_control_seconds += secs;
    const int t = static_cast<int>(c.tier);
    const double bytes = comm::ring_bus_bytes(c.kind, c.full_bytes, c.ranks) * c.count;
    if (c.per_round) {
      p.bytes_per_round[t] += bytes;
      p.round_comm_seconds += secs;
      p.bytes_per_step[t] += bytes / k;
      p.comm_seconds_per_step[t] += secs / k;
    } else {
      p.bytes_per_step[t] += bytes;
      p.step_comm_seconds += secs;
      p.comm_seconds_per_step[t] += secs;
    }
  }
  return round_control_seconds;
}

// The step's compute, measured or from FLOPs, shared out to the units' forward and backward by their FLOPs.
void compute_times(StrategyPlan& p, const Cluster& cluster, const Workload& w, bool recompute,
                   std::vector<UnitTimes>& times) {
  const double tokens_per_rank = static_cast<double>(w.batch_per_rank * w.seq_len * w.grad_accum);
  const auto flops = unit_forward_flops(w);
  double forward_flops = 0;
  for (double f : flops) forward_flops += f;
  const double passes = recompute ? 4.0 : 3.0;  // forward, backward (2x), recomputed forward
  if (w.compute_seconds > 0) {
    p.compute_seconds = w.compute_seconds;
  } else {
    FS_CHECK(cluster.peak_flops_per_rank > 0 && cluster.mfu > 0,
             "plan needs a compute rate: --flops (peak FLOP/s per rank) with --mfu, or --compute-seconds");
    p.compute_seconds = passes * forward_flops * tokens_per_rank / (cluster.peak_flops_per_rank * cluster.mfu);
  }
  FS_CHECK(w.optimizer_seconds >= 0 && w.optimizer_seconds < p.compute_seconds,
           "the optimizer time must be part of the compute time");
  const double pass_seconds = p.compute_seconds - w.optimizer_seconds;
  for (size_t u = 0; u < times.size(); ++u) {
    const double share = forward_flops > 0 ? flops[u] / forward_flops : 1.0 / static_cast<double>(times.size());
    times[u].fwd = share * pass_seconds / passes / w.grad_accum;  // one micro-batch's
    times[u].bwd = 2.0 * times[u].fwd;
  }
}

// Stragglers: a group runs at the pace of its slowest rank. Rounds every K steps make every group wait for the
// slowest one; time-based rounds let each group take the steps its pace allows (a round still costs its exposed
// time once per fastest group's K steps).
void slow_ranks_pace(StrategyPlan& p, const Cluster& cluster, const Workload& w, double inner, double round_exposed,
                     double k) {
  const auto& l = p.layout;
  const int world = cluster.world();
  const double tokens_per_rank = static_cast<double>(w.batch_per_rank * w.seq_len * w.grad_accum);
  const auto slow = parallel::slow_factors(w.slow, l);
  if (*std::max_element(slow.begin(), slow.end()) <= 1) return;
  std::vector<double> pace(static_cast<size_t>(l.groups()), 1.0);
  for (int r = 0; r < world; ++r) {
    auto& f = pace[static_cast<size_t>(l.coords(r).group)];
    f = std::max(f, slow[static_cast<size_t>(r)]);
  }
  const double slowest = *std::max_element(pace.begin(), pace.end());
  if (!w.timed_rounds) {
    p.step_seconds = inner * slowest + round_exposed / k;
    p.tokens_per_second = tokens_per_rank * world / p.step_seconds;
    return;
  }
  p.tokens_per_second = 0;
  for (int g = 0; g < l.groups(); ++g)
    p.tokens_per_second += tokens_per_rank * l.group_size(g) / (inner * pace[static_cast<size_t>(g)] + round_exposed / k);
  p.step_seconds = inner + round_exposed / k;
}

MemoryEstimate plan_memory(const StrategyPlan& p, const Workload& w, const StrategySpec& s, bool recompute,
                           double shard_total, double largest) {
  MemoryEstimate e;
  if (w.params_override > 0) {
    // A bare parameter count has no architecture to size activations by: the shard's float32 master,
    // gradient and AdamW moments, and two gathered units.
    e.components = {{"state", 16.0 * shard_total}, {"gathered", 2.0 * largest * w.param_bytes}};
    return e;
  }
  MemoryInputs m;
  m.model = w.model;
  m.shard = p.layout.shard_size(0);
  m.replicas = p.layout.replicas(0);
  m.batch = w.batch_per_rank;
  m.seq_len = w.seq_len;
  m.master_bytes = w.master_bytes;
  m.compute_bytes = w.param_bytes;
  m.reduce_bytes = w.reduce_bytes;
  m.recompute = recompute;
  m.reshard_after_forward = w.reshard_after_forward;
  m.federated = s.strategy.federated;
  m.round_copy = w.compress != "none" || w.round_overlap != "none" || w.reduce_bytes < w.master_bytes;
  m.residuals = w.compress != "none";
  m.runtime_bytes = 0.5e9;  // the CUDA context of a GPU rank (plans are for GPU clusters)
  return estimate_memory(m);
}

}  // namespace

StrategyPlan plan_strategy(const Cluster& cluster, const Workload& w, const StrategySpec& s) {
  StrategyPlan p;
  p.spec = s;
  plan_layout(p, cluster, w, s);
  const int H = p.layout.shard_size(0);
  const bool recompute = w.activation_checkpointing == "on" || (w.activation_checkpointing == "auto" && H > 1);
  double shard_total = 0, largest = 0;
  auto times = unit_comm_times(p, cluster, w, recompute, shard_total, largest);
  const double k = s.strategy.federated ? s.sync_every : 1.0;
  const double round_control_seconds = sum_collectives(p, w, k);
  compute_times(p, cluster, w, recompute, times);
  // The micro-batches before the last reduce nothing.
  auto accumulating = times;
  for (auto& t : accumulating) t.reduce = t.replica = 0;
  double control_seconds = 0;
  for (const auto& c : p.collectives)
    if (c.control && !c.per_round) control_seconds += c.seconds + w.checks.seconds(c.ranks);
  // A plain aggregation round has no compute to hide behind: it adds its whole time every K steps. Left in
  // flight (delayed, or streaming's F fragments of 1/F each every K/F steps) its data moves on the federation
  // lane during the next K steps and only what does not fit shows; the weight/stop agreement always shows.
  const double inner = w.overlap ? (w.grad_accum - 1) * simulate_step(accumulating, recompute, 0.0, w.prefetch) +
                                       simulate_step(times, recompute, control_seconds + w.optimizer_seconds,
                                                     w.prefetch)
                                 : p.compute_seconds + p.step_comm_seconds;
  double round_exposed = p.round_comm_seconds;
  if (w.round_overlap != "none")
    round_exposed = round_control_seconds + std::max(0.0, p.round_comm_seconds - round_control_seconds - k * inner);
  p.round_exposed_seconds = round_exposed;
  p.step_seconds = inner + round_exposed / k;
  const double tokens_per_rank = static_cast<double>(w.batch_per_rank * w.seq_len * w.grad_accum);
  p.tokens_per_second = tokens_per_rank * cluster.world() / p.step_seconds;
  slow_ranks_pace(p, cluster, w, inner, round_exposed, k);
  p.memory = plan_memory(p, w, s, recompute, shard_total, largest);
  p.fits_memory = cluster.memory_bytes_per_rank <= 0 || p.memory.total() <= cluster.memory_bytes_per_rank;
  return p;
}

std::vector<StrategyPlan> plan_all(const Cluster& cluster, const Workload& w, const std::vector<StrategySpec>& specs) {
  std::vector<StrategyPlan> out;
  for (const auto& s : specs) out.push_back(plan_strategy(cluster, w, s));
  double fsdp = 0;
  for (const auto& p : out)
    if (fsdp == 0 && !p.spec.strategy.federated && p.spec.strategy.inner == parallel::InnerSharding::Fsdp)
      fsdp = p.tokens_per_second;
  for (auto& p : out) p.speedup_vs_fsdp = fsdp > 0 ? p.tokens_per_second / fsdp : 0.0;
  return out;
}

}  // namespace fedshard::plan
