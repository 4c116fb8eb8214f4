#include "federation/schedule.h"

#include "util/error.h"

namespace fedshard::federation {

Overlap parse_overlap(const std::string& spec) {
  Overlap o;
  if (spec == "none" || spec == "delayed") {
    o.mode = spec;
    return o;
  }
  const std::string prefix = "streaming:";
  if (spec.rfind(prefix, 0) == 0) {
    const auto f = spec.substr(prefix.size());
    // At most 9 digits: a count that fits (a longer one is no model's unit count, and stoll would throw).
    const bool digits = !f.empty() && f.size() <= 9 && f.find_first_not_of("0123456789") == std::string::npos;
    FS_CHECK(digits && std::stoll(f) >= 1, "federation.overlap = '", spec,
             "': the fragment count F of streaming:F must be a positive integer");
    o.mode = "streaming";
    o.fragments = std::stoll(f);
    return o;
  }
  throw Error(cat("federation.overlap must be none, delayed or streaming:F, got '", spec, "'"));
}

double parse_round_seconds(const std::string& spec, int64_t sync_every) {
  if (spec == "steps") return 0;
  const auto colon = spec.find(':');
  const auto kind = spec.substr(0, colon), value = colon == std::string::npos ? "" : spec.substr(colon + 1);
  double v = 0;
  try {
    size_t used = 0;
    v = std::stod(value, &used);
    if (used != value.size()) v = -1;
  } catch (const std::exception&) {
    v = -1;
  }
  if (kind == "steps") {
    FS_CHECK(v >= 1 && v == static_cast<double>(static_cast<int64_t>(v)), "federation.round = '", spec,
             "': K of steps:K must be a positive integer");
    FS_CHECK(static_cast<int64_t>(v) == sync_every, "federation.round = '", spec, "' disagrees with parallel.sync_every = ",
             sync_every, "; give K once");
    return 0;
  }
  FS_CHECK(kind == "seconds", "federation.round must be steps, steps:K or seconds:T, got '", spec, "'");
  FS_CHECK(v > 0, "federation.round = '", spec, "': T of seconds:T must be a positive number of seconds");
  return v;
}

double parse_clock(const std::string& spec) {
  if (spec == "wall") return 0;
  const std::string prefix = "emulated:";
  double v = -1;
  if (spec.rfind(prefix, 0) == 0) {
    try {
      size_t used = 0;
      v = std::stod(spec.substr(prefix.size()), &used);
      if (used != spec.size() - prefix.size()) v = -1;
    } catch (const std::exception&) {
      v = -1;
    }
  }
  FS_CHECK(v > 0, "federation.clock must be wall or emulated:SECONDS (a positive number of seconds per step), got '",
           spec, "'");
  return v;
}

Schedule::Schedule(int64_t sync_every, int64_t last_step, int64_t tokens_per_step, Overlap overlap, size_t units,
                   double round_seconds)
    : sync_every_(sync_every), last_step_(last_step), tokens_per_step_(tokens_per_step), overlap_(overlap),
      units_(units), steps_since_(static_cast<size_t>(overlap.fragments), 0), round_seconds_(round_seconds) {
  // Refused at start-up (train/option_space.cpp, "streaming-units").
  FS_ASSERT(overlap_.fragments <= static_cast<int64_t>(units_), "streaming:", overlap_.fragments, " over ", units_, " units");
}

int64_t Schedule::fragment(int64_t step) const {
  if (step == last_step_ || overlap_.fragments == 1) return -1;
  return (step / interval() - 1) % overlap_.fragments;
}

std::vector<size_t> Schedule::units(int64_t step) const {
  const int64_t f = fragment(step);
  std::vector<size_t> out;
  for (size_t u = 0; u < units_; ++u)
    if (f < 0 || static_cast<int64_t>(u) % overlap_.fragments == f) out.push_back(u);
  return out;
}

double Schedule::weight(int64_t step) const {
  const int64_t f = fragment(step);
  // A last round over fragments of different ages: every group's counters differ by the same steps, and
  // only the groups' ratio of weights matters.
  const int64_t steps = f < 0 ? steps_since_sync() : steps_since_[static_cast<size_t>(f)];
  return static_cast<double>(steps * tokens_per_step_);
}

void Schedule::count_sync(int64_t step) {
  steps_seconds_ = 0;
  const int64_t f = fragment(step);
  for (size_t i = 0; i < steps_since_.size(); ++i)
    if (f < 0 || static_cast<int64_t>(i) == f) steps_since_[i] = 0;
  ++syncs_;
}

void Schedule::restore(int64_t step, int64_t steps_since_sync, int64_t syncs, double round_time) {
  syncs_ = syncs;
  steps_seconds_ = round_time;
  if (overlap_.fragments == 1) {
    steps_since_[0] = steps_since_sync;
    return;
  }
  // Fragment f was last averaged after the latest step s <= `step` with fragment(s) == f (or never).
  for (int64_t f = 0; f < overlap_.fragments; ++f) {
    int64_t last = 0;
    for (int64_t s = step; s >= 1 && s > step - sync_every_; --s)
      if (due(s) && s != last_step_ && fragment(s) == f) {
        last = s;
        break;
      }
    steps_since_[static_cast<size_t>(f)] = step - last;
  }
}

}  // namespace fedshard::federation
