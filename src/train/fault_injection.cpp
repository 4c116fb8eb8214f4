#include "train/fault_injection.h"

#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <ATen/ATen.h>

#include "comm/mpi_runtime.h"
#include "train/preemption.h"
#include "util/error.h"

namespace fedshard::train {

namespace {

struct Fault {
  std::string action;
  int rank = -1;
  int64_t step = -1;
  FaultPoint point = FaultPoint::Step;
};

Fault parse_fault(const std::string& spec) {
  Fault f;
  std::vector<std::string> parts;
  std::stringstream ss(spec);
  for (std::string part; std::getline(ss, part, ':');) parts.push_back(part);
  FS_CHECK(parts.size() == 3 || parts.size() == 4, "FEDSHARD_FAULT item '", spec, "' must be ACTION:RANK:STEP[:POINT]");
  f.action = parts[0];
  FS_CHECK(f.action == "throw" || f.action == "kill" || f.action == "nan" || f.action == "inf" ||
               f.action == "stall" || f.action == "alloc",
           "FEDSHARD_FAULT action '", f.action, "' must be throw, kill, nan, inf, stall or alloc");
  try {
    f.rank = std::stoi(parts[1]);
    f.step = std::stoll(parts[2]);
  } catch (const std::exception&) {
    throw Error(cat("FEDSHARD_FAULT item '", spec, "': RANK and STEP must be integers"));
  }
  if (parts.size() == 4) {
    FS_CHECK(parts[3] == "step" || parts[3] == "checkpoint" || parts[3] == "eval" || parts[3] == "join",
             "FEDSHARD_FAULT point '", parts[3], "' must be step, checkpoint, eval or join");
    f.point = parts[3] == "checkpoint" ? FaultPoint::Checkpoint
              : parts[3] == "eval"       ? FaultPoint::Eval
              : parts[3] == "join"       ? FaultPoint::Join
                                         : FaultPoint::Step;
  }
  return f;
}

const std::vector<Fault>& plan() {
  static const std::vector<Fault> p = [] {
    std::vector<Fault> faults;
    const char* env = std::getenv("FEDSHARD_FAULT");
    if (env == nullptr || *env == '\0') return faults;
    std::stringstream ss(env);
    for (std::string item; std::getline(ss, item, ',');) faults.push_back(parse_fault(item));
    return faults;
  }();
  return p;
}

int launch_rank() { return comm::MpiRuntime::get().world_rank(); }

// The fault planned for (action, rank, step), if any.
const Fault* find_fault(const std::string& action, int rank, int64_t step) {
  for (const auto& f : plan())
    if (f.action == action && f.rank == rank && f.step == step) return &f;
  return nullptr;
}

}  // namespace

void validate_fault_plan() { plan(); }

void maybe_inject_fault(FaultPoint point, int64_t step, const std::function<bool()>& released) {
  const int rank = launch_rank();
  for (const auto& f : plan()) {
    if (f.point != point || f.rank != rank || f.step != step || f.action == "nan" || f.action == "inf") continue;
    if (f.action == "kill") std::raise(SIGKILL);
    if (f.action == "alloc") at::empty({int64_t{1} << 50}, at::kByte);
    if (f.action == "stall") {
      // A preemption signal (or `released`) ends it: a test signals a job held at a known step, once this line
      // is in the rank's output.
      std::fprintf(stderr, "fedshard: fault: rank %d stalls at step %lld\n", rank, static_cast<long long>(step));
      for (int i = 0; i < 6000 && preemption_signal() == 0 && !(released && released()); ++i)
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
      continue;
    }
    throw std::runtime_error(cat("injected fault (FEDSHARD_FAULT) at step ", step));
  }
}

bool inject_nan(int64_t step) { return find_fault("nan", launch_rank(), step) != nullptr; }

bool inject_inf(int64_t step) { return find_fault("inf", launch_rank(), step) != nullptr; }

}  // namespace fedshard::train
