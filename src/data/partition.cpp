#include "data/partition.h"

#include <cmath>

#include "util/error.h"
#include "util/rng.h"

namespace fedshard::data {

namespace {

double uniform01(SplitMix64& rng) { return (static_cast<double>(rng.next() >> 11) + 0.5) * 0x1.0p-53; }

double standard_normal(SplitMix64& rng) {
  return std::sqrt(-2.0 * std::log(uniform01(rng))) * std::cos(2.0 * M_PI * uniform01(rng));
}

// Marsaglia & Tsang (2000); shape < 1 through Gamma(a) = Gamma(a + 1) * U^(1/a).
double gamma_sample(double shape, SplitMix64& rng) {
  if (shape < 1.0) return gamma_sample(shape + 1.0, rng) * std::pow(uniform01(rng), 1.0 / shape);
  const double d = shape - 1.0 / 3.0, c = 1.0 / std::sqrt(9.0 * d);
  for (;;) {
    double x, v;
    do {
      x = standard_normal(rng);
      v = 1.0 + c * x;
    } while (v <= 0);
    v = v * v * v;
    const double u = uniform01(rng);
    if (std::log(u) < 0.5 * x * x + d - d * v + d * std::log(v)) return d * v;
  }
}

}  // namespace

std::vector<double> dirichlet(const std::vector<double>& alphas, uint64_t seed) {
  SplitMix64 rng(seed);
  std::vector<double> g(alphas.size());
  double sum = 0;
  for (size_t i = 0; i < g.size(); ++i) sum += (g[i] = gamma_sample(alphas[i], rng));
  for (auto& x : g) x /= sum;
  return g;
}

std::vector<double> dirichlet(double alpha, int n, uint64_t seed) {
  return dirichlet(std::vector<double>(n, alpha), seed);
}

Partition partition_windows(const TokenDataset& train, const std::string& spec, const std::vector<int>& group_sizes,
                            uint64_t seed) {
  const int groups = static_cast<int>(group_sizes.size());
  int world = 0;
  for (int s : group_sizes) world += s;
  Partition p;
  if (spec == "iid") return p;
  const bool known = spec == "by-source" || spec.rfind("dirichlet:", 0) == 0;
  FS_CHECK(known, "unknown partition '", spec, "' (expected iid, by-source or dirichlet:ALPHA)");
  // One group holds all the data whatever the spec: identical to iid, so fsdp runs compare with fl-* runs.
  if (groups == 1) return p;
  p.global_stream = false;
  p.pools.resize(groups);
  const auto& sources = train.manifest().sources;
  const int n_sources = static_cast<int>(sources.size());
  std::vector<std::vector<int64_t>> by_source(n_sources);
  for (int64_t w = 0; w < train.num_windows(); ++w) by_source[train.source_of(w)].push_back(w);

  if (spec == "by-source") {
    FS_CHECK(groups <= n_sources, "partition by-source needs at least one source per group: ", groups,
             " groups but the data has ", n_sources, " source(s)");
    // Smooth weighted round robin: each group's credit grows by its size, the richest takes the next source.
    std::vector<int64_t> credit(groups, 0);
    for (int k = 0; k < n_sources; ++k) {
      int best = 0;
      for (int g = 0; g < groups; ++g) {
        credit[g] += group_sizes[g];
        if (credit[g] > credit[best]) best = g;
      }
      credit[best] -= world;
      p.pools[best].insert(p.pools[best].end(), by_source[k].begin(), by_source[k].end());
    }
  } else {  // dirichlet:ALPHA
    double alpha = 0;
    try {
      size_t used = 0;
      alpha = std::stod(spec.substr(10), &used);
      FS_CHECK(used == spec.size() - 10, "");
    } catch (const std::exception&) {
      throw Error(cat("partition '", spec, "': ALPHA must be a number, e.g. dirichlet:0.5"));
    }
    FS_CHECK(alpha > 0 && std::isfinite(alpha), "partition '", spec, "': ALPHA must be positive");
    for (int k = 0; k < n_sources; ++k) {
      auto windows = by_source[k];
      SplitMix64 rng(derive_seed({seed, 0xD1u, static_cast<uint64_t>(k)}));
      shuffle(windows, rng);
      std::vector<double> alphas;
      for (int g : group_sizes) alphas.push_back(alpha * groups * g / world);
      const auto q = dirichlet(alphas, derive_seed({seed, 0xD2u, static_cast<uint64_t>(k)}));
      // Cumulative rounding: every window goes to exactly one group.
      double cum = 0;
      size_t begin = 0;
      for (int g = 0; g < groups; ++g) {
        cum += q[g];
        const size_t end = g == groups - 1 ? windows.size() : static_cast<size_t>(std::llround(cum * windows.size()));
        p.pools[g].insert(p.pools[g].end(), windows.begin() + begin, windows.begin() + std::max(begin, end));
        begin = std::max(begin, end);
      }
    }
  }
  for (int g = 0; g < groups; ++g)
    FS_CHECK(!p.pools[g].empty(), "partition '", spec, "' leaves group ", g, " without training windows",
             spec == "by-source" ? "" : " (raise ALPHA or change the seed)");
  return p;
}

}  // namespace fedshard::data
