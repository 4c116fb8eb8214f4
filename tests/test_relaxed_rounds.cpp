// Relaxed rounds (federation.overlap, federation.compress; docs/federation.md): delayed and streaming rounds
// against an independent float64 reference of the stated rule (one single-process trainer per group, the
// outer step written out here), the blockwise codecs against a scalar reference, and int8/int4 error feedback
// conserving the groups' deltas.
#include <ATen/core/grad_mode.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <tuple>
#include <vector>

#include "engine_fixture.h"
#include "federation/codec.h"
#include "federation/schedule.h"
#include "reference.h"
#include "train/checkpoint.h"

using namespace fedshard;

namespace {

using Params = std::map<std::string, at::Tensor>;

int world_size() { return comm::MpiRuntime::get().world_size(); }
int world_rank() { return comm::MpiRuntime::get().world_rank(); }

parallel::ShardingOptions f64() {
  parallel::ShardingOptions o;
  o.master_dtype = o.compute_dtype = at::kDouble;
  return o;
}

struct FlCase {
  const char* name;
  int group_size, shard_size;
};

// Two groups of S = N/2 with DDP, FSDP and (S >= 4) HSDP inside.
std::vector<FlCase> fl_cases() {
  const int s = world_size() / 2;
  std::vector<FlCase> c{{"fl-ddp", s, 1}, {"fl-fsdp", s, s}};
  if (s >= 4) c.push_back({"fl-hsdp", s, 2});
  return c;
}

// The outer step on whole models, written out: FedAvg takes the mean; Nesterov (torch.optim.SGD, nesterov=True)
// steps the global model along (global - mean) with momentum.
struct ReferenceOuter {
  std::string name;
  double lr = 0.7, momentum = 0.9;
  Params global, buf;
  Params step(const Params& mean, const std::vector<std::string>& names) {
    for (const auto& n : names) {
      if (name == "fedavg") {
        global[n] = mean.at(n).clone();
        continue;
      }
      const auto delta = global.at(n) - mean.at(n);
      buf[n] = buf.count(n) ? buf[n] * momentum + delta : delta.clone();
      global[n] = global.at(n) - lr * (delta + momentum * buf[n]);
    }
    return global;
  }
};

// Runs `steps` steps of two groups with federation.overlap = `overlap` (K = 4) and checks every group's model
// against the reference: at a boundary the round in flight (if any) is applied as
// model <- new global + (model - model at its start), then the next round starts from the models as they are;
// the last step applies the round in flight and averages everything at once.
void expect_overlap_matches_reference(const FlCase& c, const std::string& overlap, const std::string& outer,
                                      int steps) {
  const auto cfg = reference::tiny_config();
  const int64_t rows = 2, seq = 10, k = 4;
  const double lr = 1e-2;
  federation::FederationOptions fed;
  fed.outer = {outer, 0.7, 0.9};
  fed.overlap = true;
  fixture::Engine e(cfg, {c.group_size, c.shard_size, 0}, f64(), "adamw", /*federated=*/true, fed);
  const auto ov = federation::parse_overlap(overlap);
  federation::Schedule schedule(k, steps, c.group_size * rows * seq, ov, e.sharded->units().size());
  const int g = e.topo->coords().group;

  // Which parameters each fragment holds: unit u is in fragment u mod F.
  std::vector<std::vector<std::string>> fragment_names(ov.fragments);
  const auto units = train::unit_layout(cfg);
  std::vector<std::string> all_names;
  for (size_t u = 0; u < units.size(); ++u)
    for (const auto& entry : units[u].entries) {
      fragment_names[u % ov.fragments].push_back(entry.name);
      all_names.push_back(entry.name);
    }

  reference::ReferenceOptions ro;
  ro.lr = lr;
  std::vector<reference::ReferenceTrainer> refs;
  for (int i = 0; i < 2; ++i) refs.emplace_back(cfg, 5, ro);
  ReferenceOuter ref_outer{outer};
  ref_outer.global = refs[0].parameters();
  std::vector<Params> sent(2);
  std::vector<std::string> in_flight;  // names of the reference's round in flight
  Params in_flight_global;

  auto start_round = [&](const std::vector<std::string>& names) {
    Params mean;
    for (int i = 0; i < 2; ++i) sent[i] = refs[i].parameters();
    for (const auto& n : names) mean[n] = (sent[0].at(n) + sent[1].at(n)) / 2.0;
    in_flight_global = ref_outer.step(mean, names);
    in_flight = names;
  };
  auto apply_round = [&] {
    for (int i = 0; i < 2; ++i) {
      auto p = refs[i].parameters();
      for (const auto& n : in_flight) p[n] = in_flight_global.at(n) + (p.at(n) - sent[i].at(n));
      refs[i].set_parameters(p);
    }
    in_flight.clear();
  };

  const int64_t tick = k / ov.fragments;
  for (int s = 1; s <= steps; ++s) {
    auto batch = reference::synthetic_batch(s, rows * world_size(), seq, cfg.vocab_size);
    e.step(batch, world_rank() * rows, rows, lr, 0.0, e.topo->group());
    for (int i = 0; i < 2; ++i) refs[i].step(batch.narrow(0, i * c.group_size * rows, c.group_size * rows));

    schedule.count_step();
    if (schedule.due(s)) {
      if (e.aggregator->in_flight()) e.aggregator->finish();
      e.aggregator->begin(schedule.units(s), schedule.weight(s), federation::Vote{});
      schedule.count_sync(s);
      if (!schedule.leave_in_flight(s == steps)) e.aggregator->finish();
    } else {
      e.aggregator->progress();
    }

    if (s % tick == 0 || s == steps) {
      if (!in_flight.empty()) apply_round();
      if (s == steps) {
        start_round(all_names);
        apply_round();
      } else {
        start_round(fragment_names[(s / tick - 1) % ov.fragments]);
      }
    }
    EXPECT_LE(fixture::max_abs_diff(e.sharded->full_parameters(), refs[g].parameters()), 1e-9)
        << c.name << " " << overlap << " " << outer << " step " << s;
  }
  EXPECT_LE(fixture::max_abs_diff(refs[0].parameters(), refs[1].parameters()), 1e-12) << "the last round ends equal";
}

}  // namespace

TEST(RelaxedRounds, DelayedRoundsFollowTheStatedRule) {
  if (world_size() < 2) GTEST_SKIP() << "needs two groups";
  for (const auto& c : fl_cases())
    for (const char* outer : {"fedavg", "nesterov"}) expect_overlap_matches_reference(c, "delayed", outer, 10);
}

TEST(RelaxedRounds, StreamingFragmentsFollowTheStatedRule) {
  if (world_size() < 2) GTEST_SKIP() << "needs two groups";
  for (const auto& c : fl_cases())
    for (const char* outer : {"fedavg", "nesterov"}) expect_overlap_matches_reference(c, "streaming:2", outer, 11);
}

// The blockwise codecs' round trip, element by element, against a scalar float64 reference of the stated
// encoding: per block, scale = fp32(max|x| / L) (L = 127 for int8, 7 for int4), q = x / scale rounded to nearest
// even and clamped to [-L, L], decoded q * scale; an all-zero block decodes to zeros.
TEST(Codec, QuantisedRoundTripEqualsAScalarReference) {
  const int64_t block = 16, n = 4 * block;
  auto x = at::randn({n}, at::TensorOptions().dtype(at::kDouble).device(at::kCPU));
  x.narrow(0, block, block).zero_();
  x.narrow(0, 2 * block, block).mul_(1e-3);
  for (const auto& [spec, levels, bytes_per_value] :
       {std::tuple<const char*, int, double>{"int8", 127, 1.0}, {"int4", 7, 0.5}}) {
    const federation::Codec codec(spec, block);
    const int64_t expected_bytes = static_cast<int64_t>(n * bytes_per_value) + (n / block) * 4;
    ASSERT_EQ(codec.encoded_bytes(n), expected_bytes) << spec;
    auto bytes = at::empty({expected_bytes}, at::kByte);
    codec.encode(x, bytes);
    const auto decoded = codec.decode(bytes, n, at::kDouble);
    const auto* v = x.data_ptr<double>();
    const auto* d = decoded.data_ptr<double>();
    for (int64_t b = 0; b < n / block; ++b) {
      double largest = 0;
      for (int64_t i = b * block; i < (b + 1) * block; ++i) largest = std::max(largest, std::abs(v[i]));
      const double scale = static_cast<float>(largest / levels);
      for (int64_t i = b * block; i < (b + 1) * block; ++i) {
        const double q = std::clamp(std::nearbyint(v[i] / (scale > 0 ? scale : 1.0)), -1.0 * levels, 1.0 * levels);
        ASSERT_EQ(d[i], q * scale) << spec << " element " << i;
      }
    }
  }
}

// topk:D against a scalar reference: per block the ceil(D x block) largest magnitudes (found here by sorting), each
// index in 6 bits (block 64) and a 2-bit value, packed. Values `levels`: the nearest of -1, -1/3, 1/3, 1 of
// fp32(their largest magnitude) (blocks 1 and 2 left out: see there). Values `means`: the sign and the magnitude bin (at or above the mean of the kept
// non-zero magnitudes: large), each bin decoded to bf16(its magnitudes' mean); a kept zero decodes to zero. Every
// other element zero. Block 1 has one non-zero (fewer than k), block 2 none.
TEST(Codec, TopKRoundTripEqualsAScalarReference) {
  const int64_t block = 64, n = 4 * block;
  auto x = at::randn({n}, at::TensorOptions().dtype(at::kDouble).device(at::kCPU));
  x.narrow(0, block, 2 * block).zero_();
  x[block + 5] = -0.75;
  for (auto values : {federation::TopkValues::Levels, federation::TopkValues::Means})
    for (double density : {0.05, 0.3}) {
      const federation::Codec codec("topk:" + std::to_string(density), block, values);
      const int64_t k = static_cast<int64_t>(std::ceil(density * block));
      const int64_t block_bytes = 4 + (k * (6 + 2) + 7) / 8;
      ASSERT_EQ(codec.encoded_bytes(n), n / block * block_bytes) << density;
      auto bytes = at::empty({codec.encoded_bytes(n)}, at::kByte);
      codec.encode(x, bytes);
      const auto decoded = codec.decode(bytes, n, at::kDouble);
      const auto* v = x.data_ptr<double>();
      const auto* d = decoded.data_ptr<double>();
      int64_t nonzero = 0;
      for (int64_t b = 0; b < n / block; ++b) {
        std::vector<int64_t> order(block);
        for (int64_t i = 0; i < block; ++i) order[i] = b * block + i;
        std::sort(order.begin(), order.end(), [&](int64_t i, int64_t j) { return std::abs(v[i]) > std::abs(v[j]); });
        std::vector<double> expected(block, 0.0);
        if (values == federation::TopkValues::Levels) {
          // A kept zero decodes to scale/3 at whichever zero top-k picked: blocks of fewer non-zeros are not compared.
          if (v[order[k - 1]] == 0) continue;
          const double scale = static_cast<float>(std::abs(v[order[0]]));
          for (int64_t r = 0; r < k; ++r) {
            const int64_t i = order[r];
            const double q = std::clamp(std::nearbyint((v[i] / (scale > 0 ? scale : 1.0) + 1) * 1.5), 0.0, 3.0);
            expected[i - b * block] = (q / 1.5 - 1) * scale;
          }
        } else {
          double sum = 0;
          int count = 0;
          for (int64_t r = 0; r < k; ++r)
            if (v[order[r]] != 0) sum += std::abs(v[order[r]]), ++count;
          const double threshold = count ? sum / count : 0;
          double bin_sum[2] = {0, 0};
          int bin_count[2] = {0, 0};
          for (int64_t r = 0; r < count; ++r) {
            const int large = std::abs(v[order[r]]) >= threshold;
            bin_sum[large] += std::abs(v[order[r]]);
            ++bin_count[large];
          }
          for (int64_t r = 0; r < count; ++r) {
            const int64_t i = order[r];
            const int large = std::abs(v[i]) >= threshold;
            const double mean = static_cast<float>(c10::BFloat16(static_cast<float>(bin_sum[large] / bin_count[large])));
            expected[i - b * block] = v[i] < 0 ? -mean : mean;
          }
        }
        for (int64_t i = 0; i < block; ++i) {
          ASSERT_EQ(d[b * block + i], expected[i]) << density << " element " << b * block + i;
          nonzero += d[b * block + i] != 0;
        }
      }
      EXPECT_GT(nonzero, k) << "the kept values decoded to zeros, so nothing was tested";
      if (values == federation::TopkValues::Means) EXPECT_EQ(d[block + 5], -0.75) << "a lone value's bin is itself";
    }
}

// A range cut from one encoding of a whole slice (what the round server sends a site for its part of the slice) is,
// byte for byte, the encoding of that range alone, for every codec, at the slice's start, middle and end.
TEST(Codec, ARangeCutFromAnEncodingIsTheRangeEncodedAlone) {
  const int64_t block = 32, total = 7 * block;
  const auto x = at::randn({total}, at::TensorOptions().dtype(at::kFloat).device(at::kCPU));
  for (const char* spec : {"bf16", "int8", "int4", "topk:0.1"}) {
    const federation::Codec codec(spec, block);
    auto whole = at::empty({codec.encoded_bytes(total)}, at::kByte);
    codec.encode(x, whole);
    const int64_t g = codec.granule();
    for (const auto& [from, n] : {std::pair<int64_t, int64_t>{0, block}, {2 * block, 3 * block}, {4 * block, 3 * block},
                                   {0, total}, {3 * g, g}}) {
      auto alone = at::empty({codec.encoded_bytes(n)}, at::kByte);
      codec.encode(x.narrow(0, from, n).contiguous(), alone);
      const auto cut = codec.cut(whole, total, from, n);
      ASSERT_TRUE(at::equal(cut, alone)) << spec << " elements [" << from << ", " << from + n << ")";
    }
  }
}

// Error feedback: over the rounds, (what reached the global model) + (every residual still held, a group's at its
// weight) equals the sum of the groups' true weighted deltas. Checked per slice, over the ranks that hold it in each
// group.
TEST(RelaxedRounds, BlockwiseErrorFeedbackConservesTheGroupsDeltas) {
  if (world_size() < 2) GTEST_SKIP() << "needs two groups";
  const auto cfg = reference::tiny_config();
  const int64_t rows = 2, seq = 10;
  // Per codec: L, and how many times its error bound the largest delta must exceed for the bound to test anything
  // (topk: L = 0, no bound: a dropped element's error is its whole value, kept in the residuals).
  // With federation.ef_decay = beta, each round also forgets (1 - beta) of the residuals held before it.
  for (const auto& [compress, levels, margin, sparse_mean, decay] :
       {std::tuple<const char*, double, double, const char*, double>{"int8", 127, 20, "", 1}, {"int4", 7, 1, "", 1},
        {"topk:0.25", 0, 0, "union", 1}, {"topk:0.25", 0, 0, "sparsified", 1}, {"topk:0.25", 0, 0, "union", 0.5},
        {"topk:0.25", 0, 0, "sparsified", 0.5}})
  for (const auto& c : fl_cases()) {
    federation::FederationOptions fed;
    fed.compress = compress;
    if (*sparse_mean) fed.sparse_mean = sparse_mean;
    fed.ef_decay = decay;
    fed.compress_block = 8;
    fixture::Engine e(cfg, {c.group_size, c.shard_size, 0}, f64(), "adamw", /*federated=*/true, fed);
    auto& seg = *e.topo->segments().front().comm;  // equal groups: one segment, one rank of each group
    auto slices = [&] {
      std::vector<at::Tensor> out;
      for (const auto& s : e.aggregator->state()) out.push_back(s.at("global").clone());
      return out;
    };
    // This rank's slice of its group's model: the slice range of the aggregator's state.
    auto local = [&](size_t u) {
      auto& flat = e.sharded->units()[u]->flat();
      const auto [a, b] = e.topo->layout().slice_range(flat.padded_numel(), world_rank());
      return flat.shard().detach().narrow(0, a - flat.shard_offset(), b - a).clone();
    };
    const auto start = slices();
    double encoded = 0;  // the largest sum over this round's encoders of their input's absmax
    std::vector<at::Tensor> true_deltas;
    for (const auto& t : start) true_deltas.push_back(at::zeros_like(t));
    auto held_residuals = [&](size_t u) {
      const auto st = e.aggregator->state();
      auto held = st[u].at("residual") * 0.5 + st[u].at("mean_residual");  // the groups' residuals are unweighted
      seg.all_reduce(held, comm::ReduceOp::Sum, comm::Traffic::Control)->wait();
      return held;
    };
    std::vector<at::Tensor> forgotten;
    for (const auto& t : start) forgotten.push_back(at::zeros_like(t));
    for (int s = 1; s <= 12; ++s) {
      auto batch = reference::synthetic_batch(s, rows * world_size(), seq, cfg.vocab_size);
      e.step(batch, world_rank() * rows, rows, 1e-2, 0.0, e.topo->group());
      if (s % 3 != 0) continue;
      const auto before = slices();
      for (size_t u = 0; u < before.size(); ++u) {
        auto d = (local(u) - before[u]) * 0.5;  // two equal groups: weight 1/2 each
        // What this round encodes: each group's weighted delta (plus its residual, bounded below by 1/(2L) of
        // it), then the owner's sum of them.
        auto sizes = at::full({1}, d.abs().max().item<double>(), at::kDouble);
        seg.all_reduce(d, comm::ReduceOp::Sum, comm::Traffic::Control)->wait();
        seg.all_reduce(sizes, comm::ReduceOp::Sum, comm::Traffic::Control)->wait();
        true_deltas[u] += d;
        forgotten[u] += held_residuals(u) * (1 - decay);
        encoded = std::max(encoded, sizes.item<double>() + d.abs().max().item<double>());
      }
      e.aggregator->sync(1.0);
    }
    const auto end = slices();
    double worst = 0, lost = 0, moved_error = 0, largest_delta = 0;
    for (size_t u = 0; u < end.size(); ++u) {
      const auto held = held_residuals(u);
      worst = std::max(worst, (end[u] - start[u] + held + forgotten[u] - true_deltas[u]).abs().max().item<double>());
      lost = std::max(lost, held.abs().max().item<double>());
      moved_error = std::max(moved_error, (end[u] - start[u] - true_deltas[u]).abs().max().item<double>());
      largest_delta = std::max(largest_delta, true_deltas[u].abs().max().item<double>());
    }
    EXPECT_LE(worst, 1e-9) << c.name << " " << compress << " " << sparse_mean << " decay " << decay;
    EXPECT_GT(lost, 1e-8) << c.name << ": " << compress << " lost nothing, so nothing was tested";
    // Conservation holds for any encoder (one sending zeros keeps everything in its residuals); what the codec
    // states is its error: the global model moves by the true mean delta to within what the last round's
    // encodings left in the residuals, half a step of 1/L of each block's largest value on each of the G
    // senders and on the owner (5% for the residuals carried into that round's inputs).
    if (levels == 0 || decay != 1) continue;
    const double bound = 1.05 * encoded / (2 * levels);
    EXPECT_LE(moved_error, bound) << c.name << " " << compress << ": the global model did not follow the deltas";
    EXPECT_GT(largest_delta, margin * bound) << c.name << " " << compress << ": the bound is too loose to test anything";
  }
}

// Compressed rounds move the delta in 1 + 4/block bytes per element (int8), 1/2 + 4/block (int4) or 2 (bf16)
// instead of 8 (float64 master): an all-to-all and an all-gather of G chunks per slice, each chunk whole blocks, each sending (G-1)
// chunks per rank, where the plain round's all-reduce sends 2(G-1)/G of the slice.
TEST(RelaxedRounds, CompressedRoundsSendTheirShareOfTheBytes) {
  if (world_size() < 2) GTEST_SKIP() << "needs two groups";
  const auto cfg = reference::tiny_config();
  const int s = world_size() / 2, groups = 2;
  const int64_t block = 64;
  double slice_elements = 0, chunks_int8 = 0, chunks_bf16 = 0, union_blocks = 0;
  std::string sparse_mean = "union";
  auto round_bytes = [&](const std::string& compress) {
    federation::FederationOptions fed;
    fed.compress = compress;
    fed.compress_block = block;
    fed.sparse_mean = sparse_mean;
    fixture::Engine e(cfg, {s, s, 0}, f64(), "adamw", /*federated=*/true, fed);
    slice_elements = chunks_int8 = chunks_bf16 = union_blocks = 0;
    for (const auto& u : e.sharded->units()) {
      const auto [a, b] = e.topo->layout().slice_range(u->flat().padded_numel(), world_rank());
      slice_elements += static_cast<double>(b - a);
      chunks_int8 += static_cast<double>((b - a + groups * block - 1) / (groups * block) * block);
      chunks_bf16 += static_cast<double>((b - a + groups - 1) / groups);
      union_blocks += static_cast<double>((b - a + block - 1) / block);
    }
    const auto before = comm::Ledger::instance().snapshot();
    e.aggregator->sync(1.0);
    const auto d = comm::Ledger::instance().snapshot() - before;
    double bytes = 0;
    for (comm::Tier t : comm::kTiers) bytes += d.at(t, comm::Traffic::Data).sent_bytes;
    return bytes;
  };
  const double plain = round_bytes("none"), bf16 = round_bytes("bf16"), int8 = round_bytes("int8"),
               int4 = round_bytes("int4"), topk = round_bytes("topk:0.02");
  const double pieces = union_blocks;
  sparse_mean = "sparsified";
  const double topk_sparsified = round_bytes("topk:0.02");
  EXPECT_DOUBLE_EQ(plain, 2.0 * (groups - 1) / groups * slice_elements * 8);
  EXPECT_DOUBLE_EQ(bf16, 2.0 * (groups - 1) * chunks_bf16 * 2);
  EXPECT_DOUBLE_EQ(int8, 2.0 * (groups - 1) * chunks_int8 * (1 + 4.0 / block));
  EXPECT_DOUBLE_EQ(int4, 2.0 * (groups - 1) * chunks_int8 * (0.5 + 4.0 / block));
  // topk:0.02 of 64: 2 values of 6 + 2 bits after the 4-byte header, 6 bytes a block. The union mean all-gathers
  // each rank's piece whole; the sparsified one sends chunks as int8 does.
  EXPECT_DOUBLE_EQ(topk, (groups - 1) * pieces * 6);
  EXPECT_DOUBLE_EQ(topk_sparsified, 2.0 * (groups - 1) * chunks_int8 / block * 6);
}

// Groups that take different numbers of steps in a round (time-based rounds): weighted by tokens (FedAvg) or,
// with normalize = steps, FedNova's theta_global + tau_eff sum_g p_g (theta_g - theta_global) / tau_g, with
// p_g the group's share of the ranks and tau_eff = sum_g p_g tau_g.
TEST(RelaxedRounds, GroupsTakingDifferentStepsAverageAsFedAvgOrFedNova) {
  if (world_size() < 2) GTEST_SKIP() << "needs two groups";
  const auto cfg = reference::tiny_config();
  const int64_t rows = 2, seq = 10;
  const int s = world_size() / 2;
  const int taus[2] = {4, 2};
  for (bool fednova : {false, true}) {
    federation::FederationOptions fed;
    fed.normalize_steps = fednova;
    fixture::Engine e(cfg, {s, s, 0}, f64(), "adamw", /*federated=*/true, fed);
    const int g = e.topo->coords().group;
    std::vector<reference::ReferenceTrainer> refs;
    for (int i = 0; i < 2; ++i) refs.emplace_back(cfg, 5, reference::ReferenceOptions{});
    auto global = refs[0].parameters();
    int64_t step[2] = {0, 0};
    for (int round = 0; round < 2; ++round) {
      for (int i = 0; i < 2; ++i)
        for (int k = 0; k < taus[i]; ++k) {
          ++step[i];
          auto batch = reference::synthetic_batch(100 * i + step[i], rows * s, seq, cfg.vocab_size);
          refs[i].step(batch);
          if (i == g) e.step(batch, e.topo->coords().position * rows, rows, 1e-2, 0.0, e.topo->group());
        }
      federation::Vote v;
      v.steps_in_round = taus[g];
      std::vector<size_t> all(e.sharded->units().size());
      for (size_t u = 0; u < all.size(); ++u) all[u] = u;
      e.aggregator->begin(all, static_cast<double>(taus[g] * s * rows * seq), v);
      e.aggregator->finish();
      Params next;
      for (const auto& [name, t] : global) {
        const auto a = refs[0].parameters().at(name), b = refs[1].parameters().at(name);
        if (fednova)
          next[name] = t + 3.0 * (0.5 * (a - t) / 4.0 + 0.5 * (b - t) / 2.0);
        else
          next[name] = (4.0 * a + 2.0 * b) / 6.0;
      }
      global = next;
      for (auto& r : refs) r.set_parameters(global);
      EXPECT_LE(fixture::max_abs_diff(e.sharded->full_parameters(), global), 1e-9)
          << (fednova ? "fednova" : "fedavg") << " round " << round;
    }
  }
}

// parallel.reduce_dtype = bfloat16 under federation (delta rounds): the round sends each group's weighted
// delta from the last global model in bf16 and adds the mean to the float32 master, so the global model moves
// by the true mean delta within bf16 rounding of the delta, and a move smaller than half a bf16 step of the
// weight's value (RMSNorm gains at 1.0: 3.9e-3) is not lost.
TEST(RelaxedRounds, Bfloat16RoundsAverageDeltasIntoFloat32Masters) {
  if (world_size() < 2) GTEST_SKIP() << "needs two groups";
  const auto cfg = reference::tiny_config();
  parallel::ShardingOptions f32;
  f32.master_dtype = f32.compute_dtype = at::kFloat;
  for (const auto& c : fl_cases()) {
    federation::FederationOptions fed;
    fed.reduce_dtype = at::kBFloat16;
    fixture::Engine e(cfg, {c.group_size, c.shard_size, 0}, f32, "adamw", /*federated=*/true, fed);
    const int g = e.topo->coords().group;
    // Group g moves every weight by (g + 1) 1e-3 cos(position): the two groups' mean move is 1.5e-3 cos.
    std::vector<at::Tensor> start, pattern;
    for (auto& u : e.sharded->units()) {
      auto& flat = u->flat();
      auto shard = flat.shard().detach();
      const auto positions = at::arange(flat.shard_offset(), flat.shard_offset() + flat.shard_numel(), at::kDouble);
      pattern.push_back(positions.cos() * (positions < static_cast<double>(flat.numel())).to(at::kDouble));
      start.push_back(shard.to(at::kDouble));
      at::NoGradGuard no_grad;
      shard.add_((pattern.back() * ((g + 1) * 1e-3)).to(at::kFloat));
    }
    e.aggregator->sync(1.0);
    double worst = 0, norm_move = 0;
    for (size_t u = 0; u < start.size(); ++u) {
      auto& flat = e.sharded->units()[u]->flat();
      const auto got = flat.shard().detach().to(at::kDouble);
      const auto moved = start[u].to(at::kFloat).to(at::kDouble) + pattern[u] * 1.5e-3;
      // bf16 keeps 8 significant bits: each weighted delta and their sum round by at most 2^-9 of 1.5e-3 each;
      // the float32 master adds its own rounding of the value.
      const auto tol = 3 * 1.5e-3 / 512 + moved.abs() * 1.2e-7;
      worst = std::max(worst, ((got - moved).abs() - tol).max().item<double>());
      for (const auto& entry : flat.entries())
        if (entry.name.find("norm") != std::string::npos) {
          const int64_t a = std::max(entry.offset, flat.shard_offset());
          const int64_t b = std::min(entry.offset + entry.numel, flat.shard_offset() + flat.shard_numel());
          if (b > a)
            norm_move = std::max(norm_move, (got - start[u]).narrow(0, a - flat.shard_offset(), b - a).abs().max().item<double>());
        }
    }
    EXPECT_LE(worst, 0.0) << c.name << ": the global model is not the float32 mean within bf16 rounding of the delta";
    auto any_norm = at::full({1}, norm_move, at::kDouble);
    e.topo->world().all_reduce(any_norm, comm::ReduceOp::Sum, comm::Traffic::Control)->wait();
    EXPECT_GT(any_norm.item<double>(), 1e-3) << c.name << ": RMSNorm gains at 1.0 did not move by 1.5e-3";
  }
}

// federation.inner_state under streaming:F: a fragment's round resets or averages the inner optimizer state of
// that fragment's units only; the other fragment's moments and AdamW step counts are untouched.
TEST(RelaxedRounds, AFragmentRoundTouchesOnlyItsUnitsInnerState) {
  if (world_size() < 2) GTEST_SKIP() << "needs two groups";
  const auto cfg = reference::tiny_config();
  const int s = world_size() / 2;
  const int64_t rows = 2, seq = 10, k = 4;
  for (const char* inner : {"reset", "average"}) {
    federation::FederationOptions fed;
    fed.overlap = true;
    fed.inner_state = inner;
    fixture::Engine e(cfg, {s, s, 0}, f64(), "adamw", /*federated=*/true, fed);
    federation::Schedule schedule(k, 100, s * rows * seq, federation::parse_overlap("streaming:2"), e.sharded->units().size());
    std::vector<std::map<std::string, at::Tensor>> before;
    std::vector<int64_t> steps_before;
    for (int step = 1; step <= 4; ++step) {
      auto batch = reference::synthetic_batch(step, rows * world_size(), seq, cfg.vocab_size);
      e.step(batch, world_rank() * rows, rows, 1e-2, 0.0, e.topo->group());
      schedule.count_step();
      if (!schedule.due(step)) continue;
      if (e.aggregator->in_flight()) {  // step 4: fragment 0's round (begun at step 2) finishes
        before.clear();
        for (const auto& st : e.optimizer->state()) {
          std::map<std::string, at::Tensor> copy;
          for (const auto& [name, t] : st) copy[name] = t.clone();
          before.push_back(copy);
        }
        steps_before = e.optimizer->slice_steps();
        e.aggregator->finish();
        break;
      }
      ASSERT_EQ(schedule.units(step).front(), 0u);
      e.aggregator->begin(schedule.units(step), schedule.weight(step), federation::Vote{});
      schedule.count_sync(step);
    }
    ASSERT_FALSE(before.empty());
    bool fragment0_changed = false;
    for (size_t u = 0; u < before.size(); ++u)
      for (const auto& [name, t] : before[u]) {
        const bool same = at::equal(e.optimizer->state()[u].at(name), t);
        if (u % 2 == 1) EXPECT_TRUE(same) << inner << ": unit " << u << " (fragment 1) " << name << " changed";
        fragment0_changed = fragment0_changed || !same;
      }
    EXPECT_TRUE(fragment0_changed) << inner << ": fragment 0's state was not touched, so nothing was tested";
    for (size_t u = 0; u < steps_before.size(); ++u)
      EXPECT_EQ(e.optimizer->slice_steps()[u], u % 2 == 0 && std::string(inner) == "reset" ? 0 : steps_before[u])
          << inner << ": unit " << u;
  }
}
