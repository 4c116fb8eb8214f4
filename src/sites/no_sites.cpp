// A build without gRPC C++ or OpenSSL's headers has no site lane and no round server: what names them refuses in one
// line (the config refuses sites.server first; `fedshard serve` says so).
#ifndef FEDSHARD_SITES

#include "cli/commands.h"
#include "sites/site_options.h"
#include "util/error.h"

namespace fedshard::sites {

namespace {

constexpr const char* kMissing =
    "this fedshard was built without sites (gRPC C++ and OpenSSL's headers were not found: install libgrpc++-dev "
    "and libssl-dev, then build again)";

}  // namespace

bool available() { return false; }

std::unique_ptr<federation::Lane> make_site_lane(parallel::ShardedModel&, comm::Topology&, optim::Optimizer&,
                                                 const federation::FederationOptions&, SiteOptions) {
  throw Error(kMissing);
}

TlsMaterial load_tls(const TlsFiles&) { throw Error(kMissing); }

}  // namespace fedshard::sites

namespace fedshard::cli {

Command add_serve(CLI::App& app) {
  Command c;
  c.app = app.add_subcommand("serve", "The round server of a federation across facilities (not in this build)");
  c.app->allow_extras();
  c.run = []() -> int { throw Error(sites::kMissing); };
  return c;
}

}  // namespace fedshard::cli

#endif
