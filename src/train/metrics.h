// RUN_DIR/metrics.jsonl: one JSON object per line (DESIGN.md "Metrics"), written by world rank 0 and flushed
// per line so a killed run keeps every completed step; mirrored as TensorBoard scalars when asked.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdio>
#include <deque>
#include <string>
#include <vector>

#include "train/tensorboard.h"

namespace fedshard::train {

class MetricsLog {
 public:
  MetricsLog() = default;
  // append: keep existing lines (resume); otherwise start a new file.
  void open(const std::string& path, bool append);
  // Every line written from now on also goes to a new event file in dir (see TensorBoardLog::open).
  void mirror_to_tensorboard(const std::string& dir, int64_t resumed_after) { tensorboard_.open(dir, resumed_after); }
  ~MetricsLog();
  void write(const nlohmann::json& line);
  bool is_open() const { return file_ != nullptr; }
  // While not open, keep the last `n` step, eval and round lines given to write(), and every membership line
  // (group_lost, group_joined): a rank that becomes the writer when rank 0 is lost (in-job recovery) writes those
  // its predecessor did not (write_held), the membership lines first. A step line is told apart by its step, a
  // round by its groups' steps, an evaluation of the global model by the tokens it came after (under time-based
  // rounds the groups stand at different steps), and the membership lines by their order: the file's since the
  // last resume are the first of those held.
  void hold_lines(size_t n) { hold_ = n; }
  // Drops the held step, eval and round lines of steps before `step`.
  void forget_held_before(int64_t step);
  void write_held();
  // From now on, step lines (and a group's own evaluations) of steps up to `step` are not written: the file holds
  // a lost writer's lines of those steps (time-based rounds, where the new writer's group stood at other steps).
  void skip_steps_through(int64_t step) { skip_through_ = step; }

 private:
  std::FILE* file_ = nullptr;
  std::string path_;
  TensorBoardLog tensorboard_;
  size_t hold_ = 0;
  int64_t skip_through_ = 0;
  std::deque<nlohmann::json> held_;
  std::vector<nlohmann::json> held_membership_;
};

}  // namespace fedshard::train
