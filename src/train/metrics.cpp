#include "train/metrics.h"

#include <cerrno>
#include <cstring>
#include <fstream>
#include <map>
#include <set>

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

namespace {
bool is_membership(const nlohmann::json& line) {
  const auto type = line.value("type", "");
  return type == "group_lost" || type == "group_joined";
}
// What tells a line apart from another of the same kind (metrics.h, hold_lines).
std::string line_key(const nlohmann::json& line) {
  const auto type = line.value("type", "");
  if (type == "round") return type + "/" + line.value("group_steps", nlohmann::json()).dump();
  if (type == "eval" && line.value("model", "") == "global")
    return type + "/global/" + std::to_string(line.value("tokens", int64_t{-1}));
  const auto groups = [&](const char* key) { return line.value(key, nlohmann::json()).dump(); };
  if (is_membership(line))
    return type + "/" + groups("lost_group_ids") + groups("joined_group_ids") + groups("group_ids");
  return type + "/" + std::to_string(line.value("step", int64_t{-1})) + "/" + line.value("model", "");
}
}  // namespace

void MetricsLog::write(const nlohmann::json& line) {
  const auto type = line.value("type", "");
  if (!file_) {
    if (hold_ > 0 && (type == "step" || type == "eval" || type == "round")) {
      held_.push_back(line);
      if (held_.size() > hold_) held_.pop_front();
    }
    if (hold_ > 0 && is_membership(line)) held_membership_.push_back(line);
    return;
  }
  const bool of_a_step = type == "step" || (type == "eval" && line.value("model", "") != "global");
  if (of_a_step && line.value("step", int64_t{0}) <= skip_through_) return;
  const std::string s = line.dump() + "\n";
  FS_CHECK(std::fwrite(s.data(), 1, s.size(), file_) == s.size() && std::fflush(file_) == 0, "cannot write ", path_,
           ": ", std::strerror(errno));
  tensorboard_.write(line);
}

void MetricsLog::forget_held_before(int64_t step) {
  while (!held_.empty() && held_.front().value("step", int64_t{0}) < step) held_.pop_front();
}

void MetricsLog::write_held() {
  std::set<std::string> present;
  std::map<std::string, int> changes;  // membership lines since the last resume, by key
  std::ifstream in(path_);
  for (std::string text; std::getline(in, text);) {
    nlohmann::json line;
    try {
      line = nlohmann::json::parse(text);
    } catch (const std::exception&) {  // a line cut short is no line
      continue;
    }
    if (line.value("type", "") == "resume") changes.clear();
    if (is_membership(line))
      ++changes[line_key(line)];
    else
      present.insert(line_key(line));
  }
  for (const auto& line : held_membership_)
    if (changes[line_key(line)]-- <= 0) write(line);
  for (const auto& line : held_)
    if (present.count(line_key(line)) == 0) write(line);
  held_.clear();
  held_membership_.clear();
}

}  // namespace fedshard::train
