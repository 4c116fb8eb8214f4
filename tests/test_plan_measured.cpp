// `fedshard plan`'s byte predictions against the bytes the rings handed to MPI's sends in real training runs
// (counted at the sends, not computed from the formula the plan uses). Summed over the ranks, a ring moves
// exactly (p-1) buffers per reduce-scatter or all-gather and 2(p-1) per all-reduce, so the world's counted
// bytes per tier must equal the sum of the plan's per-rank predictions to the byte. One rank alone differs
// from the formula's average when a buffer of n elements does not split into p equal segments: by less than
// one element per reduce-scatter or all-gather pass, so by less than 2 elements (16 bytes at most) per
// collective call; each step line (rank 0's) must be within that of the plan's step (plus one aggregation
// round on aggregation steps). Also with parallel.reduce_dtype = bfloat16, priced with 2-byte reductions.
#include <gtest/gtest.h>
#include <mpi.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "comm/mpi_runtime.h"
#include "corpus_fixture.h"
#include "plan/cost_model.h"
#include "train/trainer.h"

using namespace fedshard;
namespace fs = std::filesystem;

namespace {

struct Case {
  std::string strategy;
  int group_size, shard_size;
  std::string reduce_dtype = "float32";
  std::vector<int> groups = {};  // groups of different sizes instead of group_size
  bool eval_group_model = false;  // its gathers and all-reduces must stay out of the step's bytes
};

void expect_plan_matches_run(const Case& c, const std::string& data, const fs::path& out) {
  auto& mpi = comm::MpiRuntime::get();
  const int rpn = 2;
  train::TrainConfig cfg;
  cfg.model = "tiny";
  cfg.data_dir = data;
  cfg.seq_len = 32;
  cfg.batch_size = 2;
  cfg.steps = 5;
  cfg.sync_every = 2;
  cfg.strategy = c.strategy;
  cfg.group_size = c.group_size;
  cfg.groups = c.groups;
  cfg.shard_size = c.shard_size;
  cfg.reduce_dtype = c.reduce_dtype;
  cfg.ranks_per_node = rpn;
  cfg.eval_every = 0;
  cfg.eval_windows = 4;
  cfg.eval_group_model = c.eval_group_model;
  cfg.threads = 1;
  cfg.out = out.string();
  {
    train::Trainer t(train::prepare_training(cfg, mpi.world_size(), mpi.world_rank()));
    t.run();
  }
  if (mpi.world_rank() != 0) return;

  plan::Cluster cluster;
  cluster.nodes = mpi.world_size() / rpn;
  cluster.ranks_per_node = rpn;
  plan::Workload w;
  w.model = model::preset("tiny");
  w.model.vocab_size = 258;
  w.batch_per_rank = cfg.batch_size;
  w.seq_len = cfg.seq_len;
  w.param_bytes = w.master_bytes = 4;
  w.reduce_bytes = c.reduce_dtype == "bfloat16" ? 2 : 4;
  w.compute_seconds = 1;
  plan::StrategySpec spec;
  spec.strategy = parallel::parse_strategy(c.strategy);
  spec.group_size = c.group_size;
  spec.groups = c.groups;
  spec.shard_size = c.shard_size;
  spec.sync_every = static_cast<int>(cfg.sync_every);
  const auto p = plan::plan_strategy(cluster, w, spec);
  std::array<double, 3> step{}, round{}, step_calls{}, round_calls{};
  for (const auto& col : p.collectives) {
    (col.per_round ? round : step)[static_cast<int>(col.tier)] +=
        comm::ring_bus_bytes(col.kind, col.full_bytes, col.ranks) * col.count;
    (col.per_round ? round_calls : step_calls)[static_cast<int>(col.tier)] += col.count;
  }
  constexpr double kUnevenBytesPerCall = 16;

  std::ifstream in(out / "metrics.jsonl");
  int checked = 0, rounds = 0;
  for (std::string line; std::getline(in, line);) {
    const auto j = nlohmann::json::parse(line);
    if (j["type"] == "summary") {
      // Every rank's own steps, against the plan for that rank (ranks of groups of different sizes differ).
      ASSERT_EQ(j["step_bytes_by_rank"].size(), static_cast<size_t>(mpi.world_size()));
      EXPECT_TRUE(j["bytes_counted"].get<bool>());
      for (comm::Tier t : comm::kTiers) {
        const int i = static_cast<int>(t);
        double counted = 0, want = 0;
        for (int r = 0; r < mpi.world_size(); ++r) {
          const auto b = plan::rank_bytes(p.layout, r, cluster, w, spec);
          const double mine = j["step_bytes_by_rank"][r][comm::tier_metric_key(t)].get<double>();
          const double predicted = cfg.steps * b.per_step[i] + rounds * b.per_round[i];
          const double calls = cfg.steps * step_calls[i] + rounds * round_calls[i];
          EXPECT_NEAR(mine, predicted, kUnevenBytesPerCall * calls + 1e-6)
              << c.strategy << " rank " << r << " tier " << comm::tier_name(t);
          counted += mine;
          want += predicted;
        }
        EXPECT_NEAR(counted, want, 1e-9 * want + 1e-6) << c.strategy << " all ranks, tier " << comm::tier_name(t);
      }
    }
    if (j["type"] != "step") continue;
    const bool agg = j["aggregated"].get<bool>();
    rounds += agg;
    for (comm::Tier t : comm::kTiers) {
      const int i = static_cast<int>(t);
      const double calls = step_calls[i] + (agg ? round_calls[i] : 0.0);
      EXPECT_NEAR(j["bytes"][comm::tier_metric_key(t)].get<double>(), step[i] + (agg ? round[i] : 0.0),
                  kUnevenBytesPerCall * calls + 1e-6)
          << c.strategy << " (" << c.reduce_dtype << ") step " << j["step"] << " tier " << comm::tier_name(t);
    }
    ++checked;
  }
  EXPECT_EQ(checked, 5);
}

}  // namespace

TEST(PlanVsMeasured, BytesPerStepAndRoundAreExact) {
  auto& mpi = comm::MpiRuntime::get();
  const fs::path root = fs::temp_directory_path() / ("fedshard-planbytes-" + std::to_string(::getppid()));
  if (mpi.world_rank() == 0) {
    fs::remove_all(root);
    fixture::license_corpus(root);
  }
  MPI_Barrier(MPI_COMM_WORLD);
  const int n = mpi.world_size();
  std::vector<Case> cases = {{"ddp", 0, 0}, {"fsdp", 0, 0}, {"hsdp", 0, 2}, {"fl-fsdp", 2, 0}, {"fl-ddp", n / 2, 0}};
  if (n >= 8) {
    cases.push_back({"fl-hsdp", 4, 2});
    cases.push_back({"fl-fsdp", 0, 0, "float32", {4, 2, 2}});
    cases.push_back({"fl-fsdp", 0, 0, "float32", {3, 3, 2}});
    cases.push_back({"fl-hsdp", 0, 2, "float32", {4, 2, 2}});
  }
  cases.push_back({"hsdp", 0, 2, "bfloat16"});
  cases.push_back({"fl-fsdp", 2, 0, "bfloat16"});
  cases.push_back({"fl-fsdp", 2, 0, "float32", {}, /*eval_group_model=*/true});
  for (const auto& c : cases)
    expect_plan_matches_run(c, (root / "corpus").string(),
                            root / ("run-" + c.strategy + "-" + c.reduce_dtype + "-" + std::to_string(c.groups.size()) +
                                    (c.eval_group_model ? "-eval" : "")));
  MPI_Barrier(MPI_COMM_WORLD);
  if (mpi.world_rank() == 0) fs::remove_all(root);
}
