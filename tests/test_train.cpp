// End-to-end training through the real trainer on real text: the loss goes down, the metrics file follows
// DESIGN.md's schema, and config errors name what is wrong.
#include <gtest/gtest.h>
#include <mpi.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "comm/mpi_runtime.h"
#include "corpus_fixture.h"
#include "train/config.h"
#include "train/trainer.h"
#include "util/error.h"

using namespace fedshard;
namespace fs = std::filesystem;

namespace {

fs::path temp_root(const std::string& name) {
  // Every rank uses the same directory (rank 0 prepares it; the others wait at the barrier in the caller).
  auto p = fs::temp_directory_path() / ("fedshard-test-" + name + "-" + std::to_string(::getppid()));
  return p;
}

std::vector<nlohmann::json> read_jsonl(const fs::path& p) {
  std::vector<nlohmann::json> out;
  std::ifstream in(p);
  for (std::string line; std::getline(in, line);) out.push_back(nlohmann::json::parse(line));
  return out;
}

train::TrainConfig tiny_run(const std::string& data, const std::string& out) {
  train::TrainConfig c;
  c.model = "tiny";
  c.data_dir = data;
  c.seq_len = 64;
  c.batch_size = 4;
  c.steps = 30;
  c.lr = 3e-3;
  c.warmup_steps = 3;
  c.eval_every = 0;
  c.eval_windows = 16;
  c.out = out;
  c.threads = 1;
  return c;
}

}  // namespace

TEST(Train, ThirtyStepsOfTinyLowerTheLossAndLogTheSchema) {
  const auto root = temp_root("smoke");
  auto& mpi = comm::MpiRuntime::get();
  if (mpi.world_rank() == 0) {
    fs::remove_all(root);
    fixture::license_corpus(root);
  }
  MPI_Barrier(MPI_COMM_WORLD);
  auto cfg = tiny_run((root / "corpus").string(), (root / "run").string());
  train::Trainer trainer(train::prepare_training(cfg, mpi.world_size(), mpi.world_rank()));
  const auto summary = trainer.run();
  if (mpi.world_rank() != 0) return;

  const auto lines = read_jsonl(root / "run" / "metrics.jsonl");
  std::vector<double> losses;
  bool saw_eval = false, saw_summary = false;
  for (const auto& j : lines) {
    if (j["type"] == "step") {
      losses.push_back(j["loss"].get<double>());
      for (const char* k : {"step", "tokens", "loss", "lr", "grad_norm", "tok_per_s", "mfu", "aggregated"})
        EXPECT_TRUE(j.contains(k)) << k;
      for (const char* k : {"total", "compute", "comm_exposed"}) EXPECT_TRUE(j["time_s"].contains(k)) << k;
      for (const char* k : {"node", "inter_node", "inter_group"}) EXPECT_TRUE(j["bytes"].contains(k)) << k;
    }
    saw_eval = saw_eval || (j["type"] == "eval" && j["model"] == "global" && j.contains("val_ppl"));
    saw_summary = saw_summary || j["type"] == "summary";
  }
  ASSERT_EQ(losses.size(), 30u);
  double first = 0, last = 0;
  for (int i = 0; i < 5; ++i) {
    first += losses[i] / 5;
    last += losses[25 + i] / 5;
  }
  EXPECT_LT(last, first - 0.5) << "first five " << first << ", last five " << last;
  EXPECT_TRUE(saw_eval);
  EXPECT_TRUE(saw_summary);
  EXPECT_LT(summary.final_val_ppl, 258.0);  // better than uniform over the byte vocabulary
  EXPECT_TRUE(fs::exists(root / "run" / "config.json"));
  fs::remove_all(root);
}

TEST(Config, ErrorsNameTheKeyOrFile) {
  auto expect_error = [](const std::string& toml, const train::Overrides& o, const std::string& needle) {
    const auto path = fs::temp_directory_path() / ("fedshard-config-" + std::to_string(::getpid()) + ".toml");
    std::ofstream(path) << toml;
    try {
      train::load_config(path.string(), o);
      ADD_FAILURE() << "no error for: " << toml;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
    fs::remove(path);
  };
  expect_error("[optim]\nlrr = 1\n", {}, "unknown configuration key 'optim.lrr'");
  expect_error("[train]\nsteps = \"ten\"\n", {}, "'train.steps' must be an integer");
  expect_error("[train]\nsteps = -5\n", {}, "train.steps must be positive");
  expect_error("", {{"train.steps", "abc", "--steps"}}, "--steps: 'abc' is not an integer");
  expect_error("", {{"parallel.strategy", "zero3", "--strategy"}}, "unknown strategy 'zero3'");
  expect_error("[model\n", {}, ".toml:1:");
  EXPECT_THROW(train::load_config("/nonexistent/x.toml", {}), Error);
  const auto ok = train::load_config("", {{"optim.lr", "0.01", "--lr"}, {"train.steps", "7", "--steps"}});
  EXPECT_EQ(ok.steps, 7);
  EXPECT_DOUBLE_EQ(ok.lr, 0.01);
}
