// What `fedshard report` reads from a run directory: metrics.jsonl, config.json and, if a benchmark left
// one, plan.json (the cost model's prediction for the same configuration).
#pragma once

#include <nlohmann/json.hpp>

#include <array>
#include <optional>
#include <string>
#include <vector>

#include "train/step_stats.h"

namespace fedshard::report {

struct StepRow {
  int64_t step = 0;
  int64_t tokens = 0;
  double loss = 0;
  double seconds = 0;
  double tok_per_s = 0;
  std::array<double, 3> bytes{};  // node, inter_node, inter_group
  bool aggregated = false;
  bool profiled = false;
};

struct EvalRow {
  int64_t step = 0;
  int64_t tokens = 0;
  double train_seconds = 0;  // training time up to this step (evaluation time excluded)
  double val_ppl = 0;
  std::string model;  // global | group
};

struct RunData {
  std::string dir;
  std::string label;  // e.g. "fl-fsdp S=2 K=8 by-source"
  nlohmann::json config;
  nlohmann::json summary;  // null if the run did not finish
  std::vector<StepRow> steps;
  std::vector<EvalRow> evals;
  std::optional<double> predicted_step_s;
  // --time-from-plan: the step time `fedshard plan` predicts for this strategy on plan_cluster.
  std::optional<double> plan_step_s;
  std::string plan_cluster;

  // The steps as the trainer's summary counts them (train/step_stats.h: the warm-up rule; a resume or a membership
  // change starts a stretch): means over the timed steps, so aggregation rounds are amortized as they are in
  // `fedshard plan`'s per-step figures.
  train::StepStats stats;
  double mean_step_seconds() const { return stats.mean_step_seconds(); }
  double tok_per_s() const { return stats.tok_per_s(); }  // tokens per step / mean step time
  std::array<double, 3> mean_bytes() const { return stats.mean_bytes(); }
};

// Throws fedshard::Error naming the file (and line) that is missing or malformed.
RunData load_run(const std::string& dir);

}  // namespace fedshard::report
