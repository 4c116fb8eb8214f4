#include "train/fault_injection.h"

#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <ATen/CPUGeneratorImpl.h>

#include "comm/mpi_runtime.h"
#include "train/preemption.h"
#include "util/error.h"

namespace fedshard::train {

namespace {

struct PlannedFault {
  std::string action;
  int rank = -1;
  int64_t step = -1;
  FaultPoint point = FaultPoint::Step;
};

PlannedFault parse_fault(const std::string& spec) {
  PlannedFault f;
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
    FS_CHECK(parts[3] == "step" || parts[3] == "checkpoint" || parts[3] == "eval" || parts[3] == "join" ||
                 parts[3] == "summary" || parts[3] == "recovery",
             "FEDSHARD_FAULT point '", parts[3], "' must be step, checkpoint, eval, join, summary or recovery");
    f.point = parts[3] == "checkpoint" ? FaultPoint::Checkpoint
              : parts[3] == "eval"       ? FaultPoint::Eval
              : parts[3] == "join"       ? FaultPoint::Join
              : parts[3] == "summary"    ? FaultPoint::Summary
              : parts[3] == "recovery"   ? FaultPoint::Recovery
                                         : FaultPoint::Step;
  }
  return f;
}

struct SiteAttack {
  std::string kind;  // "" (none), "scale" or "random"
  double amount = 0;
};

SiteAttack parse_attack(const char* env) {
  if (env == nullptr || *env == '\0') return {};
  const std::string spec = env;
  const auto colon = spec.find(':');
  SiteAttack a{spec.substr(0, colon), 0};
  size_t used = 0;
  try {
    a.amount = std::stod(spec.substr(colon + 1), &used);
  } catch (const std::exception&) {
  }
  FS_CHECK(colon != std::string::npos && (a.kind == "scale" || a.kind == "random") && used > 0 &&
               used == spec.size() - colon - 1 && std::isfinite(a.amount),
           "FEDSHARD_SITE_ATTACK must be scale:S or random:SIGMA, got \"", spec, "\"");
  return a;
}

class EnvironmentFaults : public Faults {
 public:
  EnvironmentFaults(std::vector<PlannedFault> plan, int64_t prepare_kill, SiteAttack attack = {})
      : plan_(std::move(plan)), prepare_kill_(prepare_kill), attack_(std::move(attack)) {}

  void at(FaultPoint point, int64_t step, const std::function<bool()>& released) const override {
    if (point == FaultPoint::Shard) {
      if (step == prepare_kill_) std::raise(SIGKILL);
      return;
    }
    const int rank = launch_rank();
    for (const auto& f : plan_) {
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

  void corrupt_loss(int64_t step, at::Tensor loss) const override {
    if (planned("nan", step)) loss.fill_(std::nan(""));
  }

  void corrupt_weights(int64_t step, at::Tensor master) const override {
    if (planned("inf", step)) master.detach()[0].fill_(std::numeric_limits<double>::infinity());
  }

  at::Tensor corrupt_change(int64_t round, const at::Tensor& values, const at::Tensor& from) const override {
    if (attack_.kind.empty() || round < 1) return values;
    at::Tensor change;
    if (attack_.kind == "scale") {
      change = (from.defined() ? values - from : values) * attack_.amount;
    } else {
      auto gen = at::detail::createCPUGenerator(static_cast<uint64_t>(round) * 1000003u +
                                                static_cast<uint64_t>(launch_rank()));
      change = at::randn(values.sizes(), gen, values.options()) * attack_.amount;
    }
    return from.defined() ? from + change : change;
  }

 private:
  static int launch_rank() { return comm::MpiRuntime::get().world_rank(); }
  bool planned(const std::string& action, int64_t step) const {
    for (const auto& f : plan_)
      if (f.action == action && f.rank == launch_rank() && f.step == step) return true;
    return false;
  }

  std::vector<PlannedFault> plan_;
  int64_t prepare_kill_;
  SiteAttack attack_;
};

// A round server shard's planned death: at round `round`, at `point`.
class ServeFaults : public Faults {
 public:
  ServeFaults(int64_t round, FaultPoint point) : round_(round), point_(point) {}
  void at(FaultPoint point, int64_t round, const std::function<bool()>&) const override {
    if (point == point_ && round == round_) std::raise(SIGKILL);
  }

 private:
  int64_t round_;
  FaultPoint point_;
};

}  // namespace

std::unique_ptr<Faults> training_faults_from_environment() {
  std::vector<PlannedFault> plan;
  if (const char* env = std::getenv("FEDSHARD_FAULT"); env != nullptr && *env != '\0') {
    std::stringstream ss(env);
    for (std::string item; std::getline(ss, item, ',');) plan.push_back(parse_fault(item));
  }
  auto attack = parse_attack(std::getenv("FEDSHARD_SITE_ATTACK"));
  if (plan.empty() && attack.kind.empty()) return std::make_unique<Faults>();
  return std::make_unique<EnvironmentFaults>(std::move(plan), 0, std::move(attack));
}

std::unique_ptr<Faults> prepare_faults_from_environment() {
  const char* env = std::getenv("FEDSHARD_PREPARE_KILL");
  if (env == nullptr) return std::make_unique<Faults>();
  const int64_t after = std::strtoll(env, nullptr, 10);
  FS_CHECK(after > 0, "FEDSHARD_PREPARE_KILL must be a shard count above 0, got \"", env, "\"");
  return std::make_unique<EnvironmentFaults>(std::vector<PlannedFault>{}, after);
}

std::unique_ptr<Faults> serve_faults_from_environment() {
  const char* env = std::getenv("FEDSHARD_SERVE_KILL");
  if (env == nullptr || *env == '\0') return std::make_unique<Faults>();
  const std::string spec = env;
  const auto colon = spec.find(':');
  const std::string point = colon == std::string::npos ? "" : spec.substr(colon + 1);
  int64_t round = -1;
  try {
    round = std::stoll(spec.substr(0, colon));
  } catch (const std::exception&) {
  }
  FS_CHECK(round >= 0 && (point == "prepare" || point == "commit"), "FEDSHARD_SERVE_KILL must be ROUND:prepare or ",
           "ROUND:commit, got \"", spec, "\"");
  return std::make_unique<ServeFaults>(round, point == "prepare" ? FaultPoint::RoundPrepare : FaultPoint::RoundCommit);
}

}  // namespace fedshard::train
