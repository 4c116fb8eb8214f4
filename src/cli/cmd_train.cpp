// `fedshard train`: resolves the config (file + flags), checks it and the data on every rank, then trains.
#include <csignal>
#include <iostream>
#include <map>
#include <memory>

#include "cli/commands.h"
#include "cli/startup.h"
#include "comm/mpi_runtime.h"
#include "comm/rejoin.h"
#include "comm/tier.h"
#include "train/config.h"
#include "train/preemption.h"
#include "train/fault_injection.h"
#include "train/trainer.h"
#include "util/error.h"

namespace fedshard::cli {

namespace {

// Named flags are shorthands for configuration keys (DESIGN.md CLI contract); --set reaches every key.
const std::vector<std::tuple<std::string, std::string, std::string>>& flags() {
  static const std::vector<std::tuple<std::string, std::string, std::string>> f = {
      {"--strategy", "parallel.strategy", "ddp | fsdp | hsdp | fl-ddp | fl-fsdp | fl-hsdp"},
      {"--group-size", "parallel.group_size", "ranks per federation group S (fl-*)"},
      {"--groups", "parallel.groups", "federation groups of different sizes, e.g. 4,2,2 (fl-*)"},
      {"--shard-size", "parallel.shard_size", "ranks per shard group H (hsdp, fl-hsdp)"},
      {"--sync-every", "parallel.sync_every", "optimizer steps between aggregations K (fl-*)"},
      {"--overlap", "federation.overlap", "none | delayed | streaming:F: leave the inter-group round in flight (fl-*)"},
      {"--compress", "federation.compress", "none | bf16 | int8 | int4 | topk:D: the inter-group round's deltas on the wire (fl-*)"},
      {"--round", "federation.round", "steps | steps:K | seconds:T: when a group closes its round (fl-*)"},
      {"--emulate", "parallel.emulate", "W | GxS: the virtual layout (world of W, or G groups of S ranks) these ranks play"},
      {"--grad-accum", "train.grad_accum", "micro-batches per rank per optimizer step"},
      {"--slow", "train.slow", "emulated stragglers: RANK=FACTOR,group:G=FACTOR (compute FACTOR times as long)"},
      {"--steps", "train.steps", "optimizer steps"},
      {"--out", "train.out", "run directory (metrics.jsonl, config.json)"},
      {"--tensorboard", "train.tensorboard", "directory for TensorBoard event files (e.g. RUN/tb)"},
      {"--seed", "train.seed", "seed of initialization and data order"},
      {"--model", "model.name", "model preset"},
      {"--data", "data.dir", "directory written by fedshard prepare"},
      {"--batch-size", "data.batch_size", "sequences per rank per step"},
      {"--seq-len", "data.seq_len", "tokens per sequence"},
      {"--partition", "data.partition", "iid | by-source | dirichlet:ALPHA"},
      {"--lr", "optim.lr", "peak learning rate"},
      {"--eval-every", "eval.every", "steps between evaluations (0: at the end only)"},
      {"--ranks-per-node", "parallel.ranks_per_node", "emulate nodes of N ranks (0: detect)"},
      {"--threads", "parallel.threads", "intra-op threads per rank (0: cores per node / ranks per node)"},
      {"--compute-dtype", "model.compute_dtype", "float32 | bfloat16 | float64"},
      {"--resume", "train.resume", "auto (latest checkpoint of --out, if any) or a checkpoint directory"},
      {"--init-from", "model.init_from", "Hugging Face Llama directory to initialize from"},
      {"--checkpoint-every", "checkpoint.every", "steps between checkpoints (0: at the end only)"},
      {"--profile-steps", "train.profile_steps", "FIRST:LAST: profile these steps into RUN/profile/"},
      {"--site", "sites.name", "this job is a site of a federation across facilities: its name (its certificate's)"},
      {"--server", "sites.server", "HOST:PORT of each round server shard, in shard order, comma-separated"},
      {"--tls-cert", "sites.tls_cert", "this site's certificate (PEM), signed by the federation's CA"},
      {"--tls-key", "sites.tls_key", "its private key (PEM)"},
      {"--tls-ca", "sites.tls_ca", "the federation's CA certificate (PEM)"},
  };
  return f;
}

}  // namespace

Command add_train(CLI::App& app) {
  struct Args {
    std::string config;
    std::map<std::string, std::string> named;
    std::vector<std::string> sets;
    std::vector<std::string> links;
  };
  auto args = std::make_shared<Args>();
  Command c;
  c.needs_mpi = true;
  c.app = app.add_subcommand("train", "Train a model (launch with mpirun -np N / srun for several ranks)");
  c.app->add_option("--config", args->config, "TOML config file; flags override it");
  // A repeated flag takes its last value, so wrappers can append overrides to a base command line.
  for (const auto& [flag, key, help] : flags())
    c.app->add_option(flag, args->named[flag], help + " [" + key + "]")
        ->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  c.app->add_option("--set", args->sets, "KEY=VALUE for any configuration key (repeatable)");
  c.app->add_flag("--force", "run even when the preflight predicts that a rank will run out of memory [train.force]");
  c.app->add_option("--link", args->links,
                    "TIER=BANDWIDTH,LATENCY: emulate a network tier (node, inter-node, inter-group), e.g. "
                    "--link inter-group=1Gbit/s,500us (repeatable)");
  std::string keys = "\nConfiguration keys (file sections / --set):\n";
  for (const auto& [key, help] : train::config_keys()) keys += "  " + key + ": " + help + "\n";
  c.app->footer(keys);

  auto overrides_of = [args, sub = c.app] {
    train::Overrides overrides;
    for (const auto& [flag, key, help] : flags())
      if (sub->count(flag) > 0) overrides.push_back({key, args->named.at(flag), flag});
    if (sub->count("--force") > 0) overrides.push_back({"train.force", "true", "--force"});
    for (const auto& s : args->sets) {
      const auto eq = s.find('=');
      FS_CHECK(eq != std::string::npos && eq > 0, "--set expects KEY=VALUE, got '", s, "'");
      overrides.push_back({s.substr(0, eq), s.substr(eq + 1), "--set " + s.substr(0, eq)});
    }
    for (const auto& l : args->links) {
      const auto eq = l.find('=');
      FS_CHECK(eq != std::string::npos && eq > 0, "--link expects TIER=BANDWIDTH,LATENCY, got '", l, "'");
      const auto tier = comm::parse_tier(l.substr(0, eq));
      overrides.push_back({std::string("network.") + comm::tier_metric_key(tier), l.substr(eq + 1), "--link"});
    }
    return overrides;
  };
  c.precheck = [args, overrides_of] { train::load_config(args->config, overrides_of()); };
  c.run = [args, overrides_of] {
    const auto overrides = overrides_of();
    // A file size limit (ulimit -f) must surface as a write error, not kill the rank.
    std::signal(SIGXFSZ, SIG_IGN);
    train::install_preemption_handlers();
    auto& mpi = comm::MpiRuntime::get();
    train::TrainSetup setup;
    std::unique_ptr<Faults> faults;
    // A replacement started by the kept ranks of a job that lost a group (federation.rejoin_after).
    const MPI_Comm joined = comm::join_spawning_job();
    run_startup_phase([&] {
      auto cfg = train::load_config(args->config, overrides);
      faults = train::training_faults_from_environment();
      setup = joined == MPI_COMM_NULL ? train::prepare_training(cfg, mpi.world_size(), mpi.world_rank())
                                      : train::prepare_joining(cfg, joined, *faults);
    });
    train::Trainer trainer(std::move(setup), *faults);
    const auto summary = trainer.run();
    if (summary.preempted) return train::kPreemptedExit;
    if (summary.left) return 0;  // said why on stderr; the job goes on without this rank's group
    if (summary.reporter) {
      std::printf("final validation: loss %.4f, perplexity %.3f (unigram baseline of the same split: %.3f)\n",
                  summary.final_val_loss, summary.final_val_ppl, summary.unigram_val_ppl);
      std::printf("throughput: %.0f tokens/s over %lld steps\n", summary.tok_per_s,
                  static_cast<long long>(summary.steps));
    }
    return 0;
  };
  return c;
}

}  // namespace fedshard::cli
