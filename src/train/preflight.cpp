#include "train/preflight.h"

#include <cstdio>
#include <sstream>

#include "comm/mpi_runtime.h"
#include "model/layers.h"
#include "train/setup.h"
#include "util/error.h"
#include "util/memory.h"

namespace fedshard::train {

namespace {

int bytes_of(const std::string& dtype) { return dtype == "float64" ? 8 : dtype == "bfloat16" ? 2 : 4; }

std::string mb(double bytes) { return model::with_commas(static_cast<int64_t>(bytes / 1e6)) + " MB"; }

std::string breakdown(const plan::MemoryEstimate& e) {
  std::ostringstream os;
  const char* sep = "";
  for (const auto& c : e.components)
    if (c.bytes >= 1e6) os << sep << c.name << " " << mb(c.bytes), sep = ", ";
  return os.str();
}

}  // namespace

plan::MemoryInputs memory_inputs(const TrainSetup& s, int world_rank) {
  const auto& cfg = s.cfg;
  const int group = s.layout.coords(world_rank).group;
  plan::MemoryInputs in;
  in.model = s.model;
  in.shard = s.layout.shard_size(group);
  in.replicas = s.layout.replicas(group);
  in.batch = cfg.batch_size;
  in.seq_len = cfg.seq_len;
  in.grad_accum = cfg.grad_accum * s.emulation.ranks_per_rank;
  in.master_bytes = bytes_of(cfg.dtype);
  in.compute_bytes = bytes_of(cfg.compute_dtype);
  in.reduce_bytes = bytes_of(cfg.reduce_dtype);
  in.recompute = cfg.activation_checkpointing == "on" || (cfg.activation_checkpointing == "auto" && in.shard > 1);
  in.reshard_after_forward = cfg.reshard_after_forward;
  in.optimizer = cfg.optimizer;
  in.momentum = cfg.momentum;
  in.math_attention = cfg.attention == "math" || !model::sdpa_available();
  in.federated = s.strategy.federated;
  in.outer = cfg.outer_optimizer;
  // The last global slice (federation::FederationOptions::keeps_global): delta rounds keep it too.
  in.round_copy = cfg.compress != "none" || cfg.overlap != "none" || cfg.normalize == "steps" ||
                  bytes_of(cfg.reduce_dtype) < bytes_of(cfg.dtype);
  in.residuals = cfg.compress != "none";
  in.groups_per_rank = s.emulation.groups_per_rank;
  // On a GPU the CUDA context takes device memory before any tensor (~0.5 GB on recent drivers); on the CPU
  // the process already holds its libraries and runtime, counted where they are.
  in.runtime_bytes = cfg.device == "cuda" ? 0.5e9 : resident_bytes();
  return in;
}

plan::MemoryEstimate preflight(const TrainSetup& s, int world_rank) {
  const auto& cfg = s.cfg;
  const auto in = memory_inputs(s, world_rank);
  const auto estimate = plan::estimate_memory(in);
  auto& mpi = comm::MpiRuntime::get();
  const int host_ranks = mpi.host_rank_and_size().second;
  double available = 0;
  std::string where;
  if (cfg.device == "cuda") {
    available = device_free_bytes(s.topology.device);
    where = "free on GPU " + std::to_string(s.topology.device);
  } else if (const double host = available_memory_bytes(); host > 0) {
    available = host / host_ranks + in.runtime_bytes;
    where = "available (MemAvailable " + mb(host) + " shared by " + std::to_string(host_ranks) +
            " rank(s) on this host, plus the " + mb(in.runtime_bytes) + " this process holds)";
  }
  if (available > 0 && estimate.total() > available) {
    const int group_size = s.layout.group_size(s.layout.coords(world_rank).group);
    const auto fixes = plan::memory_suggestions(in, available, group_size);
    std::string advice;
    for (const auto& f : fixes) advice += (advice.empty() ? "; would fit: " : " | ") + f;
    if (advice.empty()) advice = "; nothing short of more ranks, a smaller model or more memory makes it fit";
    const std::string line = cat("each rank needs about ", mb(estimate.total()), " at its peak (", breakdown(estimate),
                                 ") but has ", mb(available), " ", where, advice);
    FS_CHECK(cfg.force, line, "; --force runs it anyway");
    if (world_rank == 0) std::fprintf(stderr, "fedshard: warning: %s (--force: running anyway)\n", line.c_str());
  }
  // Disk: every rank writes its shard's master weights, optimizer and federation state per checkpoint.
  if (world_rank == 0 && cfg.checkpoint_keep > 0) {
    const double per_rank = estimate.bytes("master") + estimate.bytes("optimizer") + estimate.bytes("federation");
    const double needed = per_rank * s.layout.world() * static_cast<double>(cfg.checkpoint_keep + 1);
    const double free = free_disk_bytes(cfg.out);
    if (free > 0 && needed > free)
      std::fprintf(stderr, "fedshard: warning: %lld checkpoint(s) of about %s each (checkpoint.keep + the one being "
                   "written) need %s but %s has %s free\n", static_cast<long long>(cfg.checkpoint_keep + 1),
                   mb(per_rank * s.layout.world()).c_str(), mb(needed).c_str(), cfg.out.c_str(), mb(free).c_str());
  }
  return estimate;
}

}  // namespace fedshard::train
