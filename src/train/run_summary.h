// How a run ends: what `fedshard train` returns and prints, and the summary line of metrics.jsonl (DESIGN.md
// "Metrics"), with every rank's peak memory and step bytes beside this rank's counted bytes and the ring formula's.
#pragma once

#include <ATen/ATen.h>
#include <nlohmann/json.hpp>

#include <cstdint>

#include "comm/ledger.h"
#include "train/setup.h"

namespace fedshard::train {

struct TrainSummary {
  int64_t steps = 0;
  int64_t tokens = 0;  // the run's through `steps`
  double final_val_loss = 0;
  double final_val_ppl = 0;
  double unigram_val_ppl = 0;
  double tok_per_s = 0;
  bool preempted = false;  // stopped by a signal after writing a checkpoint; exit kPreemptedExit
  bool left = false;       // this rank's group lost a rank and left the job, which went on without it
  bool reporter = false;   // the metrics writer: rank 0 of the ranks that trained to the end
};

// This rank's row of the per-rank columns: peak host RSS (MiB), peak device memory (MiB, on a GPU), then the bytes
// its training steps sent per tier. Summed over the ranks' rows (each fills its own), every rank's.
constexpr int kRankColumns = 2 + comm::kNumTiers;
void fill_rank_row(at::Tensor row, at::Device device, const std::array<double, comm::kNumTiers>& step_bytes);

// The summary line; `per_rank`: every rank's row (CPU), `resolved`: config.json's.
nlohmann::json summary_line(const TrainSetup& s, const nlohmann::json& resolved, const TrainSummary& summary,
                            double wall_s, const comm::LedgerSnapshot& comm_total, const at::Tensor& per_rank,
                            double peak_flops, bool on_gpu);

}  // namespace fedshard::train
