#include "sites/round_log.h"

#include <sys/resource.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

namespace fedshard::sites {

double wall_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

void append_round_log(const std::string& state_dir, int64_t round, uint32_t attempt,
                      const std::vector<SiteTokens>& participants, const std::map<std::string, Arrival>& arrivals,
                      int64_t checksum) {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  nlohmann::json j;
  j["round"] = round;
  j["attempt"] = attempt;
  j["committed_s"] = wall_seconds();
  j["participants"] = nlohmann::json::array();
  for (const auto& p : participants)
    j["participants"].push_back(
        {{"site", p.site}, {"tokens", p.tokens}, {"delta_norm", std::sqrt(p.norm2)}, {"scale", p.scale}});
  j["arrivals"] = nlohmann::json::object();
  for (const auto& [site, a] : arrivals)
    j["arrivals"][site] = {{"bytes", a.bytes}, {"first_s", a.first_s}, {"last_s", a.last_s}};
  j["checksum"] = checksum;
  j["cpu_s"] = static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
               static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec) * 1e-6;
  j["max_rss_bytes"] = static_cast<int64_t>(u.ru_maxrss) * 1024;  // Linux reports KiB
  std::ofstream out(std::filesystem::path(state_dir) / "rounds.jsonl", std::ios::app);
  out << j.dump() << "\n";
}

}  // namespace fedshard::sites
