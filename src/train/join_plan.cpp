#include "train/join_plan.h"

namespace fedshard::train {

nlohmann::json JoinPlan::to_json() const {
  return {{"step", step},           {"tokens", tokens},           {"syncs", syncs},
          {"group_sizes", group_sizes}, {"group_ids", group_ids}, {"launch_ranks", launch_ranks},
          {"launch_world", launch_world}, {"peak_flops", peak_flops}};
}

JoinPlan JoinPlan::from_json(const nlohmann::json& j) {
  JoinPlan p;
  p.step = j.at("step");
  p.tokens = j.at("tokens");
  p.syncs = j.at("syncs");
  p.group_sizes = j.at("group_sizes").get<std::vector<int>>();
  p.group_ids = j.at("group_ids").get<std::vector<int>>();
  p.launch_ranks = j.at("launch_ranks").get<std::vector<int>>();
  p.launch_world = j.at("launch_world");
  p.peak_flops = j.at("peak_flops");
  return p;
}

}  // namespace fedshard::train
