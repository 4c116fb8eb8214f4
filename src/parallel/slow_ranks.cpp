#include "parallel/slow_ranks.h"

#include <algorithm>
#include <sstream>

#include "util/error.h"

namespace fedshard::parallel {

namespace {

double parse_number(const std::string& s, const std::string& item) {
  try {
    size_t used = 0;
    const double v = std::stod(s, &used);
    if (used == s.size()) return v;
  } catch (const std::exception&) {
  }
  throw Error(cat("--slow item '", item, "': '", s, "' is not a number"));
}

}  // namespace

std::vector<double> slow_factors(const std::string& spec, const comm::Layout& layout) {
  std::vector<double> f(static_cast<size_t>(layout.world()), 1.0);
  std::stringstream in(spec);
  for (std::string item; std::getline(in, item, ',');) {
    if (item.empty()) continue;
    const auto eq = item.find('=');
    FS_CHECK(eq != std::string::npos, "--slow item '", item, "' must be RANK=FACTOR or group:G=FACTOR");
    const double factor = parse_number(item.substr(eq + 1), item);
    FS_CHECK(factor >= 1, "--slow item '", item, "': the factor must be at least 1 (it stretches compute time)");
    std::string who = item.substr(0, eq);
    std::vector<int> ranks;
    if (who.rfind("group:", 0) == 0) {
      const double g = parse_number(who.substr(6), item);
      FS_CHECK(g >= 0 && g < layout.groups() && g == static_cast<int>(g), "--slow item '", item, "': no group ",
               who.substr(6), " (the layout has ", layout.groups(), ")");
      ranks = layout.group_members(layout.first_rank(static_cast<int>(g)));
    } else {
      const double r = parse_number(who, item);
      FS_CHECK(r >= 0 && r < layout.world() && r == static_cast<int>(r), "--slow item '", item, "': no rank ", who,
               " (the world has ", layout.world(), ")");
      ranks = {static_cast<int>(r)};
    }
    for (int r : ranks) f[static_cast<size_t>(r)] = std::max(f[static_cast<size_t>(r)], factor);
  }
  return f;
}

Pace pace_of(const std::string& spec, const comm::Layout& layout, int rank) {
  const auto factors = slow_factors(spec, layout);
  Pace p;
  p.rank = factors.at(static_cast<size_t>(rank));
  for (int r : layout.group_members(rank)) p.group = std::max(p.group, factors.at(static_cast<size_t>(r)));
  return p;
}

}  // namespace fedshard::parallel
