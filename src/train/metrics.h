// RUN_DIR/metrics.jsonl: one JSON object per line (DESIGN.md "Metrics"), written by world rank 0 and flushed
// per line so a killed run keeps every completed step.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdio>
#include <string>

namespace fedshard::train {

class MetricsLog {
 public:
  MetricsLog() = default;
  // append: keep existing lines (resume); otherwise start a new file.
  void open(const std::string& path, bool append);
  ~MetricsLog();
  void write(const nlohmann::json& line);
  bool is_open() const { return file_ != nullptr; }

 private:
  std::FILE* file_ = nullptr;
  std::string path_;
};

}  // namespace fedshard::train
