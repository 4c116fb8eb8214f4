// Checkpoints through the real writer and reader: exact restore on the same layout (including a federated
// run mid-round), re-slicing to another strategy and world layout, the group average of a mid-round
// checkpoint, surviving groups continuing their own state after a group is lost, the in-memory hand-over of a
// rank's state to a rebuilt engine (in-job recovery), and the Hugging Face export/import round trip.
#include <gtest/gtest.h>
#include <mpi.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>

#include "engine_fixture.h"
#include "model/hf_adapter.h"
#include "model/hf_checkpoint.h"
#include "reference.h"
#include "train/checkpoint.h"
#include "util/safetensors.h"

using namespace fedshard;
namespace fs = std::filesystem;

namespace {

int world_rank() { return comm::MpiRuntime::get().world_rank(); }
int world_size() { return comm::MpiRuntime::get().world_size(); }

fs::path shared_dir(const std::string& name) {
  return fs::temp_directory_path() / ("fedshard-ckpt-" + name + "-" + std::to_string(::getppid()));
}

parallel::ShardingOptions f64() {
  parallel::ShardingOptions o;
  o.master_dtype = o.compute_dtype = at::kDouble;
  return o;
}

nlohmann::json config_json(const std::string& strategy) {
  return {{"resolved", {{"strategy", strategy}}},
          {"optim", {{"name", "adamw"}}},
          {"federation", {{"outer_optimizer", "fedavg"}}}};
}

void train_steps(fixture::Engine& e, int steps, int first = 1) {
  const auto cfg = reference::tiny_config();
  for (int s = first; s < first + steps; ++s) {
    auto batch = reference::synthetic_batch(s, 2 * world_size(), 10, cfg.vocab_size);
    e.step(batch, world_rank() * 2, 2, 1e-2, 1.0, e.topo->group());
  }
}

// Full (unpadded) values of one optimizer state tensor across this rank's shard group.
at::Tensor full_state(fixture::Engine& e, const std::string& key) {
  std::vector<at::Tensor> parts;
  const auto& units = e.sharded->units();
  for (size_t u = 0; u < units.size(); ++u) {
    auto& flat = units[u]->flat();
    auto& t = e.optimizer->state()[u].at(key);
    auto full = at::empty({flat.padded_numel()}, t.options());
    e.topo->shard().all_gather(t, full)->wait();
    parts.push_back(full.narrow(0, 0, flat.numel()));
  }
  return at::cat(parts);
}

// A directory every rank of this mpirun shares, empty at the start of a test and removed at its end (after
// every rank is done with it), so no run leaves checkpoints behind in the temporary directory.
class ScratchDir {
 public:
  explicit ScratchDir(const std::string& name) : path_(shared_dir(name)) {
    if (world_rank() == 0) fs::remove_all(path_);
    MPI_Barrier(MPI_COMM_WORLD);
  }
  ~ScratchDir() {
    MPI_Barrier(MPI_COMM_WORLD);
    if (world_rank() == 0) fs::remove_all(path_);
  }
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

}  // namespace

TEST(Checkpoint, ReslicesToAnotherStrategyAndLayout) {
  if (world_size() < 8) GTEST_SKIP() << "needs 8 ranks";
  const auto cfg = reference::tiny_config();
  const ScratchDir scratch("reslice");
  const auto& dir = scratch.path();
  fixture::Engine a(cfg, {0, 0, 0}, f64());  // fsdp over 8
  train_steps(a, 3);
  train::save_checkpoint(dir.string(), 2, {3, 0, 0, {0}}, config_json("fsdp"), cfg, *a.topo, *a.sharded, *a.optimizer, nullptr);
  const auto want_params = a.sharded->full_parameters();
  const auto want_m = full_state(a, "exp_avg");
  const auto meta = train::load_checkpoint_meta(*train::find_checkpoint("auto", dir.string()), cfg, true, world_rank());
  EXPECT_EQ(meta.step, 3);

  fixture::Engine b(cfg, {4, 2, 0}, f64(), "adamw", /*federated=*/true);  // fl-hsdp S=4 H=2
  EXPECT_FALSE(train::same_layout(meta, b.topo->layout(), "fl-hsdp"));
  const auto st = train::restore_checkpoint(meta, *b.topo, "fl-hsdp", *b.sharded, *b.optimizer, b.aggregator.get());
  EXPECT_EQ(st.step, 3);
  EXPECT_EQ(b.optimizer->steps(), 3);
  EXPECT_EQ(fixture::max_abs_diff(b.sharded->full_parameters(), want_params), 0.0);
  EXPECT_TRUE(at::equal(full_state(b, "exp_avg"), want_m));
  // The restored run trains on from there.
  train_steps(b, 1, 4);
}

// The kept groups write a step's checkpoint again after a rank was lost while writing it (in-job recovery).
TEST(Checkpoint, ACheckpointWrittenAgainReplacesTheStepWhole) {
  const auto cfg = reference::tiny_config();
  const ScratchDir scratch("again");
  const auto& dir = scratch.path();
  fixture::Engine a(cfg, {0, 0, 0}, f64());
  train_steps(a, 2);
  train::save_checkpoint(dir.string(), 2, {2, 0, 0, {0}}, config_json("fsdp"), cfg, *a.topo, *a.sharded, *a.optimizer, nullptr);
  train_steps(a, 1, 3);
  train::save_checkpoint(dir.string(), 2, {2, 0, 0, {0}}, config_json("fsdp"), cfg, *a.topo, *a.sharded, *a.optimizer, nullptr);
  const auto meta = train::load_checkpoint_meta(*train::find_checkpoint("auto", dir.string()), cfg, true, world_rank());
  fixture::Engine b(cfg, {0, 0, 0}, f64());
  train::restore_checkpoint(meta, *b.topo, "fsdp", *b.sharded, *b.optimizer, nullptr);
  EXPECT_EQ(b.optimizer->steps(), 3);
  EXPECT_EQ(fixture::max_abs_diff(b.sharded->full_parameters(), a.sharded->full_parameters()), 0.0);
  MPI_Barrier(MPI_COMM_WORLD);
  std::vector<std::string> entries;
  for (const auto& e : fs::directory_iterator(dir / "checkpoints")) entries.push_back(e.path().filename().string());
  std::sort(entries.begin(), entries.end());
  EXPECT_EQ(entries, (std::vector<std::string>{"latest", "step-00000002"}));
}

TEST(Checkpoint, MidRoundFederatedCheckpointRestoresExactlyOrAsTheGroupAverage) {
  if (world_size() < 4) GTEST_SKIP() << "needs 4 ranks";
  const auto cfg = reference::tiny_config();
  const ScratchDir scratch("midround");
  const auto& dir = scratch.path();
  const int s = world_size() / 2;
  fixture::Engine a(cfg, {s, 0, 0}, f64(), "adamw", /*federated=*/true);  // fl-fsdp, 2 groups
  train_steps(a, 3);  // no sync: the groups' models differ
  train::save_checkpoint(dir.string(), 2, {3, 3, 0, {0, 1}}, config_json("fl-fsdp"), cfg, *a.topo, *a.sharded, *a.optimizer, a.aggregator.get());
  const auto mine = a.sharded->full_parameters();
  const auto meta = train::load_checkpoint_meta(dir.string() + "/checkpoints/step-00000003", cfg, true, world_rank());

  // Same layout: every rank gets exactly its own group's state back, mid-round.
  fixture::Engine same(cfg, {s, 0, 0}, f64(), "adamw", true);
  const auto st = train::restore_checkpoint(meta, *same.topo, "fl-fsdp", *same.sharded, *same.optimizer, same.aggregator.get());
  EXPECT_EQ(st.steps_since_sync, 3);
  EXPECT_EQ(fixture::max_abs_diff(same.sharded->full_parameters(), mine), 0.0);

  // Another layout: the average of the two groups' models (what FedAvg would make of them).
  std::map<std::string, at::Tensor> mean;
  for (const auto& [name, t] : mine) {
    auto both = at::empty({2 * t.numel()}, t.options());
    a.topo->segments().front().comm->all_gather(t.reshape({-1}).contiguous(), both)->wait();
    mean[name] = both.view({2, t.numel()}).mean(0).view(t.sizes());
  }
  fixture::Engine other(cfg, {0, 0, 0}, f64());
  train::restore_checkpoint(meta, *other.topo, "fsdp", *other.sharded, *other.optimizer, nullptr);
  EXPECT_LE(fixture::max_abs_diff(other.sharded->full_parameters(), mean), 1e-15);
  EXPECT_LE(fixture::max_abs_diff(train::consolidated_parameters(meta), mean), 1e-15);
}

TEST(Checkpoint, SurvivingGroupsContinueTheirOwnStateOnAnotherLayout) {
  // Four groups of 2 checkpointed mid-round; group 1 is lost. The run goes on as groups {3, 3, 2} that
  // continue checkpoint groups 0, 2 and 3: each must hold exactly its own group's model and optimizer state
  // (re-sliced to its new size), not the average, and stay mid-round.
  if (world_size() != 8) GTEST_SKIP() << "needs 8 ranks";
  const auto cfg = reference::tiny_config();
  const ScratchDir scratch("relayout");
  const auto& dir = scratch.path();
  fixture::Engine a(cfg, {2, 0, 0}, f64(), "adamw", /*federated=*/true);
  train_steps(a, 3);  // no sync: the four groups' models differ
  train::save_checkpoint(dir.string(), 1, {3, 3, 0, {0, 1, 2, 3}}, config_json("fl-fsdp"), cfg, *a.topo, *a.sharded,
                         *a.optimizer, a.aggregator.get());
  // Every group's full model and AdamW moment, as held before the failure.
  auto everyone = [&](const at::Tensor& mine) {
    auto all = at::empty({world_size() * mine.numel()}, mine.options());
    a.topo->world().all_gather(mine, all, comm::Traffic::Control)->wait();
    return all.view({world_size(), mine.numel()});
  };
  std::vector<at::Tensor> parts;
  for (const auto& [name, t] : a.sharded->full_parameters()) parts.push_back(t.reshape({-1}));
  const auto params = everyone(at::cat(parts));
  const auto moments = everyone(full_state(a, "exp_avg"));
  const auto meta = train::load_checkpoint_meta(dir.string() + "/checkpoints/step-00000003", cfg, true, world_rank());
  EXPECT_EQ(meta.group_ids, (std::vector<int>{0, 1, 2, 3}));

  const std::vector<int> continues = {0, 2, 3};
  fixture::Engine b(cfg, comm::Layout({3, 3, 2}, 0), f64(), "adamw", /*federated=*/true);
  const auto st = train::restore_checkpoint(meta, *b.topo, "fl-fsdp", *b.sharded, *b.optimizer, b.aggregator.get(),
                                            continues);
  EXPECT_EQ(st.steps_since_sync, 3);
  const int old_rank = meta.layout.first_rank(continues[b.topo->coords().group]);
  parts.clear();
  for (const auto& [name, t] : b.sharded->full_parameters()) parts.push_back(t.reshape({-1}));
  EXPECT_TRUE(at::equal(at::cat(parts), params[old_rank]));
  EXPECT_TRUE(at::equal(full_state(b, "exp_avg"), moments[old_rank]));
  // Not the average: the groups differed.
  EXPECT_FALSE(at::equal(params[0], params[2]));
}

// In-job recovery (train::Trainer::recover) hands a kept rank's state from the engine it trained with to one
// built over the survivors, in memory: everything a checkpoint of the rank holds must arrive, and the two engines
// must then train on identically. Here the new engine has the same layout (over the same world), seeded
// differently, with a Nesterov outer step (momentum and a global slice), bfloat16 rounds (the last global model)
// and rounds already taken.
TEST(Checkpoint, HandOverMovesEveryPartOfARanksState) {
  const auto cfg = reference::tiny_config();
  federation::FederationOptions fed;
  fed.outer = {"nesterov", 0.7, 0.9};
  fed.reduce_dtype = at::kBFloat16;
  fixture::Engine a(cfg, {world_size() / 2, 0, 0}, f64(), "adamw", /*federated=*/true, fed);  // two groups
  train_steps(a, 2);
  a.aggregator->sync(1.0);
  train_steps(a, 2, 3);
  a.aggregator->sync(1.0);
  train_steps(a, 1, 5);
  train::EngineSpec spec;
  spec.layout = a.topo->layout();
  spec.model = cfg;
  spec.sharding = f64();
  spec.optimizer.name = "adamw";
  spec.federation = fed;
  spec.seed = 11;
  auto b = train::parallelize(spec);
  EXPECT_FALSE(at::equal(b.sharded->units()[1]->flat().shard(), a.sharded->units()[1]->flat().shard()));
  train::hand_over(a, b);

  const auto& units = a.sharded->units();
  using State = std::vector<std::map<std::string, at::Tensor>>;
  auto same = [&](const State& want, const State& got, const char* what) {
    ASSERT_EQ(want.size(), got.size()) << what;
    for (size_t u = 0; u < want.size(); ++u) {
      ASSERT_EQ(want[u].size(), got[u].size()) << what << ", unit " << u;
      for (const auto& [k, t] : want[u]) EXPECT_TRUE(at::equal(got[u].at(k), t)) << what << ", unit " << u << ": " << k;
    }
  };
  for (size_t u = 0; u < units.size(); ++u)
    EXPECT_TRUE(at::equal(b.sharded->units()[u]->flat().shard(), units[u]->flat().shard())) << "unit " << u;
  same(a.optimizer->state(), b.optimizer->state(), "inner optimizer");
  same(a.aggregator->outer().state(), b.aggregator->outer().state(), "outer optimizer");
  ASSERT_TRUE(a.aggregator->state()[0].count("global"));
  same(a.aggregator->state(), b.aggregator->state(), "aggregator");
  EXPECT_EQ(b.optimizer->steps(), a.optimizer->steps());
  EXPECT_EQ(b.optimizer->slice_steps(), a.optimizer->slice_steps());

  // Both train on and take a round: still equal.
  auto step = [&](train::Engine& e) {
    auto batch = reference::synthetic_batch(6, 2 * world_size(), 10, cfg.vocab_size);
    auto local = batch.narrow(0, world_rank() * 2, 2);
    model::next_token_loss(e.sharded->forward(local.narrow(1, 0, 10)), local.narrow(1, 1, 10)).backward();
    e.sharded->wait_grads();
    e.optimizer->step(1e-2);
    e.aggregator->sync(1.0);
  };
  step(a);
  step(b);
  for (size_t u = 0; u < units.size(); ++u)
    EXPECT_TRUE(at::equal(b.sharded->units()[u]->flat().shard(), units[u]->flat().shard())) << "unit " << u;
}

// A checkpoint of two groups with a delayed round in flight (and int8 residuals), resumed onto another
// layout: the round is applied at the resume by the delayed rule, which the original engine's own finish()
// gives as the reference (checked against a float64 reference in test_relaxed_rounds). Merged into one fsdp
// model: the groups' size-weighted mean of their post-round models. Continued per group ({3, 1}: each
// checkpoint group by one group of another size): each its own post-round model, no round left in flight,
// the residuals of averaged chunks neither lost nor doubled.
TEST(Checkpoint, RoundInFlightIsAppliedWhenTheLayoutChanges) {
  if (world_size() != 4) GTEST_SKIP() << "needs 4 ranks";
  const auto cfg = reference::tiny_config();
  const ScratchDir scratch("inflight");
  const auto& dir = scratch.path();
  federation::FederationOptions fed;
  fed.overlap = true;
  fed.compress = "int8";
  fed.compress_block = 8;
  fixture::Engine a(cfg, {2, 0, 0}, f64(), "adamw", /*federated=*/true, fed);  // fl-fsdp, 2 groups of 2
  std::vector<size_t> all(a.sharded->units().size());
  for (size_t u = 0; u < all.size(); ++u) all[u] = u;
  train_steps(a, 2);
  a.aggregator->begin(all, 1.0, federation::Vote{});
  train_steps(a, 1, 3);  // progress while the round is in flight: the groups differ from what they sent
  auto config = config_json("fl-fsdp");
  config["federation"]["compress"] = "int8";
  train::save_checkpoint(dir.string(), 1, {3, 1, 1, {0, 1}}, config, cfg, *a.topo, *a.sharded, *a.optimizer,
                         a.aggregator.get());
  const auto meta = train::load_checkpoint_meta(dir.string() + "/checkpoints/step-00000003", cfg, true, world_rank());
  ASSERT_EQ(meta.round_in_flight.size(), all.size());
  auto world_sum = [&](at::Tensor t) {
    a.topo->world().all_reduce(t, comm::ReduceOp::Sum, comm::Traffic::Control)->wait();
    return t;
  };
  auto residual_sum = [&](federation::Aggregator& agg, const char* name) {
    double sum = 0;
    for (const auto& st : agg.state()) sum += st.at(name).sum().item<double>();
    return world_sum(at::full({1}, sum, at::kDouble)).item<double>();
  };
  const double owned_before = residual_sum(*a.aggregator, "mean_residual");
  a.aggregator->finish();  // the reference: the round applied where it stood
  const auto mine = a.sharded->full_parameters();
  std::map<std::string, at::Tensor> mean;  // the two groups' mean (equal sizes)
  for (const auto& [name, t] : mine) {
    auto both = at::empty({2 * t.numel()}, t.options());
    a.topo->segments().front().comm->all_gather(t.reshape({-1}).contiguous(), both)->wait();
    mean[name] = both.view({2, t.numel()}).mean(0).view(t.sizes());
  }
  std::vector<at::Tensor> everyone_parts;
  for (const auto& [name, t] : mine) everyone_parts.push_back(t.reshape({-1}));
  auto everyone = at::empty({world_size() * at::cat(everyone_parts).numel()}, at::kDouble);
  a.topo->world().all_gather(at::cat(everyone_parts), everyone, comm::Traffic::Control)->wait();
  everyone = everyone.view({world_size(), -1});

  fixture::Engine merged(cfg, {0, 0, 0}, f64());
  train::restore_checkpoint(meta, *merged.topo, "fsdp", *merged.sharded, *merged.optimizer, nullptr);
  EXPECT_LE(fixture::max_abs_diff(merged.sharded->full_parameters(), mean), 1e-15) << "merged onto one model";

  fixture::Engine b(cfg, comm::Layout({3, 1}, 0), f64(), "adamw", /*federated=*/true, fed);
  train::restore_checkpoint(meta, *b.topo, "fl-fsdp", *b.sharded, *b.optimizer, b.aggregator.get(), {0, 1});
  EXPECT_FALSE(b.aggregator->in_flight());
  std::vector<at::Tensor> parts;
  for (const auto& [name, t] : b.sharded->full_parameters()) parts.push_back(t.reshape({-1}));
  const int from = meta.layout.first_rank(b.topo->coords().group);
  EXPECT_LE((at::cat(parts) - everyone[from]).abs().max().item<double>(), 1e-15) << "continued per group";
  EXPECT_NEAR(residual_sum(*b.aggregator, "mean_residual"), owned_before, 1e-12);
  EXPECT_NE(owned_before, 0.0) << "int8 left no residual to carry, so nothing was tested";
  train_steps(b, 1, 4);
}

TEST(Checkpoint, HuggingFaceExportImportRoundTrip) {
  const auto cfg = reference::tiny_config();
  const ScratchDir scratch("hf");
  const auto& dir = scratch.path();
  fixture::Engine a(cfg, {0, 0, 0}, f64());
  train_steps(a, 2);
  train::save_checkpoint(dir.string(), 1, {2, 0, 0, {0}}, config_json("fsdp"), cfg, *a.topo, *a.sharded, *a.optimizer, nullptr);
  const auto want = a.sharded->full_parameters();
  const auto ckpt = *train::find_checkpoint("auto", dir.string());
  // Export (what `fedshard export` writes) on rank 0, in shards of at most 20 KB: several files and an index.
  const auto hf_dir = dir / "hf";
  if (world_rank() == 0) {
    const auto meta = train::load_checkpoint_meta(ckpt, train::checkpoint_model(ckpt), true, -1);
    const auto params = train::consolidated_parameters(meta);
    const auto files = model::write_hf_checkpoint(
        hf_dir.string(), cfg, [&](const std::string& name) { return params.at(name); }, "float32", 20000,
        model::hf_config(cfg, "float32", {}), model::hf_generation_config({}));
    EXPECT_GT(files.size(), 2u);
  }
  MPI_Barrier(MPI_COMM_WORLD);
  // Import into a fresh engine of another layout (each rank reading only its slices) through the HF names.
  const model::HfCheckpoint hf(hf_dir.string());
  EXPECT_EQ(model::architecture_difference(hf.config(), cfg), "");
  comm::Topology topo(comm::Layout::uniform(world_size(), 0, 0), {});  // fsdp over every rank
  model::Llama m(cfg, at::kDouble, false);
  parallel::ShardedModel b(m, topo.shard(), topo.replica(), f64(), topo.layout().pad_multiple(),
                           [&hf](const model::ParamSlot& s, int64_t begin, at::Tensor dst) { hf.read(s.name, begin, dst); });
  std::map<std::string, at::Tensor> want_f32;
  for (const auto& [name, t] : want) want_f32[name] = t.to(at::kFloat).to(at::kDouble);
  EXPECT_EQ(fixture::max_abs_diff(b.full_parameters(), want_f32), 0.0);
}
