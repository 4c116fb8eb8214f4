// `fedshard serve --shard I/M --port P --state DIR --tls-cert/--tls-key/--tls-ca ...`: one shard of the round server
// of a federation across facilities (DESIGN.md "Sites", docs/sites.md). Shard 0 also decides the rounds; the others
// report to it (--coordinator). Runs until SIGINT or SIGTERM; killed at any moment and started again with the same
// --state, it goes on from its last committed round.
#include <malloc.h>

#include <cmath>
#include <csignal>
#include <cstdio>
#include <fstream>
#include <memory>
#include <thread>

#include "cli/commands.h"
#include "sites/coordinator.h"
#include "sites/rpc.h"
#include "sites/service.h"
#include "sites/shard.h"
#include "sites/shard_client.h"
#include "sites/shard_store.h"
#include "train/fault_injection.h"
#include "util/error.h"
#include "util/posix_file.h"

namespace fedshard::cli {

namespace {

struct ServeArgs {
  std::string shard = "0/1", address = "0.0.0.0", state, coordinator, server_name, port_file, outer = "fedavg";
  std::string aggregate = "mean", norm_action = "clip";
  double norm_bound = 0;
  std::string tls_cert, tls_key, tls_ca, tls_crl;
  int port = 0, quorum = 0;
  double deadline = 600, outer_lr = 1.0, outer_momentum = 0.9;
};

void add_serve_options(CLI::App& app, ServeArgs& a) {
  app.add_option("--shard", a.shard, "I/M: this process serves shard I of the model's M (M = 1: the whole model)")
      ->capture_default_str();
  app.add_option("--address", a.address, "address to listen on")->capture_default_str();
  app.add_option("--port", a.port, "TCP port (0: any free one; see --port-file)")->capture_default_str();
  app.add_option("--port-file", a.port_file, "write the port listened on to this file once serving");
  app.add_option("--state", a.state, "directory of this shard's durable state (made if missing)")->required();
  app.add_option("--tls-cert", a.tls_cert, "the server's certificate (PEM), signed by the federation's CA")->required();
  app.add_option("--tls-key", a.tls_key, "its private key (PEM)")->required();
  app.add_option("--tls-ca", a.tls_ca, "the federation's CA certificate (PEM): every site's must be signed by it")
      ->required();
  app.add_option("--tls-crl", a.tls_crl,
                 "the CA's certificate revocation list (PEM): a revoked site is refused; read again whenever the "
                 "file changes (replace it whole, e.g. by a rename)");
  app.add_option("--coordinator", a.coordinator, "HOST:PORT of shard 0, which shards 1..M-1 report to");
  app.add_option("--server-name", a.server_name, "the name shard 0's certificate carries (default: its host)");
  app.add_option("--quorum", a.quorum, "sites a round waits for (0: every site that is active)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  app.add_option("--round-deadline", a.deadline,
                 "seconds after a round's first site is complete: the round closes with the sites complete then")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--outer", a.outer, "the outer optimizer, applied once per round: fedavg | nesterov")
      ->check(CLI::IsMember({"fedavg", "nesterov"}))
      ->capture_default_str();
  app.add_option("--outer-lr", a.outer_lr, "nesterov's learning rate")->check(CLI::PositiveNumber)->capture_default_str();
  app.add_option("--outer-momentum", a.outer_momentum, "nesterov's momentum")
      ->check(CLI::Range(0.0, 0.999999))
      ->capture_default_str();
  app.add_option("--aggregate", a.aggregate,
                 "how the sites' deltas are combined: mean (weighted by tokens) | trimmed:F (per coordinate, the "
                 "fraction F of the sites dropped at each end, the rest averaged unweighted) | median (per coordinate)")
      ->capture_default_str();
  app.add_option("--norm-bound", a.norm_bound,
                 "the largest norm of a site's delta from the global model a round takes (0: no bound)")
      ->capture_default_str();
  app.add_option("--norm-action", a.norm_action,
                 "a delta above --norm-bound: clip (scaled down to the bound) | refuse (the round goes on without it)")
      ->check(CLI::IsMember({"clip", "refuse"}))
      ->capture_default_str();
}

std::pair<int, int> shard_of(const std::string& spec) {
  const auto slash = spec.find('/');
  int i = -1, m = 0;
  try {
    size_t used = 0;
    i = std::stoi(spec.substr(0, slash), &used);
    FS_CHECK(used == slash, "");
    m = std::stoi(spec.substr(slash + 1), &used);
    FS_CHECK(used == spec.size() - slash - 1, "");
  } catch (const std::exception&) {
    i = -1;
  }
  FS_CHECK(slash != std::string::npos && i >= 0 && m > 0 && i < m, "--shard must be I/M with 0 <= I < M, got '", spec,
           "'");
  return {i, m};
}

int run_serve(const ServeArgs& a) {
  const auto [index, shards] = shard_of(a.shard);
  FS_CHECK(index == 0 || !a.coordinator.empty(), "--shard ", a.shard, ": shards other than 0 report to shard 0: ",
           "give --coordinator HOST:PORT");
  FS_CHECK(index != 0 || a.coordinator.empty(), "--coordinator is for shards 1..M-1 (shard 0 decides the rounds)");
  const auto tls = sites::load_tls({a.tls_cert, a.tls_key, a.tls_ca});
  sites::ServeOptions opts;
  opts.shard = index;
  opts.shards = shards;
  opts.state_dir = a.state;
  opts.outer = {a.outer, a.outer_lr, a.outer_momentum};
  opts.quorum = a.quorum;
  opts.deadline = a.deadline;
  sites::Aggregation::parse(a.aggregate);  // refused here, in one line, if malformed
  FS_CHECK(a.norm_bound >= 0 && std::isfinite(a.norm_bound), "--norm-bound must be a norm >= 0 (0: no bound), got ",
           a.norm_bound);
  FS_CHECK(index == 0 || (a.aggregate == "mean" && a.norm_bound == 0 && a.norm_action == "clip"),
           "--aggregate, --norm-bound and --norm-action are shard 0's: the coordinator decides each round for every "
           "shard (the bound applies to a site's whole delta)");

  // A shard's buffers are large (chunks of 4 MiB, slices, submissions) and come and go on many threads: mapped
  // and given back when freed. glibc's default raises its mmap threshold at the first such free and keeps them in
  // per-thread arenas instead: 2.6x the peak memory, measured (docs/results.md section 9.3).
  mallopt(M_MMAP_THRESHOLD, 128 * 1024);

  // SIGINT and SIGTERM end the server: waited for below, not delivered to gRPC's threads.
  sigset_t stop;
  sigemptyset(&stop);
  sigaddset(&stop, SIGINT);
  sigaddset(&stop, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop, nullptr);

  std::unique_ptr<sites::Coordinator> coordinator;
  std::unique_ptr<sites::ShardClient> to_coordinator;
  std::function<sites::Decision(const sites::Report&)> report;
  if (index == 0) {
    const sites::ShardStore store(a.state, index, shards);
    const auto committed = store.committed();
    coordinator = std::make_unique<sites::Coordinator>(shards, a.quorum, a.deadline, a.state + "/coordinator.json",
                                                       committed ? committed->round + 1 : 0,
                                                       sites::RoundRules{a.aggregate, a.norm_bound, a.norm_action == "refuse"});
    report = [&](const sites::Report& r) { return coordinator->report(r); };
  } else {
    const auto host = a.coordinator.substr(0, a.coordinator.rfind(':'));
    to_coordinator = std::make_unique<sites::ShardClient>(a.coordinator, tls, a.server_name.empty() ? host : a.server_name,
                                                          /*patience=*/0);
    report = [&](const sites::Report& r) { return to_coordinator->report(r); };
  }
  const auto faults = train::serve_faults_from_environment();
  sites::Shard shard(opts, report, *faults);
  if (coordinator)
    shard.on_site = [&](const std::string& site, bool left) {
      if (left)
        coordinator->left(site);
      else
        coordinator->seen(site);
    };
  const std::string label = cat("shard ", index, "/", shards);
  sites::RoundService service(shard, tls, coordinator.get(), label, a.tls_crl);
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort(a.address + ":" + std::to_string(a.port), sites::server_credentials(tls), &port);
  sites::configure_server(builder);
  builder.RegisterService(&service);
  const auto server = builder.BuildAndStart();
  FS_CHECK(server && port > 0, "cannot listen on ", a.address, ":", a.port, " (in use, or not an address of this host)");
  if (!a.port_file.empty()) write_file_atomically(a.port_file, std::to_string(port) + "\n");
  std::fprintf(stderr, "fedshard serve: %s listening on %s:%d (state %s)\n", label.c_str(), a.address.c_str(), port,
               a.state.c_str());
  std::thread driver([&] { shard.run(); });
  int signal = 0;
  sigwait(&stop, &signal);
  std::fprintf(stderr, "fedshard serve: %s: stopping (signal %d)\n", label.c_str(), signal);
  shard.stop();
  server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(5));
  driver.join();
  return 0;
}

}  // namespace

Command add_serve(CLI::App& app) {
  auto a = std::make_shared<ServeArgs>();
  Command c;
  c.app = app.add_subcommand("serve", "One shard of the round server of a federation across facilities (mutual TLS)");
  add_serve_options(*c.app, *a);
  c.run = [a] { return run_serve(*a); };
  return c;
}

}  // namespace fedshard::cli
