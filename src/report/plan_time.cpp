#include "report/plan_time.h"

#include <fstream>

#include "util/error.h"

namespace fedshard::report {

void attach_plan_times(std::vector<RunData>& runs, const std::string& plan_json) {
  std::ifstream in(plan_json);
  FS_CHECK(in.good(), "--time-from-plan: cannot read ", plan_json);
  nlohmann::json plan;
  try {
    plan = nlohmann::json::parse(in);
    plan.at("plans");
    plan.at("cluster").at("nodes");
  } catch (const std::exception& e) {
    throw Error(cat(plan_json, ": not a fedshard plan --json output (", e.what(), ")"));
  }
  const auto& c = plan["cluster"];
  const std::string cluster = cat(c.value("name", "?"), ", ", c["nodes"].get<int>() * c.value("ranks_per_node", 1), " ranks");
  for (auto& r : runs) {
    r.plan_step_s.reset();
    const auto& res = r.config.contains("resolved") ? r.config["resolved"] : nlohmann::json::object();
    const std::string strategy = res.value("strategy", "?");
    const bool fl = strategy.rfind("fl-", 0) == 0, hsdp = strategy.find("hsdp") != std::string::npos;
    const int s = res.value("group_size", 0), h = res.value("shard_size", 0);
    for (const auto& e : plan["plans"]) {
      if (e.value("strategy", "") != strategy) continue;
      if (fl && e["group_sizes"].at(0).get<int>() != s) continue;
      if (hsdp && e["shard_sizes"].at(0).get<int>() != h) continue;
      r.plan_step_s = e.at("step_s").get<double>();
      r.plan_cluster = cluster;
      break;
    }
    FS_CHECK(r.plan_step_s.has_value(), plan_json, " has no plan for run ", r.dir, " (", r.label, "): ",
             "run fedshard plan with that strategy", fl ? ", S" : "", hsdp ? " and H" : "");
  }
}

}  // namespace fedshard::report
