// What a site's lane is made from (sites/site_lane.h): the site's name, the round server's shards, its TLS files,
// the federation identity it greets them with. Free of gRPC, so that the engine can name a site's lane in a build
// without one (where make_site_lane refuses).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "comm/topology.h"
#include "federation/aggregator.h"
#include "federation/lane.h"
#include "optim/optimizer.h"
#include "parallel/sharded_model.h"
#include "sites/identity.h"
#include "sites/tls.h"
#include "util/faults.h"

namespace fedshard::sites {

struct SiteOptions {
  std::string name;                  // sites.name: the site, as its certificate names it
  std::vector<std::string> servers;  // sites.server: shard i's HOST:PORT at index i
  TlsFiles tls;
  std::string server_name;  // the name the server's certificate carries (empty: each address's host)
  double patience = 600;    // seconds a shard may be unreachable before the site gives up
  Identity identity;        // model, tokenizer and codec (total: filled in by the lane)
  const Faults* faults = &Faults::none();  // the robustness tests' plan: a planned attack corrupts what is sent
};

// Whether this build has the site lane and the round server (gRPC C++ and OpenSSL were found).
bool available();

std::unique_ptr<federation::Lane> make_site_lane(parallel::ShardedModel& model, comm::Topology& topo,
                                                 optim::Optimizer& inner, const federation::FederationOptions& opts,
                                                 SiteOptions site);

}  // namespace fedshard::sites
