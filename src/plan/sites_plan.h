// `fedshard plan --sites`: sites as separate jobs meeting through the round server's shards (DESIGN.md "Sites",
// docs/cost-model.md section 10). Each site's step is the in-job plan of its inner strategy on its own ranks (one
// federation group, so its in-site round collectives are priced as they run); every K steps the site's ranks send
// the model's elements, float32 or encoded, through the site's uplink to the M shards, and fetch the new global
// model back. A phase takes the longer of the site's link and the server's (every site's bytes cross it), plus the
// link's latency; the server's own work (the average, the outer step, the durable write) is left out (bench/sites.sh
// measures it).
#pragma once

#include <string>
#include <vector>

#include "comm/link_emulation.h"
#include "plan/cost_model.h"

namespace fedshard::plan {

struct SitesSpec {
  std::vector<int> site_ranks;  // ranks of each site
  comm::LinkSpec site_link;     // each site's uplink, shared by its ranks' streams (both directions)
  comm::LinkSpec server_link;   // each shard's link; `shared`: the M shards share one
  int server_shards = 1;        // M
  std::string outer = "fedavg";  // the server's outer optimizer: fedavg | nesterov (its state in the server's memory)
};

// "4x2" (4 sites of 2 ranks) or "2,2,4". Throws fedshard::Error.
std::vector<int> parse_sites_layout(const std::string& text);

struct SitePlan {
  int ranks = 0;
  StrategyPlan inner;          // the site's step: its inner strategy as one federation group of its ranks
  double upload_s = 0, download_s = 0;
  double round_s = 0;          // upload + download
  double exposed_s = 0;        // what of the round the steps wait for (all of it unless federation.overlap)
  double step_s = 0;           // the site's step, the round amortized over K, paced by the slowest site
  double tokens_per_s = 0;
};

struct SitesPlan {
  SitesSpec sites;
  StrategySpec inner;  // ddp, fsdp or hsdp inside each site; K
  int64_t elements = 0;               // the model's elements the round server holds
  double up_bytes = 0, down_bytes = 0;  // one site's payload per round (steady state: encoded rounds send changes)
  double server_in_bytes = 0, server_out_bytes = 0;  // per round, all sites, all shards
  double server_memory_bytes = 0;     // per shard: the sites' submissions, the global model and the outer state
                                      // (committed and prepared), the encoded rounds' residual and change
  std::vector<SitePlan> per_site;
  double tokens_per_s = 0;            // all sites
};

SitesPlan plan_sites(const Cluster& cluster, const Workload& w, const StrategySpec& inner, const SitesSpec& sites);

}  // namespace fedshard::plan
