#include "train/fault_injection.h"

#include <chrono>
#include <csignal>
#include <cstdlib>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <ATen/ATen.h>

#include "util/error.h"

namespace fedshard::train {

namespace {

struct FaultPlan {
  bool active = false;
  std::string action;
  int rank = -1;
  int64_t step = -1;
  FaultPoint point = FaultPoint::Step;
};

const FaultPlan& plan() {
  static const FaultPlan p = [] {
    FaultPlan f;
    const char* env = std::getenv("FEDSHARD_FAULT");
    if (env == nullptr || *env == '\0') return f;
    std::vector<std::string> parts;
    std::stringstream ss(env);
    for (std::string part; std::getline(ss, part, ':');) parts.push_back(part);
    FS_CHECK(parts.size() == 3 || parts.size() == 4, "FEDSHARD_FAULT='", env,
             "' must be ACTION:RANK:STEP[:POINT]");
    f.action = parts[0];
    FS_CHECK(f.action == "throw" || f.action == "kill" || f.action == "nan" || f.action == "stall" ||
                 f.action == "alloc",
             "FEDSHARD_FAULT action '", f.action, "' must be throw, kill, nan, stall or alloc");
    try {
      f.rank = std::stoi(parts[1]);
      f.step = std::stoll(parts[2]);
    } catch (const std::exception&) {
      throw Error(cat("FEDSHARD_FAULT='", env, "': RANK and STEP must be integers"));
    }
    if (parts.size() == 4) {
      FS_CHECK(parts[3] == "step" || parts[3] == "checkpoint", "FEDSHARD_FAULT point '", parts[3],
               "' must be step or checkpoint");
      f.point = parts[3] == "checkpoint" ? FaultPoint::Checkpoint : FaultPoint::Step;
    }
    f.active = true;
    return f;
  }();
  return p;
}

}  // namespace

void validate_fault_plan() { plan(); }

void maybe_inject_fault(FaultPoint point, int rank, int64_t step) {
  const auto& f = plan();
  if (!f.active || f.point != point || f.rank != rank || f.step != step || f.action == "nan") return;
  if (f.action == "kill") std::raise(SIGKILL);
  if (f.action == "alloc") at::empty({int64_t{1} << 50}, at::kByte);
  if (f.action == "stall") {
    std::this_thread::sleep_for(std::chrono::seconds(60));
    return;
  }
  throw std::runtime_error(cat("injected fault (FEDSHARD_FAULT) at step ", step));
}

bool inject_nan(int rank, int64_t step) {
  const auto& f = plan();
  return f.active && f.action == "nan" && f.rank == rank && f.step == step;
}

}  // namespace fedshard::train
