// What the trainer builds from the start-up's setup (train/setup.h): the engine's spec (what parallelize() gets)
// and the resolved configuration that config.json and the checkpoints record, plus the process-wide link emulation.
#pragma once

#include <mpi.h>
#include <nlohmann/json.hpp>

#include "comm/topology.h"
#include "train/engine.h"
#include "train/setup.h"

namespace fedshard::train {

// parallel.link_*: every collective on that tier is held to the emulated link's speed.
void configure_link_emulation(const TrainConfig& cfg);
// optim.fused: auto takes the fused AdamW kernel where this LibTorch has it.
bool use_fused_adamw(const TrainConfig& cfg);

// This rank's device, its intra-op threads set (train.threads, else the host's cores over its ranks) into `threads`.
at::Device place_rank(const TrainSetup& s, int& threads);

// A site's options (sites.*), and the federation identity it greets the round server with.
sites::SiteOptions site_options(const TrainSetup& s);

// The engine of this rank of `s`'s layout, whose ranks `base` numbers, on `device`.
EngineSpec engine_spec(const TrainSetup& s, MPI_Comm base, at::Device device);

// This rank's facts that the resolved configuration records beside the setup's.
struct RankFacts {
  int threads = 1;
  bool recompute = false;  // activation checkpointing, as the engine resolved "auto"
  int64_t warmup_steps = 0;
  double peak_flops = 0;
};
// config.json: the configuration, and under "resolved" what the job computes (the virtual layout under emulation).
nlohmann::json resolved_config(const TrainSetup& s, const comm::Topology& topo, const RankFacts& facts);

}  // namespace fedshard::train
