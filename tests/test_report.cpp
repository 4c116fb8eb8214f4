// `fedshard report` on fixture run directories (tests/fixtures): the table's numbers against hand-computed
// means, real PNG/SVG files from gnuplot, steps priced from a hand-written plan, and clear errors for broken
// input.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "report/plan_time.h"
#include "report/report.h"
#include "util/error.h"
#include "util/posix_file.h"

using namespace fedshard;
namespace fs = std::filesystem;

namespace {
const fs::path fixtures = FEDSHARD_TEST_FIXTURES;
}

TEST(Report, TableHoldsHandComputedMedians) {
  const auto a = report::load_run((fixtures / "run-fsdp").string());
  // Steps >= 3 only (warm-up): times 1, 3, 2, 4 -> mean 2.5; bytes node 3000..6000 -> 4500; 4096 tokens/step.
  EXPECT_DOUBLE_EQ(a.mean_step_seconds(), 2.5);
  EXPECT_DOUBLE_EQ(a.mean_bytes()[0], 4500.0);
  EXPECT_DOUBLE_EQ(a.tok_per_s(), 4096 / 2.5);
  EXPECT_EQ(a.label, "fsdp");
  ASSERT_TRUE(a.predicted_step_s.has_value());
  EXPECT_DOUBLE_EQ(*a.predicted_step_s, 2.5);
  ASSERT_EQ(a.evals.size(), 2u);
  EXPECT_DOUBLE_EQ(a.evals[0].train_seconds, 12.0);  // 9 + 2 + 1: training time up to step 3
  const auto b = report::load_run((fixtures / "run-fl").string());
  EXPECT_EQ(b.label, "fl-hsdp S=4 H=2 K=4 by-source");
  EXPECT_DOUBLE_EQ(b.mean_step_seconds(), 1.3);  // 1.5, 1, 2, 1, 1
  EXPECT_DOUBLE_EQ(b.mean_bytes()[2], 100.0);     // one aggregation (step 4: 500 bytes) in five steps
  const auto md = report::markdown_table({a, b});
  EXPECT_NE(md.find("| run-fsdp | fsdp | 6 | 24576 | 2.500 |"), std::string::npos) << md;
  EXPECT_NE(md.find("| 12.000 | 2.500 | 1.000 |"), std::string::npos) << md;
  EXPECT_NE(md.find("| 9.500 | - | - |"), std::string::npos) << md;
}

TEST(Report, WritesPngAndSvgFigures) {
  const fs::path out = fs::temp_directory_path() / ("fedshard-report-" + std::to_string(::getpid()));
  fs::remove_all(out);
  const auto runs = {report::load_run((fixtures / "run-fsdp").string()), report::load_run((fixtures / "run-fl").string())};
  const auto files = report::write_report(runs, out.string());
  for (const char* name : {"ppl_vs_time", "ppl_vs_tokens", "throughput", "step_time"}) {
    const std::string png = read_file((out / (std::string(name) + ".png")).string());
    ASSERT_GT(png.size(), 1000u) << name;
    EXPECT_EQ(png.substr(1, 3), "PNG") << name;
    EXPECT_NE(read_file((out / (std::string(name) + ".svg")).string()).find("<svg"), std::string::npos) << name;
  }
  EXPECT_NE(read_file((out / "report.md").string()).find("![throughput](throughput.png)"), std::string::npos);
  fs::remove_all(out);
}

TEST(Report, BrokenInputNamesTheFile) {
  const fs::path dir = fs::temp_directory_path() / ("fedshard-badrun-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  EXPECT_THROW(report::load_run(dir.string()), Error);  // no metrics.jsonl
  std::ofstream(dir / "metrics.jsonl") << "{\"type\":\"step\",\"step\":1}\n";
  try {
    report::load_run(dir.string());
    ADD_FAILURE() << "a step line without fields must be rejected";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("metrics.jsonl:1: malformed"), std::string::npos) << e.what();
  }
  fs::remove_all(dir);
}

TEST(Report, TimeFromPlanPricesStepsAtTheMatchingStrategy) {
  const fs::path dir = fs::temp_directory_path() / ("fedshard-plantime-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  // Two fl-hsdp entries: only the one with the run's S = 4 and H = 2 may be taken.
  std::ofstream(dir / "plan.json") << R"({"cluster": {"name": "c", "nodes": 2, "ranks_per_node": 4}, "plans": [
    {"strategy": "fl-hsdp", "group_sizes": [8], "shard_sizes": [2], "step_s": 9.0},
    {"strategy": "fsdp", "group_sizes": [8], "shard_sizes": [8], "step_s": 4.0},
    {"strategy": "fl-hsdp", "group_sizes": [4, 4], "shard_sizes": [2, 2], "step_s": 3.0}]})";
  std::vector<report::RunData> runs = {report::load_run((fixtures / "run-fsdp").string()),
                                       report::load_run((fixtures / "run-fl").string())};
  report::attach_plan_times(runs, (dir / "plan.json").string());
  EXPECT_DOUBLE_EQ(*runs[0].plan_step_s, 4.0);
  EXPECT_DOUBLE_EQ(*runs[1].plan_step_s, 3.0);
  EXPECT_EQ(runs[0].plan_cluster, "c, 8 ranks");
  const auto out = dir / "report";
  report::write_report(runs, out.string());
  EXPECT_EQ(read_file((out / "ppl_vs_predicted_time.png").string()).substr(1, 3), "PNG");
  // fsdp's first evaluation is at step 3: 3 x 4 s = 1/300 h.
  const auto dat = read_file((out / "eval_0.dat").string());
  const auto first = dat.substr(dat.find('\n') + 1);
  EXPECT_NEAR(std::stod(first.substr(first.rfind(' ', first.find('\n')))), 3 * 4.0 / 3600, 1e-8) << dat;  // printed to 6 digits

  std::ofstream(dir / "plan.json") << R"({"cluster": {"name": "c", "nodes": 2}, "plans": [
    {"strategy": "fsdp", "group_sizes": [8], "shard_sizes": [8], "step_s": 4.0}]})";
  try {
    report::attach_plan_times(runs, (dir / "plan.json").string());
    ADD_FAILURE() << "a run without a matching plan entry must be rejected";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("has no plan for run"), std::string::npos) << e.what();
  }
  fs::remove_all(dir);
}
