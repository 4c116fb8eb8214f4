#include "train/metrics.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
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

void MetricsLog::write(const nlohmann::json& line) {
  if (!file_) {
    const auto type = line.value("type", "");
    if (hold_ > 0 && (type == "step" || type == "eval" || type == "round")) {
      held_.push_back(line);
      if (held_.size() > hold_) held_.pop_front();
    }
    if (hold_ > 0 && (type == "group_lost" || type == "group_joined")) held_membership_.push_back(line);
    return;
  }
  const std::string s = line.dump() + "\n";
  FS_CHECK(std::fwrite(s.data(), 1, s.size(), file_) == s.size() && std::fflush(file_) == 0, "cannot write ", path_,
           ": ", std::strerror(errno));
  tensorboard_.write(line);
}

namespace {
// Membership lines are told apart by the groups they name: two changes may come at one step.
std::string line_key(const nlohmann::json& line) {
  const auto groups = [&](const char* key) { return line.value(key, nlohmann::json()).dump(); };
  return line.value("type", "") + "/" + std::to_string(line.value("step", int64_t{-1})) + "/" +
         line.value("model", "") + "/" + groups("lost_group_ids") + groups("joined_group_ids");
}
}  // namespace

void MetricsLog::forget_held_before(int64_t step) {
  while (!held_.empty() && held_.front().value("step", int64_t{0}) < step) held_.pop_front();
}

void MetricsLog::forget_held_rounds() {
  const auto of_a_round = [](const nlohmann::json& l) {
    const auto type = l.value("type", "");
    return type == "round" || (type == "eval" && l.value("model", "") == "global");
  };
  held_.erase(std::remove_if(held_.begin(), held_.end(), of_a_round), held_.end());
}

void MetricsLog::write_held() {
  std::set<std::string> present;
  std::ifstream in(path_);
  for (std::string line; std::getline(in, line);) {
    try {
      present.insert(line_key(nlohmann::json::parse(line)));
    } catch (const std::exception&) {  // a line cut short is no line
    }
  }
  for (const auto& line : held_membership_)
    if (present.count(line_key(line)) == 0) write(line);
  for (const auto& line : held_)
    if (present.count(line_key(line)) == 0) write(line);
  held_.clear();
  held_membership_.clear();
}

}  // namespace fedshard::train
