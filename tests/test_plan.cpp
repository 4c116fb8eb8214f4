// The cost model against hand-computed values: DESIGN.md's per-strategy byte formulas (with padding), the
// alpha-beta times, the tier classification of the paper's layouts.
#include <gtest/gtest.h>

#include "plan/cost_model.h"
#include "plan/sites_plan.h"
#include "util/error.h"

using namespace fedshard;
using comm::Tier;

namespace {

plan::Cluster box(int nodes, int rpn) {
  plan::Cluster c;
  c.nodes = nodes;
  c.ranks_per_node = rpn;
  c.links[0] = {100e9, 2e-6};
  c.links[1] = {10e9, 10e-6};
  c.links[2] = {1e9, 500e-6};
  c.peak_flops_per_rank = 1e12;
  c.mfu = 0.5;
  return c;
}

plan::Workload one_unit(int64_t params, int bytes = 2) {
  plan::Workload w;
  w.params_override = params;
  w.param_bytes = w.reduce_bytes = w.master_bytes = bytes;
  w.batch_per_rank = 1;
  w.seq_len = 128;
  return w;
}

// Data bytes only (the formulas leave out the 8-byte control scalars).
std::array<double, 3> data_bytes(const plan::StrategyPlan& p, bool per_round) {
  std::array<double, 3> b{};
  for (const auto& c : p.collectives)
    if (!c.control && c.per_round == per_round)
      b[static_cast<int>(c.tier)] += comm::ring_bus_bytes(c.kind, c.full_bytes, c.ranks) * c.count;
  return b;
}

plan::StrategyPlan run(const plan::Cluster& c, const plan::Workload& w, const std::string& spec) {
  return plan::plan_strategy(c, w, plan::parse_strategy_spec(spec, 8));
}

}  // namespace

TEST(CostModel, BytesFollowDesignFormulasWithPadding) {
  const auto c = box(4, 4);  // N = 16
  const int64_t psi = 1000003;  // not a multiple of anything: padding matters
  const double b = 2;
  auto padded = [&](int s) { return double((psi + s - 1) / s * s); };
  const auto w = one_unit(psi);
  {
    const auto p = run(c, w, "ddp");
    EXPECT_DOUBLE_EQ(data_bytes(p, false)[int(Tier::InterNode)], 2.0 * 15 / 16 * padded(16) * b);
  }
  {
    const auto p = run(c, w, "fsdp");
    EXPECT_DOUBLE_EQ(data_bytes(p, false)[int(Tier::InterNode)], 3.0 * 15 / 16 * padded(16) * b);
  }
  {
    const auto p = run(c, w, "hsdp:H=4");  // shard within a node, 4 replicas across nodes
    const double P = padded(16);
    EXPECT_DOUBLE_EQ(data_bytes(p, false)[int(Tier::Node)], 3.0 * 3 / 4 * P * b);
    EXPECT_DOUBLE_EQ(data_bytes(p, false)[int(Tier::InterNode)], 2.0 * 3 / 4 * P * b / 4);
  }
  {
    const auto p = run(c, w, "fl-fsdp:S=4");  // 4 groups of one node
    const double P = padded(4);
    EXPECT_DOUBLE_EQ(data_bytes(p, false)[int(Tier::Node)], 3.0 * 3 / 4 * P * b);
    EXPECT_DOUBLE_EQ(data_bytes(p, true)[int(Tier::InterGroup)], 2.0 * 3 / 4 * P * b / 4);
    EXPECT_DOUBLE_EQ(p.bytes_per_step[int(Tier::InterGroup)], p.bytes_per_round[int(Tier::InterGroup)] / 8);
  }
  {
    const auto p = run(c, w, "fl-hsdp:S=8,H=4");  // 2 groups of 2 nodes, shards within nodes
    const double P = padded(8), G = 2, R = 2, H = 4, S = 8;
    EXPECT_DOUBLE_EQ(data_bytes(p, false)[int(Tier::Node)], 3.0 * (H - 1) / H * P * b);
    EXPECT_DOUBLE_EQ(data_bytes(p, false)[int(Tier::InterNode)], 2.0 * (R - 1) / R * P * b / H);
    EXPECT_DOUBLE_EQ(data_bytes(p, true)[int(Tier::InterGroup)], 2.0 * (G - 1) / G * P * b / S);
    EXPECT_DOUBLE_EQ(data_bytes(p, true)[int(Tier::InterNode)], (R - 1) / R * P * b / H);
  }
  {
    plan::Workload keep = w;
    keep.reshard_after_forward = false;  // DESIGN: replace 3 by 2
    const auto p = run(c, keep, "fsdp");
    EXPECT_DOUBLE_EQ(data_bytes(p, false)[int(Tier::InterNode)], 2.0 * 15 / 16 * padded(16) * b);
  }
}


// topk:D rounds, by hand: the union mean all-gathers each rank's whole piece in whole blocks, (G - 1) of its
// encodings leaving each rank; the sparsified mean sends G chunks, all-to-all then all-gather, 2 (G - 1) chunks.
TEST(CostModel, SparseRoundsPriceTheUnionAndTheSparsifiedMean) {
  const auto c = box(4, 4);
  const int64_t psi = 1000003;
  auto w = one_unit(psi, 4);
  w.compress = "topk:0.016";
  w.compress_block = 4096;
  // k = ceil(0.016 x 4096) = 66 entries of 12 + 2 bits after a 4-byte header.
  const double block_bytes = 4 + std::ceil(66 * 14 / 8.0);
  const double L = double((psi + 3) / 4 * 4) / 4, G = 4;  // rank 0's slice: one segment of 4 groups of 4 ranks
  const auto p = run(c, w, "fl-fsdp:S=4");
  EXPECT_DOUBLE_EQ(data_bytes(p, true)[int(Tier::InterGroup)], (G - 1) * std::ceil(L / 4096) * block_bytes);
  w.sparse_mean = "sparsified";
  const auto q = run(c, w, "fl-fsdp:S=4");
  EXPECT_DOUBLE_EQ(data_bytes(q, true)[int(Tier::InterGroup)], 2 * (G - 1) * std::ceil(L / (G * 4096)) * block_bytes);
}
TEST(CostModel, AlphaBetaTimesAndStepTime) {
  const auto c = box(1, 4);
  const int64_t psi = 4000000;
  auto w = one_unit(psi, 4);
  w.compute_seconds = 0.010;
  const auto p = run(c, w, "fsdp");
  // Per step: 2 all-gathers + 1 reduce-scatter of 16 MB over 4 ranks on the node link (3 ring steps each),
  // plus the 8-byte gradient norm and the 32-byte loss + stop flag + time-up + non-finite all-reduces (6 ring
  // steps each).
  const double one = 3 * 2e-6 + 0.75 * 16e6 / 100e9;
  const double control = 6 * 2e-6 + 2 * 0.75 * 8 / 100e9 + 6 * 2e-6 + 2 * 0.75 * 32 / 100e9;
  EXPECT_NEAR(p.step_comm_seconds, 3 * one + control, 1e-12);
  // One unit leaves nothing to overlap: the schedule is gather, forward, gather, recompute + backward,
  // reduce-scatter, control, with or without overlap.
  EXPECT_NEAR(p.step_seconds, 0.010 + 3 * one + control, 1e-12);
  w.overlap = false;
  EXPECT_NEAR(run(c, w, "fsdp").step_seconds, 0.010 + 3 * one + control, 1e-12);
  // Compute from FLOPs: 4 passes (recompute) x 2 * params per token x 128 tokens / (1e12 * 0.5).
  w.compute_seconds = 0;
  EXPECT_NEAR(run(c, w, "fsdp").compute_seconds, 4 * 2.0 * psi * 128 / 0.5e12, 1e-12);
  EXPECT_NEAR(run(c, w, "ddp").compute_seconds, 3 * 2.0 * psi * 128 / 0.5e12, 1e-12);
}

TEST(CostModel, StepScheduleOfTwoShardedUnitsByHand) {
  // gather 1 s, forward 2 s, reduce 1 s per unit (FSDP with recomputation), control 0.5 s.
  // forward:  AG0 [0,1] AG1 [1,2]; F0 [1,3]; F1 [3,5]
  // backward: AG1' [5,6] AG0' [6,7]; recompute + backward of 1 [6,12]; RS1 [12,13];
  //           unit 0 [12,18]; RS0 [18,19]; control [19,19.5]
  std::vector<plan::UnitTimes> u(2);
  for (auto& x : u) {
    x.fwd = 2;
    x.bwd = 4;
    x.gather = 1;
    x.reduce = 1;
    x.freed_after_forward = true;
  }
  EXPECT_DOUBLE_EQ(plan::simulate_step(u, true, 0.5), 19.5);
  // DDP-like: no gathers, all-reduce 3 s after each backward: F [0,4]; B1 [4,8] AR1 [8,11]; B0 [8,12]
  // AR0 [12,15].
  for (auto& x : u) {
    x.gather = x.reduce = 0;
    x.replica = 3;
    x.freed_after_forward = false;
  }
  EXPECT_DOUBLE_EQ(plan::simulate_step(u, false, 0), 15.0);
}

TEST(CostModel, ResearchBaselineWithoutPrefetchAndWithChecksByHand) {
  // The same two units without prefetch, each collective preceded by 0.25 s of host checks:
  // forward:  check [0,0.25] AG0 [0.25,1.25] F0 [1.25,3.25]; check AG1 [3.5,4.5] F1 [4.5,6.5]
  // backward: check AG1' [6.75,7.75]; recompute + backward of 1 [7.75,13.75]; check RS1 [14,15];
  //           check [14,14.25] AG0' waits for the queue [15,16]; unit 0 [16,22]; check RS0 [22.25,23.25];
  //           serial [23.25,23.75]
  std::vector<plan::UnitTimes> u(2);
  for (auto& x : u) {
    x.fwd = 2;
    x.bwd = 4;
    x.gather = 1;
    x.reduce = 1;
    x.freed_after_forward = true;
  }
  // No prefetch alone: AG0 [0,1] F0 [1,3] AG1 [3,4] F1 [4,6] AG1' [6,7] B1 [7,13] RS1 [13,14] AG0' [14,15]
  // B0 [15,21] RS0 [21,22] serial [22,22.5]: 3 s more than with prefetch.
  EXPECT_DOUBLE_EQ(plan::simulate_step(u, true, 0.5, false), 22.5);
  for (auto& x : u) x.shard_check = 0.25;
  EXPECT_DOUBLE_EQ(plan::simulate_step(u, true, 0.5, false), 23.75);

  // PyTorch's DETAIL checks over P ranks: 2 latency + 2 (P - 1) (per peer + latency).
  const plan::CollectiveChecks checks{25e-6, 5e-6};
  EXPECT_DOUBLE_EQ(checks.seconds(1), 0.0);
  EXPECT_NEAR(checks.seconds(512), 50e-6 + 2 * 511 * 30e-6, 1e-15);

  // End to end, one unit of fsdp on 4 ranks: 3 data collectives and 2 control all-reduces, each checked.
  const auto c = box(1, 4);
  auto w = one_unit(4000000, 4);
  w.compute_seconds = 0.010;
  const double plain = run(c, w, "fsdp").step_seconds;
  w.prefetch = false;
  w.checks = {1e-3, 1e-4};
  const double check = 2e-3 + 2 * 3 * 1.1e-3;
  EXPECT_NEAR(run(c, w, "fsdp").step_seconds, plain + 5 * check, 1e-12);
}

TEST(CostModel, PaperLayoutsSitOnTheRightTiers) {
  const auto c = plan::cluster_preset("leonardo", 128);
  plan::Workload w;
  w.model = model::preset("llama3.1-8b");
  auto tiers = [&](const std::string& spec) {
    std::map<std::string, Tier> t;
    for (const auto& col : run(c, w, spec).collectives) t[col.comm] = col.tier;
    return t;
  };
  EXPECT_EQ(tiers("fsdp")["shard"], Tier::InterNode);
  EXPECT_EQ(tiers("hsdp:H=4")["shard"], Tier::Node);
  EXPECT_EQ(tiers("hsdp:H=4")["replica"], Tier::InterNode);
  EXPECT_EQ(tiers("fl-fsdp:S=4")["shard"], Tier::Node);
  EXPECT_EQ(tiers("fl-fsdp:S=4")["segment"], Tier::InterGroup);
  EXPECT_EQ(tiers("fl-hsdp:S=32,H=4")["replica"], Tier::InterNode);
  EXPECT_EQ(tiers("fl-hsdp:S=32,H=4")["segment"], Tier::InterGroup);
  // 34 units (embedding, 32 blocks, head), Psi = 8,030,261,248.
  EXPECT_EQ(plan::unit_params(w).size(), 34u);
  int64_t sum = 0;
  for (auto u : plan::unit_params(w)) sum += u;
  EXPECT_EQ(sum, 8030261248LL);
  // DDP's 16 bytes/parameter of state cannot fit a 64 GB A100; FSDP over 512 ranks can.
  EXPECT_FALSE(run(c, w, "ddp").fits_memory);
  EXPECT_TRUE(run(c, w, "fsdp").fits_memory);
}

// A shared link is a node's uplink: the rings of one communicator kind that leave a node at the same time split
// its bandwidth. 4 nodes of 2 ranks, hsdp with H = 2: shards {0,1}, {2,3}... stay on their node; the replica
// rings {0,2,4,6} and {1,3,5,7} run at once and every hop of both leaves its node, so each moves at half the
// uplink. A world ring 0..7 leaves each node once (1->2, 3->4, 5->6, 7->0): the whole uplink.
TEST(CostModel, SharedUplinkSplitAmongTheRingsLeavingANode) {
  auto c = box(4, 2);
  c.links[1].shared = true;
  auto layout = comm::Layout::uniform(8, 8, 2);
  layout.place_on_nodes(2);
  EXPECT_EQ(plan::ring_link(c, layout, "replica", {0, 2, 4, 6}).bandwidth_bytes_per_s, 5e9);
  EXPECT_EQ(plan::ring_link(c, layout, "shard", {0, 1}).bandwidth_bytes_per_s, 100e9);
  auto fsdp = comm::Layout::uniform(8, 8, 0);
  fsdp.place_on_nodes(2);
  EXPECT_EQ(plan::ring_link(c, fsdp, "shard", {0, 1, 2, 3, 4, 5, 6, 7}).bandwidth_bytes_per_s, 10e9);
  // The whole step: only the replica all-reduce of the 8 MB shard (2 x 3/4 of it on the wire) slows, by its
  // bandwidth term at 5 instead of 10 GB/s.
  auto w = one_unit(4000000, 4);
  w.compute_seconds = 0.010;
  auto unshared = box(4, 2);
  const double slower = 2 * 0.75 * 8e6 / 5e9 - 2 * 0.75 * 8e6 / 10e9;
  EXPECT_NEAR(run(c, w, "hsdp:H=2").step_comm_seconds - run(unshared, w, "hsdp:H=2").step_comm_seconds, slower, 1e-12);
  EXPECT_NEAR(run(c, w, "fsdp").step_comm_seconds, run(unshared, w, "fsdp").step_comm_seconds, 1e-12);
  EXPECT_TRUE(comm::parse_link_spec("20Mbit/s,1ms,shared").shared);
  EXPECT_FALSE(comm::parse_link_spec("20Mbit/s,1ms").shared);
  EXPECT_THROW(comm::parse_link_spec("20Mbit/s,1ms,half"), Error);
}

// The host's collective floor: a data collective takes at least the floor, which hides its own alpha-beta
// time; the control all-reduces are priced as before.
TEST(CostModel, CollectiveFloorOfADataCollectiveByHand) {
  auto c = box(1, 4);
  auto w = one_unit(4000000, 4);
  w.compute_seconds = 0.010;
  const double control = 6 * 2e-6 + 2 * 0.75 * 8 / 100e9 + 6 * 2e-6 + 2 * 0.75 * 32 / 100e9;
  const double one = 3 * 2e-6 + 0.75 * 16e6 / 100e9;  // 126 us
  c.collective_floor_s = 1e-3;
  EXPECT_NEAR(run(c, w, "fsdp").step_comm_seconds, 3 * 1e-3 + control, 1e-12);
  c.collective_floor_s = 1e-4;  // below it: no change
  EXPECT_NEAR(run(c, w, "fsdp").step_comm_seconds, 3 * one + control, 1e-12);
}

TEST(CostModel, BadSpecsAreErrors) {
  EXPECT_THROW(plan::parse_strategy_spec("fl-fsdp:S=x", 8), Error);
  EXPECT_THROW(plan::parse_strategy_spec("fl-fsdp:Q=2", 8), Error);
  EXPECT_THROW(plan::parse_strategy_spec("zero:S=2", 8), Error);
  EXPECT_THROW(run(box(2, 2), one_unit(10), "fl-fsdp:S=3"), Error);
  EXPECT_THROW(plan::cluster_preset("frontier", 1), Error);
}

// The memory estimate's structure (its figures against measured peaks: bench/memory_estimate.sh, docs/perf.md).
TEST(MemoryModel, ShardingRecomputationAndSuggestions) {
  plan::MemoryInputs in;
  in.model = model::preset("llama3.1-8b");
  in.batch = 2;
  in.seq_len = 4096;
  in.compute_bytes = 2;
  const auto ddp = plan::estimate_memory(in);
  // 8,030,261,248 parameters: float32 master, gradient, two AdamW moments.
  EXPECT_DOUBLE_EQ(ddp.bytes("master"), 4.0 * 8030261248.0);
  EXPECT_DOUBLE_EQ(ddp.bytes("optimizer"), 8.0 * 8030261248.0);
  EXPECT_DOUBLE_EQ(ddp.bytes("federation"), 0.0);
  auto fsdp_in = in;
  fsdp_in.shard = 8;
  fsdp_in.recompute = true;
  const auto fsdp = plan::estimate_memory(fsdp_in);
  EXPECT_NEAR(fsdp.bytes("master"), ddp.bytes("master") / 8, 8 * 4.0 * 35);  // padding: < 8 elements per unit
  EXPECT_LT(fsdp.bytes("activations"), ddp.bytes("activations") / 4);  // the head's logits are kept either way
  EXPECT_LT(fsdp.bytes("gathered"), ddp.bytes("gathered"));  // two blocks, not the whole model
  // 80 GB: ddp does not fit; the advice names fsdp over the group and a batch that fits, and that batch does.
  const double gpu = 80e9;
  ASSERT_GT(ddp.total(), gpu);
  const auto advice = plan::memory_suggestions(in, gpu, 8);
  ASSERT_FALSE(advice.empty());
  EXPECT_NE(advice[0].find("use fsdp"), std::string::npos) << advice[0];
  auto big = fsdp_in;
  big.batch = 64;
  for (const auto& a : plan::memory_suggestions(big, gpu, 8)) {
    if (a.rfind("--batch-size ", 0) != 0) continue;
    const int64_t b = std::stoll(a.substr(13));
    auto fits = big, over = big;
    fits.batch = b;
    over.batch = b + 1;
    EXPECT_LE(plan::estimate_memory(fits).total(), gpu);
    EXPECT_GT(plan::estimate_memory(over).total(), gpu);
  }
  // Federation with Nesterov and int8 compression: 2 + 1 + 2 slices of the shard split over 2 replicas.
  auto fl = fsdp_in;
  fl.replicas = 2;
  fl.federated = true;
  fl.outer = "nesterov";
  fl.round_copy = true;
  fl.residuals = true;
  EXPECT_DOUBLE_EQ(plan::estimate_memory(fl).bytes("federation"), 5.0 * fsdp.bytes("master") / 2);
}

// Sites through the round server (plan/sites_plan.h), against hand-computed values.
TEST(PlanSites, RoundPhasesTakeTheSlowerOfTheSiteAndTheServerLink) {
  auto w = one_unit(1'000'000, 4);
  w.compute_seconds = 0.1;
  plan::SitesSpec s;
  s.site_ranks = {2, 2, 2, 2};
  s.site_link = {2.5e6, 0.02};     // 20 Mbit/s, 20 ms one way
  s.server_link = {125e6, 1e-4};   // 1 Gbit/s per shard
  s.server_shards = 2;
  auto inner = plan::parse_strategy_spec("fsdp", 8);
  auto p = plan::plan_sites(box(1, 2), w, inner, s);
  EXPECT_EQ(p.elements, 1'000'000);
  EXPECT_DOUBLE_EQ(p.up_bytes, 4e6);
  EXPECT_DOUBLE_EQ(p.server_in_bytes, 16e6);
  // The site's link is the slower: 4 MB at 2.5 MB/s, plus a request and its answer across both links.
  const double phase = 2 * (0.02 + 1e-4) + 4e6 / 2.5e6;
  ASSERT_EQ(p.per_site.size(), 4u);
  EXPECT_NEAR(p.per_site[0].round_s, 2 * phase, 1e-12);
  EXPECT_NEAR(p.per_site[0].step_s, p.per_site[0].inner.step_seconds + 2 * phase / 8, 1e-12);
  // One shard on a link every site's bytes share: 16 MB at 12.5 MB/s is the slower now.
  s.site_link = {125e6, 0.02};
  s.server_link = {12.5e6, 1e-4, true};
  p = plan::plan_sites(box(1, 2), w, inner, s);
  EXPECT_NEAR(p.per_site[0].upload_s, 2 * (0.02 + 1e-4) + 16e6 / 12.5e6, 1e-12);
  // Delayed: the round hides behind the next K steps, what does not fit shows.
  w.round_overlap = "delayed";
  p = plan::plan_sites(box(1, 2), w, inner, s);
  const double round = 2 * (2 * (0.02 + 1e-4) + 16e6 / 12.5e6);
  EXPECT_NEAR(p.per_site[0].exposed_s, std::max(0.0, round - 8 * p.per_site[0].inner.step_seconds), 1e-12);
}

TEST(PlanSites, EncodedRoundsAndTheServersMemory) {
  auto w = one_unit(1'000'000, 4);
  w.compute_seconds = 0.1;
  w.compress = "int8";
  w.compress_block = 256;
  plan::SitesSpec s;
  s.site_ranks = {4, 2};
  s.site_link = {2.5e6, 0.02};
  s.server_link = {125e6, 1e-4};
  s.server_shards = 4;
  s.outer = "nesterov";
  const auto p = plan::plan_sites(box(1, 2), w, plan::parse_strategy_spec("ddp", 4), s);
  // int8: a byte per element and a float32 scale per block of 256 (1,000,192 elements in whole blocks).
  const double encoded = 1'000'192 + 4.0 * 1'000'192 / 256;
  EXPECT_DOUBLE_EQ(p.up_bytes, encoded);
  EXPECT_DOUBLE_EQ(p.down_bytes, encoded);
  // Per shard: 250,000 float32 elements, each site's submission and its buffer, the global model and the two
  // tensors of Nesterov's state twice (committed, prepared), the residual twice, the encoded change twice.
  const double slice = 4.0 * 250'000;
  const double change = 250'112 + 4.0 * 250'112 / 256;
  EXPECT_DOUBLE_EQ(p.server_memory_bytes, slice * (2 * 2 + 2 * 3) + 2 * slice + 2 * change);
  // Sites of different sizes: both wait for the slower one's K steps; tokens by ranks.
  ASSERT_EQ(p.per_site.size(), 2u);
  EXPECT_DOUBLE_EQ(p.per_site[0].step_s, p.per_site[1].step_s);
  EXPECT_NEAR(p.per_site[0].tokens_per_s, 2 * p.per_site[1].tokens_per_s, 1e-6);
}

TEST(PlanSites, RefusesWhatItCannotPrice) {
  auto w = one_unit(1000, 4);
  plan::SitesSpec s;
  s.site_ranks = {2};
  s.site_link = {1e6, 0.01};
  s.server_link = {1e9, 0};
  EXPECT_THROW(plan::plan_sites(box(1, 2), w, plan::parse_strategy_spec("fl-fsdp", 8), s), Error);
  s.site_ranks = {3};
  EXPECT_THROW(plan::plan_sites(box(1, 2), w, plan::parse_strategy_spec("fsdp", 8), s), Error);
  EXPECT_EQ(plan::parse_sites_layout("4x2"), (std::vector<int>{2, 2, 2, 2}));
  EXPECT_EQ(plan::parse_sites_layout("2,4"), (std::vector<int>{2, 4}));
  EXPECT_THROW(plan::parse_sites_layout("2x"), Error);
  EXPECT_THROW(plan::parse_sites_layout("a,2"), Error);
}
