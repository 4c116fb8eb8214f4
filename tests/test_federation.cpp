// Federation (DESIGN.md "Federation", numerics contract): FL+DDP, FL+FSDP and FL+HSDP against an independent
// float64 reference (one single-process trainer per group, averaged every K steps), divergence between syncs,
// weighted means, and inter-group bytes per aggregation against the cost formula.
#include <ATen/core/grad_mode.h>
#include <gtest/gtest.h>

#include <cmath>

#include "engine_fixture.h"
#include "reference.h"

using namespace fedshard;

namespace {

int world_size() { return comm::MpiRuntime::get().world_size(); }
int world_rank() { return comm::MpiRuntime::get().world_rank(); }

struct FlCase {
  const char* name;
  int group_size;
  int shard_size;
};

// The FL variants that fit the world: groups of S = N/2 (two groups) with DDP, FSDP and HSDP (H = 2) inside.
std::vector<FlCase> fl_cases() {
  const int n = world_size();
  std::vector<FlCase> c;
  if (n < 2) return c;
  const int s = n / 2;
  c.push_back({"fl-ddp", s, 1});
  c.push_back({"fl-fsdp", s, s});
  if (s >= 4) c.push_back({"fl-hsdp", s, 2});
  return c;
}

parallel::ShardingOptions f64() {
  parallel::ShardingOptions o;
  o.master_dtype = o.compute_dtype = at::kDouble;
  return o;
}

// The K = 1 equivalences: plain SGD (linear in the gradient), no clipping.
reference::ReferenceOptions plain_sgd() {
  reference::ReferenceOptions ro;
  ro.optimizer = "sgd";
  ro.lr = 0.5;
  return ro;
}

// Mean of the reference groups' parameters.
std::map<std::string, at::Tensor> average(const std::vector<std::map<std::string, at::Tensor>>& models) {
  std::map<std::string, at::Tensor> out;
  for (const auto& [name, t] : models[0]) {
    auto sum = at::zeros_like(t);
    for (const auto& m : models) sum += m.at(name);
    out[name] = sum / static_cast<double>(models.size());
  }
  return out;
}

// Trains `c` and the per-group reference side by side; checks losses each step and parameters at the end.
// The reference's round, written out here: the groups' mean; with the nesterov outer optimizer, SGD with
// Nesterov momentum on the pseudo-gradient (global - mean) as torch.optim.SGD(nesterov=True) defines it;
// then the inner AdamW state kept, averaged or reset.
void expect_fl_matches_reference(const FlCase& c, const std::string& optimizer, int k, double max_norm, int steps,
                                 const federation::FederationOptions& fed = {}) {
  const auto cfg = reference::tiny_config();
  const int64_t rows = 2, seq = 10;
  const double lr = optimizer == "sgd" ? 0.5 : 1e-2;
  fixture::Engine e(cfg, {c.group_size, c.shard_size, 0}, f64(), optimizer, /*federated=*/true, fed);
  const int groups = e.topo->layout().groups(), g = e.topo->coords().group;
  reference::ReferenceOptions ro;
  ro.optimizer = optimizer;
  ro.lr = lr;
  ro.max_norm = max_norm;
  std::vector<reference::ReferenceTrainer> refs;
  for (int i = 0; i < groups; ++i) refs.emplace_back(cfg, 5, ro);
  auto global = refs[0].parameters();
  std::map<std::string, at::Tensor> momentum;
  for (const auto& [name, t] : global) momentum[name] = at::zeros_like(t);
  for (int s = 1; s <= steps; ++s) {
    auto batch = reference::synthetic_batch(s, rows * world_size(), seq, cfg.vocab_size);
    const double got = e.step(batch, world_rank() * rows, rows, lr, max_norm, e.topo->group());
    std::vector<double> want;
    for (int i = 0; i < groups; ++i)
      want.push_back(refs[i].step(batch.narrow(0, i * c.group_size * rows, c.group_size * rows)));
    EXPECT_NEAR(got, want[g], 1e-9) << c.name << " step " << s;
    if (s % k == 0) {
      e.aggregator->sync(1.0);
      std::vector<std::map<std::string, at::Tensor>> models;
      for (auto& r : refs) models.push_back(r.parameters());
      auto next = average(models);
      if (fed.outer.name == "nesterov") {
        for (auto& [name, t] : next) {
          const auto delta = global[name] - t;
          momentum[name] = fed.outer.momentum * momentum[name] + delta;
          t = global[name] - fed.outer.lr * (delta + fed.outer.momentum * momentum[name]);
        }
      }
      global = next;
      for (auto& r : refs) r.set_parameters(next);
      if (fed.inner_state == "average") reference::ReferenceTrainer::average_optimizers(refs);
      if (fed.inner_state == "reset")
        for (auto& r : refs) r.reset_optimizer();
    }
  }
  EXPECT_LE(fixture::max_abs_diff(e.sharded->full_parameters(), refs[g].parameters()), 1e-9) << c.name;
}

// The largest difference between any group's full model and group 0's (gathered over the rank's segment).
double max_diff_from_group0(fixture::Engine& e) {
  std::vector<at::Tensor> parts;
  for (const auto& [name, t] : e.sharded->full_parameters()) parts.push_back(t.reshape({-1}));
  auto mine = at::cat(parts);
  auto& cross = *e.topo->segments().front().comm;  // equal groups: one segment per rank, one rank per group
  auto all = at::empty({mine.numel() * cross.size()}, mine.options());
  cross.all_gather(mine, all, comm::Traffic::Control)->wait();
  auto by_group = all.view({cross.size(), mine.numel()});
  return (by_group - by_group[0]).abs().max().item<double>();
}

}  // namespace

TEST(Federation, SgdWithSyncEveryStepEqualsTheWholeWorld) {
  // K = 1, plain SGD, no clipping: every FL variant is one SGD step on the global batch, i.e. fsdp on N ranks,
  // i.e. the single-process reference on the concatenated batch.
  const auto cfg = reference::tiny_config();
  for (const auto& c : fl_cases()) {
    fixture::Engine e(cfg, {c.group_size, c.shard_size, 0}, f64(), "sgd", /*federated=*/true);
    const auto ro = plain_sgd();
    reference::ReferenceTrainer whole(cfg, 5, ro);
    for (int s = 1; s <= 4; ++s) {
      auto batch = reference::synthetic_batch(s, 2 * world_size(), 10, cfg.vocab_size);
      const double got = e.step(batch, world_rank() * 2, 2, ro.lr, 0.0, e.topo->world());
      e.aggregator->sync(1.0);
      EXPECT_NEAR(got, whole.step(batch), 1e-9) << c.name << " step " << s;
    }
    EXPECT_LE(fixture::max_abs_diff(e.sharded->full_parameters(), whole.parameters()), 1e-9) << c.name;
  }
}

TEST(Federation, AdamWEveryFourStepsMatchesPerGroupReference) {
  for (const auto& c : fl_cases()) expect_fl_matches_reference(c, "adamw", 4, 0.5, 8);
}

// DiLoCo's outer step: outer lr 0.7 and momentum 0.9, so both the momentum and the lr show in the result.
TEST(Federation, NesterovOuterStepMatchesReference) {
  federation::FederationOptions fed;
  fed.outer = {"nesterov", 0.7, 0.9};
  for (const auto& c : fl_cases()) expect_fl_matches_reference(c, "adamw", 3, 0.5, 9, fed);
}

TEST(Federation, InnerStateAverageAndResetMatchReference) {
  for (const char* inner : {"average", "reset"}) {
    federation::FederationOptions fed;
    fed.inner_state = inner;
    for (const auto& c : fl_cases()) expect_fl_matches_reference(c, "adamw", 3, 0.5, 8, fed);
  }
}

TEST(Federation, GroupsDivergeBetweenSyncsAndAgreeExactlyAfter) {
  const auto cfg = reference::tiny_config();
  for (const auto& c : fl_cases()) {
    fixture::Engine e(cfg, {c.group_size, c.shard_size, 0}, f64(), "adamw", /*federated=*/true);
    for (int s = 1; s <= 4; ++s) {
      auto batch = reference::synthetic_batch(s, 2 * world_size(), 10, cfg.vocab_size);
      e.step(batch, world_rank() * 2, 2, 1e-2, 1.0, e.topo->group());
      if (s < 4) EXPECT_GT(max_diff_from_group0(e), 1e-6) << c.name << " groups should differ at step " << s;
    }
    e.aggregator->sync(1.0);
    EXPECT_EQ(max_diff_from_group0(e), 0.0) << c.name << " groups must agree bitwise after the sync";
  }
}

TEST(Federation, AggregateIsAWeightedMeanNotASum) {
  const auto cfg = reference::tiny_config();
  for (const auto& c : fl_cases()) {
    fixture::Engine e(cfg, {c.group_size, c.shard_size, 0}, f64(), "adamw", /*federated=*/true);
    const int g = e.topo->coords().group, groups = e.topo->layout().groups();
    {
      at::NoGradGuard no_grad;
      for (auto& u : e.sharded->units()) u->flat().shard().fill_(g + 1.0);  // group g holds g+1 everywhere
    }
    e.aggregator->sync(/*weight=*/g + 1.0);  // unequal weights: group g weighs g+1
    double num = 0, den = 0;
    for (int i = 0; i < groups; ++i) {
      num += (i + 1.0) * (i + 1.0);
      den += i + 1.0;
    }
    for (auto& u : e.sharded->units()) {
      auto& shard = u->flat().shard();
      EXPECT_NEAR(shard.min().item<double>(), num / den, 1e-12) << c.name;
      EXPECT_NEAR(shard.max().item<double>(), num / den, 1e-12) << c.name;
    }
  }
}

TEST(Federation, InterGroupBytesPerAggregationMatchTheFormula) {
  const auto cfg = reference::tiny_config();
  for (const auto& c : fl_cases()) {
    fixture::Engine e(cfg, {c.group_size, c.shard_size, 0}, f64(), "adamw", /*federated=*/true);
    const auto& l = e.topo->layout();
    const double G = l.groups(), S = l.group_size(0), H = l.shard_size(0), R = l.replicas(0);
    double padded = 0;
    for (auto& u : e.sharded->units()) padded += static_cast<double>(u->flat().padded_numel());
    const double psi_b = padded * 8.0;
    const auto before = comm::Ledger::instance().snapshot();
    e.aggregator->sync(1.0);
    const auto d = comm::Ledger::instance().snapshot() - before;
    const double inter_group = d.at(comm::Tier::InterGroup, comm::Traffic::Data).sent_bytes;
    EXPECT_NEAR(inter_group, 2.0 * (G - 1) / G * psi_b / S, 1e-6) << c.name;
    // Averaging whole shards on every replica (the paper's code) would send R times more across groups.
    const double whole_shards = 2.0 * (G - 1) / G * psi_b / H;
    EXPECT_NEAR(inter_group * R, whole_shards, 1e-6) << c.name;
    const double replica_gather = d.by_comm.count("replica") ? d.by_comm.at("replica").sent_bytes : 0.0;
    EXPECT_NEAR(replica_gather, (R - 1) / R * psi_b / H, 1e-6) << c.name;
    // Control: the weight, the votes, two FedNova sums, the launch's tokens, every group's step and flags:
    // 8 + 2G doubles over the rank's one segment.
    EXPECT_NEAR(d.at(comm::Tier::InterGroup, comm::Traffic::Control).sent_bytes, 2.0 * (G - 1) / G * (8.0 + 2 * G) * 8, 1e-9);
  }
}

TEST(Federation, SameGroupsGiveTheSameModelWhateverTheInnerSharding) {
  const auto cfg = reference::tiny_config();
  std::vector<std::map<std::string, at::Tensor>> results;
  const auto cases = fl_cases();
  for (const auto& c : cases) {
    fixture::Engine e(cfg, {c.group_size, c.shard_size, 0}, f64(), "adamw", /*federated=*/true);
    for (int s = 1; s <= 6; ++s) {
      auto batch = reference::synthetic_batch(s, 2 * world_size(), 10, cfg.vocab_size);
      e.step(batch, world_rank() * 2, 2, 1e-2, 0.5, e.topo->group());
      if (s % 3 == 0) e.aggregator->sync(1.0);
    }
    results.push_back(e.sharded->full_parameters());
  }
  for (size_t i = 1; i < results.size(); ++i)
    EXPECT_LE(fixture::max_abs_diff(results[i], results[0]), 1e-9) << cases[i].name << " vs " << cases[0].name;
}

namespace {

// Groups of different sizes on 8 ranks, fsdp inside (H = 0) or hsdp with H = 2.
struct UnequalCase {
  std::vector<int> groups;
  int shard_size;
  std::string label() const { return comm::Layout(groups, shard_size).describe_groups() + " H=" + std::to_string(shard_size); }
};
const std::vector<UnequalCase> kUnequal = {{{4, 2, 2}, 0}, {{3, 3, 2}, 0}, {{4, 2, 2}, 2}};

// Weighted FedAvg of reference models: group g weighs S_g / N (its share of the tokens).
std::map<std::string, at::Tensor> weighted_average(const std::vector<std::map<std::string, at::Tensor>>& models,
                                                   const std::vector<int>& sizes) {
  double n = 0;
  for (int s : sizes) n += s;
  std::map<std::string, at::Tensor> out;
  for (const auto& [name, t] : models[0]) {
    auto sum = at::zeros_like(t);
    for (size_t g = 0; g < models.size(); ++g) sum += models[g].at(name) * (sizes[g] / n);
    out[name] = sum;
  }
  return out;
}

}  // namespace

TEST(Federation, UnequalGroupsWithSyncEveryStepEqualTheWholeBatch) {
  // K = 1, SGD, no clipping, weights = tokens: the size-weighted mean of the groups' steps is one step on the
  // concatenated batch, whatever the group sizes.
  if (world_size() != 8) GTEST_SKIP() << "needs 8 ranks";
  const auto cfg = reference::tiny_config();
  for (const auto& c : kUnequal) {
    fixture::Engine e(cfg, comm::Layout(c.groups, c.shard_size), f64(), "sgd", /*federated=*/true);
    const int size = e.topo->layout().group_size(e.topo->coords().group);
    const auto ro = plain_sgd();
    reference::ReferenceTrainer whole(cfg, 5, ro);
    for (int s = 1; s <= 4; ++s) {
      auto batch = reference::synthetic_batch(s, 2 * world_size(), 10, cfg.vocab_size);
      const double group_loss = e.step(batch, world_rank() * 2, 2, ro.lr, 0.0, e.topo->group());
      e.aggregator->sync(static_cast<double>(size));
      // Each rank adds its group's mean loss / N: the groups' losses weighted by size, i.e. the batch mean.
      auto l = at::full({1}, group_loss / world_size(), at::kDouble);
      e.topo->world().all_reduce(l, comm::ReduceOp::Sum, comm::Traffic::Control)->wait();
      EXPECT_NEAR(l.item<double>(), whole.step(batch), 1e-9) << c.label() << " step " << s;
    }
    EXPECT_LE(fixture::max_abs_diff(e.sharded->full_parameters(), whole.parameters()), 1e-9) << c.label();
  }
}

TEST(Federation, UnequalGroupsEveryFourStepsMatchWeightedFedAvgOfThreeReferences) {
  if (world_size() != 8) GTEST_SKIP() << "needs 8 ranks";
  const auto cfg = reference::tiny_config();
  const int64_t rows = 2, seq = 10;
  for (const auto& c : kUnequal) {
    fixture::Engine e(cfg, comm::Layout(c.groups, c.shard_size), f64(), "adamw", /*federated=*/true);
    const auto& l = e.topo->layout();
    const int g = e.topo->coords().group;
    reference::ReferenceOptions ro;
    ro.optimizer = "adamw";
    ro.lr = 1e-2;
    ro.max_norm = 0.5;
    std::vector<reference::ReferenceTrainer> refs;
    for (int i = 0; i < l.groups(); ++i) refs.emplace_back(cfg, 5, ro);
    for (int s = 1; s <= 8; ++s) {
      auto batch = reference::synthetic_batch(s, rows * world_size(), seq, cfg.vocab_size);
      const double got = e.step(batch, world_rank() * rows, rows, ro.lr, ro.max_norm, e.topo->group());
      std::vector<double> want;
      for (int i = 0; i < l.groups(); ++i)
        want.push_back(refs[i].step(batch.narrow(0, l.first_rank(i) * rows, l.group_size(i) * rows)));
      EXPECT_NEAR(got, want[g], 1e-9) << c.label() << " step " << s;
      if (s % 4 == 0) {
        e.aggregator->sync(static_cast<double>(4 * l.group_size(g) * rows * seq));  // tokens since the last sync
        std::vector<std::map<std::string, at::Tensor>> models;
        for (auto& r : refs) models.push_back(r.parameters());
        const auto mean = weighted_average(models, c.groups);
        for (auto& r : refs) r.set_parameters(mean);
      }
    }
    EXPECT_LE(fixture::max_abs_diff(e.sharded->full_parameters(), refs[g].parameters()), 1e-9) << c.label();
  }
}

TEST(Federation, UnequalGroupsMoveTheModelAcrossGroupsOncePerRound) {
  // Over all ranks, one round sends 2 (G - 1) Psi b across groups, as a ring all-reduce of the model among G
  // parties does; each rank sends its share 2 (G - 1) / G * Psi b / S_g, give or take less than 2 elements per
  // all-reduce where a slice does not split evenly among the G parties. Counted at the MPI sends.
  if (world_size() != 8) GTEST_SKIP() << "needs 8 ranks";
  const auto cfg = reference::tiny_config();
  for (const auto& c : kUnequal) {
    fixture::Engine e(cfg, comm::Layout(c.groups, c.shard_size), f64(), "adamw", /*federated=*/true);
    const auto& l = e.topo->layout();
    const double G = l.groups(), S = l.group_size(e.topo->coords().group);
    double padded = 0;
    for (auto& u : e.sharded->units()) padded += static_cast<double>(u->flat().padded_numel());
    const double psi_b = padded * 8.0;
    const auto before = comm::Ledger::instance().snapshot();
    e.aggregator->sync(S);
    const auto round = (comm::Ledger::instance().snapshot() - before).at(comm::Tier::InterGroup, comm::Traffic::Data);
    const double mine = round.sent_bytes;
    EXPECT_NEAR(mine, 2.0 * (G - 1) / G * psi_b / S, 2 * 8.0 * static_cast<double>(round.calls))
        << c.label() << " rank " << world_rank();
    auto total = at::full({1}, mine, at::kDouble);
    e.topo->world().all_reduce(total, comm::ReduceOp::Sum, comm::Traffic::Control)->wait();
    EXPECT_NEAR(total.item<double>(), 2.0 * (G - 1) * psi_b, 1e-6) << c.label();
  }
}
