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
  if (!file_) return;
  const std::string s = line.dump() + "\n";
  FS_CHECK(std::fwrite(s.data(), 1, s.size(), file_) == s.size() && std::fflush(file_) == 0, "cannot write ", path_,
           ": ", std::strerror(errno));
  tensorboard_.write(line);
}

}  // namespace fedshard::train
