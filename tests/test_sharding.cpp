// Numerics contract (DESIGN.md): in float64, DDP, FSDP (both reshard modes, with and without activation
// recomputation) and HSDP on N ranks reproduce single-process training on the concatenated batch over 5
// AdamW steps with clipping. Plus a float32 run, per-tier byte accounting against the cost formulas, and the
// collectives themselves against hand-computed values. Mixed precision: bf16 compute against float32, float32
// accumulation of tied gradients, bf16 reductions at half the bytes.
#include <gtest/gtest.h>

#include <array>
#include <cmath>

#include "comm/mpi_runtime.h"
#include "comm/topology.h"
#include "parallel/sharded_model.h"
#include "engine_fixture.h"
#include "parallel/strategy.h"
#include "util/int_list.h"
#include "reference.h"
#include "util/error.h"
#include "optim/optimizer.h"

using namespace fedshard;

namespace {

int world_size() { return comm::MpiRuntime::get().world_size(); }
int world_rank() { return comm::MpiRuntime::get().world_rank(); }

struct Case {
  std::string name;
  int shard_size;  // 0 = whole world (FSDP)
  bool recompute;
  bool reshard;
  bool tied = false;  // tied embeddings: one FlatParam used at two call sites (embedding and head)
  bool fused = false;  // model.kernels = fused
  int64_t loss_chunk_rows = 0;  // the head's cross-entropy in chunks of this many rows (0: the model's default)
};

void expect_matches_reference(const Case& c, at::ScalarType dtype, double loss_tol, double param_tol) {
  auto cfg = reference::tiny_config();
  cfg.tie_embeddings = c.tied;
  const auto reference_cfg = cfg;  // the reference computes with ATen and the whole logits
  cfg.kernels = c.fused ? model::Kernels::Fused : model::Kernels::Aten;
  cfg.loss_chunk_rows = c.loss_chunk_rows;
  const int64_t rows = 2, seq = 12, steps = 5;
  const double lr = 1e-2, max_norm = 0.5;
  parallel::ShardingOptions opts;
  opts.master_dtype = opts.compute_dtype = dtype;
  opts.recompute = c.recompute;
  opts.reshard_after_forward = c.reshard;
  fixture::Engine e(cfg, {0, c.shard_size, 0}, opts);
  reference::ReferenceOptions ro;
  ro.max_norm = max_norm;
  ro.lr = lr;
  reference::ReferenceTrainer ref(reference_cfg, 5, ro);
  bool clipped = false;
  for (int64_t s = 0; s < steps; ++s) {
    auto batch = reference::synthetic_batch(s, rows * world_size(), seq, cfg.vocab_size);
    const double got = e.step(batch, world_rank() * rows, rows, lr, max_norm, e.topo->world());
    const double want = ref.step(batch);
    clipped = clipped || ref.last_grad_norm() > max_norm;
    EXPECT_NEAR(got, want, loss_tol) << c.name << " step " << s;
  }
  EXPECT_TRUE(clipped) << "the test must exercise clipping";
  EXPECT_LE(fixture::max_abs_diff(e.sharded->full_parameters(), ref.parameters()), param_tol) << c.name;
}

}  // namespace

TEST(Collectives, MatchHandComputedValuesIncludingPadding) {
  comm::Topology topo(comm::Layout::uniform(comm::MpiRuntime::get().world_size(), 0, 0), {});
  auto& w = topo.world();
  const int p = w.size(), r = w.rank();
  for (int n : {1, 3, 7}) {  // odd sizes: what FlatParam padding produces per rank
    // all_gather: rank r contributes r*100 + i.
    auto in = at::arange(n, at::kDouble) + 100.0 * r;
    auto out = at::empty({n * p}, at::kDouble);
    w.all_gather(in, out)->wait();
    for (int q = 0; q < p; ++q)
      for (int i = 0; i < n; ++i) EXPECT_EQ(out[q * n + i].item<double>(), 100.0 * q + i);
    // in-place all_gather (input is this rank's slice of the output)
    auto out2 = at::zeros({n * p}, at::kFloat);
    out2.narrow(0, r * n, n).fill_(r + 1);
    w.all_gather(out2.narrow(0, r * n, n), out2)->wait();
    for (int q = 0; q < p; ++q) EXPECT_EQ(out2[q * n].item<float>(), q + 1);
    // reduce_scatter sum and mean: element j of rank q's input is q + j.
    auto rs_in = at::arange(n * p, at::kDouble) + r;
    auto rs_out = at::empty({n}, at::kDouble);
    w.reduce_scatter(rs_in, rs_out, comm::ReduceOp::Sum)->wait();
    const double rank_sum = p * (p - 1) / 2.0;
    for (int i = 0; i < n; ++i) EXPECT_EQ(rs_out[i].item<double>(), p * (r * n + i) + rank_sum);
    w.reduce_scatter(rs_in, rs_out, comm::ReduceOp::Mean)->wait();
    for (int i = 0; i < n; ++i) EXPECT_DOUBLE_EQ(rs_out[i].item<double>(), (p * (r * n + i) + rank_sum) / p);
    EXPECT_TRUE(rs_in.equal(at::arange(n * p, at::kDouble) + r)) << "reduce_scatter modified its input";
    // all_reduce, async: start two, wait in reverse order. Lengths that p does not divide, and fewer
    // elements than ranks, leave some ring segments short or empty.
    for (int len : {n, n * p + 1}) {
      auto a = at::arange(len, at::kDouble) + r;
      auto b = at::full({len}, 2.0 * (r + 1), at::kFloat);
      auto wa = w.all_reduce(a, comm::ReduceOp::Sum);
      auto wb = w.all_reduce(b, comm::ReduceOp::Mean);
      wb->wait();
      wa->wait();
      for (int i = 0; i < len; ++i) EXPECT_EQ(a[i].item<double>(), p * i + rank_sum) << "len " << len << " i " << i;
      for (int i = 0; i < len; ++i) EXPECT_FLOAT_EQ(b[i].item<float>(), p + 1.0f);
    }
    // bf16 all_reduce: 1.5 * k is exact in bf16 for every partial sum k <= 8.
    auto h = at::full({n}, 1.5, at::kBFloat16);
    w.all_reduce(h, comm::ReduceOp::Sum)->wait();
    EXPECT_EQ(h[0].item<float>(), 1.5f * p);
    // broadcast from the last rank
    auto bc = at::full({n}, static_cast<double>(r), at::kDouble);
    w.broadcast(bc, p - 1)->wait();
    EXPECT_EQ(bc[n - 1].item<double>(), p - 1);
  }
  w.barrier()->wait();
}

TEST(Topology, ImpossibleSizesAreRejectedBeforeAnyWork) {
  EXPECT_THROW(comm::Layout::uniform(8, 3, 0), Error);
  EXPECT_THROW(comm::Layout::uniform(8, 4, 3), Error);
  EXPECT_THROW(comm::Layout::uniform(8, 16, 0), Error);
  EXPECT_THROW(comm::Layout({4, 3, 2}, 2), Error);  // H = 2 does not divide the group of 3
  EXPECT_THROW(comm::Layout({4, 0}, 0), Error);
  EXPECT_THROW(parallel::make_layout(parallel::parse_strategy("fl-fsdp"), 8, {4, 2}, 0, 0), Error);  // 6 of 8 ranks
  EXPECT_THROW(parallel::make_layout(parallel::parse_strategy("fsdp"), 8, {4, 4}, 0, 0), Error);  // no federation
  EXPECT_THROW(parse_int_list("4,,2", "--groups"), Error);
  EXPECT_THROW(parse_int_list("4,-2", "--groups"), Error);
  EXPECT_THROW(comm::Layout({4, 0, 4}, 0), Error);
  const auto l = comm::Layout::uniform(8, 4, 2);
  EXPECT_EQ(l.groups(), 2);
  EXPECT_EQ(l.replicas(0), 2);
}

// Geometry of unequal groups, checked against positions written out by hand.
TEST(Topology, UnequalGroupsSliceTheModelOncePerGroup) {
  const comm::Layout fsdp({4, 2, 2}, 0);
  EXPECT_EQ(fsdp.pad_multiple(), 4);
  EXPECT_EQ(fsdp.coords(5).group, 1);
  EXPECT_EQ(fsdp.coords(5).position, 1);
  EXPECT_EQ(fsdp.slice_range(8, 5), (comm::Range{4, 8}));
  const auto segs = fsdp.segments();
  ASSERT_EQ(segs.size(), 4u);
  EXPECT_EQ(segs[1].ranks, (std::vector<int>{1, 4, 6}));
  EXPECT_EQ(segs[3].ranks, (std::vector<int>{3, 5, 7}));
  // H = 2 inside groups of 4, 2, 2: group 0 has two replicas; rank 2 (replica 1, shard 0) holds the second
  // quarter, i.e. piece 1 of shard 0.
  const comm::Layout hsdp({4, 2, 2}, 2);
  EXPECT_EQ(hsdp.coords(2).replica, 1);
  EXPECT_EQ(hsdp.shard_range(8, 2), (comm::Range{0, 4}));
  EXPECT_EQ(hsdp.slice_range(8, 2), (comm::Range{2, 4}));
  EXPECT_EQ(hsdp.replica_members(1), (std::vector<int>{1, 3}));
  EXPECT_EQ(hsdp.segments()[1].ranks, (std::vector<int>{2, 4, 6}));
  // Every element of the model is in exactly one slice per group.
  for (const auto& l : {fsdp, hsdp, comm::Layout({3, 3, 2}, 0)}) {
    const int64_t padded = l.pad_multiple() * 5;
    for (int g = 0; g < l.groups(); ++g) {
      std::vector<int> cover(padded, 0);
      for (int r = l.first_rank(g); r < l.first_rank(g) + l.group_size(g); ++r) {
        const auto [a, b] = l.slice_range(padded, r);
        for (int64_t k = a; k < b; ++k) ++cover[k];
      }
      EXPECT_EQ(std::count(cover.begin(), cover.end(), 1), padded) << l.describe_groups() << " group " << g;
    }
  }
}

// Group 0 of 4,2,2 lost (comm/survivors.cpp, regroup): the kept groups (2,2) keep the launch's padding, a multiple
// of 4, so a unit of 10 elements stays padded to 12 and the ranks of groups 1 and 2 (launch ranks 4-7, now 0-3) hold
// the same elements as before (written out by hand); their own padding, a multiple of 2, would have made it 10.
TEST(Topology, KeptGroupsKeepTheLaunchPadding) {
  const comm::Layout launch({4, 2, 2}, 0);
  const comm::Layout kept({2, 2}, 0, launch.pad_multiple());
  const auto padded = [](const comm::Layout& l, int64_t numel) {
    return (numel + l.pad_multiple() - 1) / l.pad_multiple() * l.pad_multiple();
  };
  EXPECT_EQ(padded(launch, 10), 12);
  EXPECT_EQ(padded(kept, 10), 12);
  EXPECT_EQ(padded(comm::Layout({2, 2}, 0), 10), 10);
  const std::vector<comm::Range> held = {{0, 6}, {6, 12}, {0, 6}, {6, 12}};
  for (int r = 0; r < 4; ++r) {
    EXPECT_EQ(launch.shard_range(12, r + 4), held[static_cast<size_t>(r)]);
    EXPECT_EQ(kept.shard_range(12, r), held[static_cast<size_t>(r)]);
  }
  EXPECT_FALSE(kept == comm::Layout({2, 2}, 0));  // a resume onto the kept groups' own padding reslices
  EXPECT_THROW(comm::Layout({2, 2}, 0, 3), Error);  // not a multiple of every group size
  EXPECT_THROW(comm::Layout({4, 2}, 0, 2), Error);
}

TEST(Numerics, DdpMatchesSingleProcessFloat64) {
  expect_matches_reference({"ddp", 1, false, true}, at::kDouble, 1e-9, 1e-9);
}

TEST(Numerics, FsdpReshardAfterForwardMatchesSingleProcessFloat64) {
  expect_matches_reference({"fsdp", 0, true, true}, at::kDouble, 1e-9, 1e-9);
}

TEST(Numerics, FsdpKeepUntilBackwardMatchesSingleProcessFloat64) {
  expect_matches_reference({"fsdp-noreshard", 0, true, false}, at::kDouble, 1e-9, 1e-9);
}

TEST(Numerics, FsdpWithoutRecomputationMatchesSingleProcessFloat64) {
  expect_matches_reference({"fsdp-keep-activations", 0, false, true}, at::kDouble, 1e-9, 1e-9);
}

// Every shard size that leaves more than one replica (H = 1 on 2 ranks: replicas only), and H = 1 alone on one
// rank, so every registered rank count checks at least one case.
TEST(Numerics, HsdpMatchesSingleProcessFloat64) {
  const int n = world_size();
  int checked = 0;
  for (int h : {1, 2, 4}) {
    if (n % h != 0 || (h == n && n > 1)) continue;
    expect_matches_reference({"hsdp-h" + std::to_string(h), h, true, true}, at::kDouble, 1e-9, 1e-9);
    ++checked;
  }
  EXPECT_GT(checked, 0);
}

TEST(Numerics, TiedEmbeddingsMatchSingleProcessFloat64) {
  expect_matches_reference({"fsdp-tied", 0, true, true, true}, at::kDouble, 1e-9, 1e-9);
  expect_matches_reference({"ddp-tied", 1, false, true, true}, at::kDouble, 1e-9, 1e-9);
}

// The fused kernels' CPU loops and the head's loss in chunks of 5 rows (22 rows per rank: four chunks and a
// remainder), under FSDP with recomputation and DDP without, and with tied embeddings.
TEST(Numerics, FusedKernelsAndChunkedLossMatchSingleProcessFloat64) {
  expect_matches_reference({"fsdp-fused", 0, true, true, false, true, 5}, at::kDouble, 1e-9, 1e-9);
  expect_matches_reference({"ddp-fused", 1, false, true, false, true, 5}, at::kDouble, 1e-9, 1e-9);
  expect_matches_reference({"fsdp-fused-tied", 0, true, true, true, true, 3}, at::kDouble, 1e-9, 1e-9);
}

// float32 against the float64 reference. Forward/backward in float32 carry relative errors ~1e-7 per op, a
// few 1e-7 on the loss (measured: up to 3e-7). Parameters are less forgiving: Adam divides each coordinate's
// momentum by its own RMS, so a coordinate whose gradient is near float32 noise can take a visibly different
// step (up to lr = 1e-2 in the worst case). Measured: max |dw| 1e-5 after 5 steps. Bounds: 1e-5 on the loss and
// 1e-4 on parameters (1% of one step's lr), 10-30x above what we measured. Logic errors are the float64
// tests' job (AdamW with clipping is nearly blind to a gradient scale error; at 1e-9 they are not).
TEST(Numerics, FsdpFloat32MatchesReferenceWithinFloat32Bound) {
  expect_matches_reference({"fsdp-fp32", 0, true, true}, at::kFloat, 1e-5, 1e-4);
}

TEST(Accounting, FsdpAndHsdpStepBytesEqualTheCostFormulas) {
  const int n = world_size();
  if (n < 4) GTEST_SKIP() << "needs at least 2 emulated nodes of 2 ranks";
  const auto cfg = reference::tiny_config();
  for (int h : {0, 2}) {
    parallel::ShardingOptions opts;
    opts.master_dtype = opts.compute_dtype = at::kDouble;
    fixture::Engine e(cfg, {0, h, 2}, opts);
    const int H = e.topo->layout().shard_size(0), R = e.topo->layout().replicas(0);
    double padded = 0;
    for (auto& u : e.sharded->units()) padded += static_cast<double>(u->flat().padded_numel());
    const double psi_b = padded * 8.0;
    auto batch = reference::synthetic_batch(0, 2 * n, 8, cfg.vocab_size);
    const auto before = comm::Ledger::instance().snapshot();
    const int64_t t = batch.size(1) - 1;
    auto local = batch.narrow(0, world_rank() * 2, 2);
    model::next_token_loss(e.sharded->forward(local.narrow(1, 0, t)), local.narrow(1, 1, t)).backward();
    e.sharded->wait_grads();
    e.sharded->clip_grad_norm(1.0);
    const auto d = comm::Ledger::instance().snapshot() - before;
    const comm::Tier shard_tier = H > 2 ? comm::Tier::InterNode : comm::Tier::Node;  // nodes of 2 ranks
    const double shard_bytes = 3.0 * (H - 1) / H * psi_b;
    const double replica_bytes = R > 1 ? 2.0 * (R - 1) / R * psi_b / H : 0.0;
    double want[3] = {0, 0, 0};
    want[static_cast<int>(shard_tier)] += shard_bytes;
    want[static_cast<int>(comm::Tier::InterNode)] += replica_bytes;  // replicas sit on different nodes
    for (comm::Tier tier : comm::kTiers)
      EXPECT_NEAR(d.at(tier, comm::Traffic::Data).sent_bytes, want[static_cast<int>(tier)], 1e-6)
          << "H=" << H << " tier " << comm::tier_name(tier);
    // Control: one all-reduce of one double (the grad norm) over `shard`. One element does not split: the ring
    // (mpi_ops.h) makes it segment H-1: the rank holding it and the rank before it send it once, every other
    // rank twice (once reducing, once gathering).
    const int sr = e.topo->shard().rank();
    const double norm_sends = H == 1 ? 0 : sr == H - 2 || sr == H - 1 ? 1 : 2;
    EXPECT_EQ(d.at(shard_tier, comm::Traffic::Control).sent_bytes, norm_sends * 8.0);
    EXPECT_EQ(d.at(shard_tier, comm::Traffic::Data).calls, 3 * static_cast<int64_t>(e.sharded->units().size()));
  }
}

// A tied weight's gradient from its two call sites is summed in float32 even when compute is bf16: 1 + 2^-9
// is a quarter of a bf16 ulp above 1, so a bf16 accumulation would return exactly 1.
TEST(MixedPrecision, TiedGradientAccumulatesInFloat32) {
  comm::Topology topo(comm::Layout::uniform(comm::MpiRuntime::get().world_size(), 0, 0), {});
  const int64_t n = 8;
  at::Tensor w = at::zeros({n});
  std::vector<model::ParamSlot> slots = {{"w", &w, {n}}};
  auto flat = std::make_unique<parallel::FlatParam>(slots, topo.shard().size(), topo.shard().size(),
                                                    topo.shard().rank(), at::kFloat,
                                                    [](const model::ParamSlot&, int64_t, at::Tensor dst) { dst.zero_(); });
  parallel::ShardingOptions opts;
  opts.compute_dtype = at::kBFloat16;
  parallel::ShardedUnit unit(std::move(flat), topo.shard(), topo.replica(), opts, /*call_sites=*/2);
  unit.backward_done({at::ones({n}, at::kBFloat16)});
  unit.backward_done({at::full({n}, std::ldexp(1.0, -9), at::kBFloat16)});
  unit.wait_grad();
  const auto& g = unit.flat().grad();
  for (int64_t i = 0; i < g.numel(); ++i) EXPECT_EQ(g[i].item<float>(), 1.0f + std::ldexp(1.0f, -9)) << i;
}

// parallel.reduce_dtype = bfloat16 halves exactly the bytes of the gradient reductions (reduce-scatter over
// `shard`, all-reduce over `replica`) on every tier. Parameters stay gathered from forward to backward
// (reshard_after_forward off), so the backward pass moves reductions only.
TEST(MixedPrecision, Bfloat16ReductionsSendHalfTheBytes) {
  const int n = world_size();
  if (n < 2) GTEST_SKIP() << "needs a communicator of 2 ranks or more";
  const auto cfg = reference::tiny_config();
  for (int h : {0, 2}) {
    if (h == 2 && (n < 4 || n % 2)) continue;
    std::array<double, comm::kNumTiers> bytes[2] = {};
    for (int bf16 = 0; bf16 < 2; ++bf16) {
      parallel::ShardingOptions opts;
      opts.reshard_after_forward = false;
      opts.reduce_dtype = bf16 ? at::kBFloat16 : at::kFloat;
      fixture::Engine e(cfg, {0, h, 2}, opts);
      auto batch = reference::synthetic_batch(0, 2 * n, 8, cfg.vocab_size);
      const int64_t t = batch.size(1) - 1;
      auto local = batch.narrow(0, world_rank() * 2, 2);
      auto loss = model::next_token_loss(e.sharded->forward(local.narrow(1, 0, t)), local.narrow(1, 1, t));
      const auto before = comm::Ledger::instance().snapshot();
      loss.backward();
      e.sharded->wait_grads();
      const auto d = comm::Ledger::instance().snapshot() - before;
      for (comm::Tier tier : comm::kTiers) bytes[bf16][static_cast<int>(tier)] = d.at(tier, comm::Traffic::Data).sent_bytes;
    }
    double total = 0;
    for (comm::Tier tier : comm::kTiers) {
      const int i = static_cast<int>(tier);
      total += bytes[0][i];
      EXPECT_EQ(bytes[1][i] * 2, bytes[0][i]) << "H=" << h << " tier " << comm::tier_name(tier);
    }
    EXPECT_GT(total, 0) << "the backward pass must have reduced something";
  }
}

// bf16 compute (FSDP2's param_dtype) with float32 master weights and float32 reductions, 20 AdamW steps of
// FSDP memorizing one batch: the loss falls (3.9 -> 0.1 on one rank), and differs from the float32 run's by
// less than 1% of the initial loss at every step (measured on 1, 2 and 4 ranks: at most 0.17%; bf16 rounds
// activations to 3 significant digits, and the two runs drift apart slowly as they memorize).
TEST(MixedPrecision, Bfloat16ComputeTrainsCloseToFloat32) {
  const auto cfg = reference::tiny_config();
  const int n = world_size();
  auto batch = reference::synthetic_batch(0, 2 * n, 16, cfg.vocab_size);
  std::vector<double> losses[2];
  for (int bf16 = 0; bf16 < 2; ++bf16) {
    parallel::ShardingOptions opts;
    opts.compute_dtype = bf16 ? at::kBFloat16 : at::kFloat;
    fixture::Engine e(cfg, {0, 0, 0}, opts);
    for (int s = 0; s < 20; ++s) losses[bf16].push_back(e.step(batch, world_rank() * 2, 2, 1e-2, 1.0, e.topo->world()));
  }
  EXPECT_LT(losses[1].back(), 0.7 * losses[1].front()) << "bf16 compute must train";
  for (size_t s = 0; s < losses[0].size(); ++s)
    EXPECT_NEAR(losses[1][s], losses[0][s], 0.01 * losses[0].front()) << "step " << s;
}
