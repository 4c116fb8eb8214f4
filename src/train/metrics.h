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
  // its predecessor did not (write_held: by type, step, model and groups, those the file does not hold), the
  // membership lines first.
  void hold_lines(size_t n) { hold_ = n; }
  // Drops the held step, eval and round lines of steps before `step`.
  void forget_held_before(int64_t step);
  // Drops the held round lines and the global model's evaluations.
  void forget_held_rounds();
  void write_held();

 private:
  std::FILE* file_ = nullptr;
  std::string path_;
  TensorBoardLog tensorboard_;
  size_t hold_ = 0;
  std::deque<nlohmann::json> held_;
  std::vector<nlohmann::json> held_membership_;
};

}  // namespace fedshard::train
