// `fedshard report --time-from-plan PLAN.json`: each run's steps priced at the step time `fedshard plan`
// predicts for the same strategy on the plan's cluster (e.g. --paper's 512 A100s), so strategies whose
// optimizer steps take different times there can be compared at equal predicted wall time.
#pragma once

#include <string>
#include <vector>

#include "report/run_data.h"

namespace fedshard::report {

// Sets plan_step_s and plan_cluster of every run from the plan entry of the same strategy, group size S
// (fl-*) and shard size H (hsdp); the plan's world need not be the run's. Throws fedshard::Error naming the
// file or the run that has no matching entry.
void attach_plan_times(std::vector<RunData>& runs, const std::string& plan_json);

}  // namespace fedshard::report
