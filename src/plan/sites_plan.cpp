#include "plan/sites_plan.h"

#include <algorithm>
#include <numeric>
#include <sstream>

#include "federation/codec.h"
#include "util/error.h"

namespace fedshard::plan {

namespace {

int positive(const std::string& text, const std::string& layout) {
  try {
    size_t used = 0;
    const int v = std::stoi(text, &used);
    if (used == text.size() && v > 0) return v;
  } catch (const std::exception&) {
  }
  throw Error(cat("--sites '", layout, "': expected SITESxRANKS (4x2) or RANKS,RANKS,... (2,2,4) with positive "
                  "counts, got '", text, "'"));
}

// One site's payload of a round over `elements`: float32 models, or (codec) the change encoded in blocks.
double payload_bytes(const Workload& w, int64_t elements) {
  if (w.compress == "none") return 4.0 * static_cast<double>(elements);
  const federation::Codec codec(w.compress, w.compress_block);
  const int64_t g = codec.granule();
  return static_cast<double>(codec.encoded_bytes((elements + g - 1) / g * g));
}

// Seconds of one phase: every site's `bytes` leave (or reach) its own link, and all of them cross the server's;
// a request and its answer each cross the WAN once.
double phase_seconds(const SitesSpec& s, double bytes) {
  const int n = static_cast<int>(s.site_ranks.size());
  const double server_bandwidth = s.server_link.bandwidth_bytes_per_s * (s.server_link.shared ? 1 : s.server_shards);
  return 2 * (s.site_link.latency_s + s.server_link.latency_s) +
         std::max(bytes / s.site_link.bandwidth_bytes_per_s, n * bytes / server_bandwidth);
}

}  // namespace

std::vector<int> parse_sites_layout(const std::string& text) {
  std::vector<int> ranks;
  if (const auto x = text.find('x'); x != std::string::npos) {
    ranks.assign(positive(text.substr(0, x), text), positive(text.substr(x + 1), text));
  } else {
    std::stringstream ss(text);
    for (std::string item; std::getline(ss, item, ',');) ranks.push_back(positive(item, text));
  }
  FS_CHECK(!ranks.empty(), "--sites '", text, "': no site");
  return ranks;
}

SitesPlan plan_sites(const Cluster& cluster, const Workload& w, const StrategySpec& inner, const SitesSpec& sites) {
  FS_CHECK(!inner.strategy.federated, "with --sites each site trains as one group: give ddp, fsdp or hsdp, not ",
           inner.strategy.name());
  FS_CHECK(sites.site_link.bandwidth_bytes_per_s > 0, "--sites needs --site-link BANDWIDTH,LATENCY");
  FS_CHECK(sites.server_link.bandwidth_bytes_per_s > 0, "--sites needs a server link with a bandwidth");
  FS_CHECK(sites.server_shards >= 1, "--server-shards must be at least 1");
  FS_CHECK(sites.outer == "fedavg" || sites.outer == "nesterov", "--outer must be fedavg or nesterov, got '",
           sites.outer, "'");
  FS_CHECK(!w.timed_rounds, "--sites prices rounds of K steps; --round seconds:T is not priced for sites");
  SitesPlan p;
  p.sites = sites;
  p.inner = inner;
  const auto units = unit_params(w);
  p.elements = std::accumulate(units.begin(), units.end(), int64_t{0});
  const double down = w.compress == "none" ? 4.0 * static_cast<double>(p.elements) : payload_bytes(w, p.elements);
  p.up_bytes = payload_bytes(w, p.elements);
  p.down_bytes = down;
  const int n = static_cast<int>(sites.site_ranks.size());
  p.server_in_bytes = n * p.up_bytes;
  p.server_out_bytes = n * p.down_bytes;

  const double upload = phase_seconds(sites, p.up_bytes), download = phase_seconds(sites, p.down_bytes);
  const int k = inner.sync_every;
  double slowest = 0;
  for (int r : sites.site_ranks) {
    const int rpn = cluster.ranks_per_node > 1 ? cluster.ranks_per_node : r;
    FS_CHECK(r % rpn == 0, "--sites: a site of ", r, " ranks is not whole nodes of ", rpn, " ranks (--ranks-per-node)");
    Cluster site = cluster;
    site.nodes = r / rpn;
    site.ranks_per_node = rpn;
    StrategySpec one_group = inner;
    one_group.strategy.federated = true;
    one_group.group_size = r;
    one_group.groups.clear();
    SitePlan s;
    s.ranks = r;
    s.inner = plan_strategy(site, w, one_group);
    s.upload_s = upload;
    s.download_s = download;
    s.round_s = upload + download;
    slowest = std::max(slowest, s.inner.step_seconds);
    p.per_site.push_back(std::move(s));
  }
  // Rounds of K steps: every site waits for the slowest one's K steps, then for the round (or, delayed, the round
  // moves during the next K steps and only what does not fit shows).
  const double round = upload + download;
  const double exposed = w.round_overlap == "none" ? round : std::max(0.0, round - k * slowest);
  const double tokens_per_rank = static_cast<double>(w.batch_per_rank * w.seq_len * w.grad_accum);
  for (auto& s : p.per_site) {
    s.exposed_s = exposed;
    s.step_s = slowest + exposed / k;
    s.tokens_per_s = tokens_per_rank * s.ranks / s.step_s;
    p.tokens_per_s += s.tokens_per_s;
  }

  // The shard's memory: each site's submission and, while it streams in, its buffer; the committed and the
  // prepared round's global model and outer state; encoded rounds' residual and change, twice too.
  const double slice = 4.0 * static_cast<double>(p.elements) / sites.server_shards;
  const int outer_tensors = sites.outer == "nesterov" ? 2 : 0;
  p.server_memory_bytes = slice * (2 * n + 2 * (1 + outer_tensors));
  if (w.compress != "none")
    p.server_memory_bytes += 2 * slice + 2 * payload_bytes(w, p.elements / sites.server_shards);
  return p;
}

}  // namespace fedshard::plan
