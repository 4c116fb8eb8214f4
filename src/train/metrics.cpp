#include "train/metrics.h"

#include <cerrno>
#include <cstring>

#include "util/error.h"

namespace fedshard::train {

void MetricsLog::open(const std::string& path, bool append) {
  path_ = path;
  file_ = std::fopen(path.c_str(), append ? "a" : "w");
  FS_CHECK(file_ != nullptr, "cannot open ", path, ": ", std::strerror(errno));
}

MetricsLog::~MetricsLog() {
  if (file_) std::fclose(file_);
}

void MetricsLog::write(const nlohmann::json& line) {
  if (!file_) {
    if (hold_ > 0 && line.value("type", "") == "step") {
      held_.push_back(line);
      if (held_.size() > hold_) held_.pop_front();
    }
    return;
  }
  const std::string s = line.dump() + "\n";
  FS_CHECK(std::fwrite(s.data(), 1, s.size(), file_) == s.size() && std::fflush(file_) == 0, "cannot write ", path_,
           ": ", std::strerror(errno));
  tensorboard_.write(line);
}

void MetricsLog::write_held_after(int64_t step) {
  for (const auto& line : held_)
    if (line.at("step").get<int64_t>() > step) write(line);
  held_.clear();
}

}  // namespace fedshard::train
