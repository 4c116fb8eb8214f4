#include "comm/link_emulation.h"

#include <cmath>
#include <cstdio>
#include <utility>
#include <vector>

#include "util/error.h"

namespace fedshard::comm {

namespace {

// Parses "<number><unit>" against a unit table; the number must be positive and finite.
double parse_quantity(const std::string& text, const std::vector<std::pair<std::string, double>>& units,
                      const std::string& what, const std::string& spec) {
  size_t used = 0;
  double v = 0;
  try {
    v = std::stod(text, &used);
  } catch (const std::exception&) {
    throw Error(cat("link '", spec, "': ", what, " '", text, "' does not start with a number"));
  }
  const std::string unit = text.substr(used);
  for (const auto& [name, scale] : units)
    if (unit == name) {
      FS_CHECK(v >= 0 && std::isfinite(v), "link '", spec, "': ", what, " must not be negative");
      return v * scale;
    }
  std::string known;
  for (const auto& [name, scale] : units) known += (known.empty() ? "" : ", ") + name;
  throw Error(cat("link '", spec, "': unknown ", what, " unit '", unit, "' (use ", known, ")"));
}

}  // namespace

double LinkSpec::seconds(Collective c, double full_bytes, int p) const {
  if (p <= 1) return 0.0;
  const double bw = bandwidth_bytes_per_s > 0 ? ring_bus_bytes(c, full_bytes, p) / bandwidth_bytes_per_s : 0.0;
  return ring_steps(c, p) * latency_s + bw;
}

LinkSpec parse_link_spec(const std::string& spec) {
  const auto comma = spec.find(',');
  FS_CHECK(comma != std::string::npos, "link '", spec, "' must be BANDWIDTH,LATENCY, e.g. 1Gbit/s,500us");
  LinkSpec l;
  l.bandwidth_bytes_per_s = parse_quantity(
      spec.substr(0, comma),
      {{"bit/s", 1.0 / 8}, {"Kbit/s", 1e3 / 8}, {"Mbit/s", 1e6 / 8}, {"Gbit/s", 1e9 / 8}, {"Tbit/s", 1e12 / 8},
       {"B/s", 1.0}, {"KB/s", 1e3}, {"MB/s", 1e6}, {"GB/s", 1e9}, {"TB/s", 1e12},
       {"KiB/s", 1024.0}, {"MiB/s", 1048576.0}, {"GiB/s", 1073741824.0}},
      "bandwidth", spec);
  FS_CHECK(l.bandwidth_bytes_per_s > 0, "link '", spec, "': bandwidth must be positive");
  const auto second = spec.find(',', comma + 1);
  const auto latency = spec.substr(comma + 1, second == std::string::npos ? std::string::npos : second - comma - 1);
  l.latency_s = parse_quantity(latency, {{"ns", 1e-9}, {"us", 1e-6}, {"ms", 1e-3}, {"s", 1.0}}, "latency", spec);
  if (second != std::string::npos) {
    FS_CHECK(spec.substr(second + 1) == "shared", "link '", spec, "': after BANDWIDTH,LATENCY only 'shared' may ",
             "follow (a node's ranks share the bandwidth), not '", spec.substr(second + 1), "'");
    l.shared = true;
  }
  return l;
}

std::string describe(const LinkSpec& l) {
  char buf[96];
  std::snprintf(buf, sizeof buf, "%.3g Gbit/s, %.3g us%s", l.bandwidth_bytes_per_s * 8 / 1e9, l.latency_s * 1e6,
                l.shared ? ", shared by a node's ranks" : "");
  return buf;
}

LinkEmulator& LinkEmulator::instance() {
  static LinkEmulator e;
  return e;
}

void LinkEmulator::set(Tier tier, const LinkSpec& spec) {
  std::lock_guard<std::mutex> lock(mu_);
  links_[static_cast<int>(tier)] = spec;
}

void LinkEmulator::clear() {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& l : links_) l.reset();
  free_at_.fill({});
}

bool LinkEmulator::active() const {
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& l : links_)
    if (l) return true;
  return false;
}

std::optional<LinkSpec> LinkEmulator::link(Tier tier) const {
  std::lock_guard<std::mutex> lock(mu_);
  return links_[static_cast<int>(tier)];
}

LinkEmulator::Clock::time_point LinkEmulator::release_time(Tier tier, Lane lane, Collective c, double full_bytes, int p,
                                                           Clock::time_point start, Clock::time_point end) {
  std::lock_guard<std::mutex> lock(mu_);
  const auto& l = links_[static_cast<int>(tier)];
  if (!l) return end;
  auto& free_at = free_at_[static_cast<int>(lane)];
  const auto begin = std::max(start, free_at);
  const auto modelled = begin + std::chrono::duration_cast<Clock::duration>(
                                    std::chrono::duration<double>(l->seconds(c, full_bytes, p)));
  free_at = std::max(end, modelled);
  return free_at;
}

}  // namespace fedshard::comm
