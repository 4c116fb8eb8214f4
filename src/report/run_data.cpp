#include "report/run_data.h"

#include <filesystem>
#include <fstream>
#include <sstream>

#include "util/error.h"

namespace fedshard::report {

namespace {

namespace fs = std::filesystem;

std::string label_of(const nlohmann::json& config) {
  if (!config.contains("resolved")) return "?";
  const auto& r = config["resolved"];
  std::ostringstream os;
  const std::string strategy = r.value("strategy", "?");
  os << strategy;
  if (strategy.rfind("fl-", 0) == 0) {
    // Groups of different sizes have no one S: name them all.
    if (r.value("group_size", 0) == 0 && r.contains("group_sizes")) {
      os << " S=";
      for (size_t g = 0; g < r["group_sizes"].size(); ++g) os << (g ? "," : "") << r["group_sizes"][g].get<int>();
    } else {
      os << " S=" << r.value("group_size", 0);
      if (r.contains("groups")) os << " G=" << r["groups"].get<int>();
    }
  }
  if (strategy.find("hsdp") != std::string::npos) os << " H=" << r.value("shard_size", 0);
  // An emulated run (parallel.emulate) is named by the world it computes.
  if (r.contains("emulation") && !r["emulation"].is_null()) os << " W=" << r.value("world", 0);
  if (strategy.rfind("fl-", 0) == 0) {
    os << " K=" << config["parallel"].value("sync_every", 0);
    os << " " << config["data"].value("partition", "iid");
    // Relaxed rounds and stragglers, where they differ from the default (docs/federation.md).
    const auto& fed = config.contains("federation") ? config["federation"] : nlohmann::json::object();
    for (const char* key : {"overlap", "compress", "round", "normalize"}) {
      const std::string v = fed.value(key, "");
      if (!v.empty() && v != "none" && v != "steps") os << " " << key << "=" << v;
    }
  }
  if (config.contains("train") && !config["train"].value("slow", "").empty())
    os << " slow " << config["train"].value("slow", "");
  return os.str();
}

}  // namespace

RunData load_run(const std::string& dir) {
  RunData r;
  r.dir = dir;
  const fs::path metrics = fs::path(dir) / "metrics.jsonl";
  FS_CHECK(fs::is_regular_file(metrics), "no metrics.jsonl in ", dir, " (is it a fedshard run directory?)");
  const fs::path config = fs::path(dir) / "config.json";
  if (fs::is_regular_file(config)) {
    std::ifstream in(config);
    try {
      r.config = nlohmann::json::parse(in);
    } catch (const std::exception& e) {
      throw Error(cat(config.string(), ": not valid JSON: ", e.what()));
    }
  }
  r.label = label_of(r.config);
  std::ifstream in(metrics);
  double train_seconds = 0;
  int line_no = 0;
  std::vector<size_t> stretches;  // the step lines that start a stretch of steps (after a resume, a membership change)
  for (std::string line; std::getline(in, line);) {
    ++line_no;
    if (line.empty()) continue;
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(line);
      const std::string type = j.at("type");
      if (type == "step") {
        StepRow s;
        s.step = j.at("step");
        s.tokens = j.at("tokens");
        s.loss = j.at("loss");
        s.seconds = j.at("time_s").at("total");
        s.tok_per_s = j.at("tok_per_s");
        s.bytes = {j.at("bytes").at("node"), j.at("bytes").at("inter_node"), j.at("bytes").at("inter_group")};
        s.aggregated = j.value("aggregated", false);
        s.profiled = j.value("profiled", false);
        train_seconds += s.seconds;
        r.steps.push_back(s);
      } else if (type == "resume" || type == "group_lost" || type == "group_joined") {
        stretches.push_back(r.steps.size());
      } else if (type == "eval") {
        r.evals.push_back({j.at("step"), j.at("tokens"), train_seconds, j.at("val_ppl"), j.at("model")});
      } else if (type == "summary") {
        r.summary = j;
      }
    } catch (const std::exception& e) {
      throw Error(cat(metrics.string(), ":", line_no, ": malformed metrics line (", e.what(), ")"));
    }
  }
  FS_CHECK(!r.steps.empty(), metrics.string(), " has no step lines");
  // Step lines may be every train.log_every steps: the tokens of one step are the first line's over its step.
  const double step_tokens = static_cast<double>(r.steps.front().tokens) / static_cast<double>(r.steps.front().step);
  for (size_t i = 0, next = 0; i < r.steps.size(); ++i) {
    for (; next < stretches.size() && stretches[next] == i; ++next) r.stats.end_stretch();
    const auto& s = r.steps[i];
    r.stats.add({s.step, s.seconds, step_tokens, s.bytes, s.profiled});
  }
  r.stats.end_stretch();
  const fs::path plan = fs::path(dir) / "plan.json";
  if (fs::is_regular_file(plan)) {
    std::ifstream pin(plan);
    try {
      r.predicted_step_s = nlohmann::json::parse(pin).at("plans").at(0).at("step_s").get<double>();
    } catch (const std::exception& e) {
      throw Error(cat(plan.string(), ": not a fedshard plan --json output (", e.what(), ")"));
    }
  }
  return r;
}

}  // namespace fedshard::report
