#include "train/run_summary.h"

#include <sys/resource.h>

#include <algorithm>

#include "comm/link_emulation.h"
#include "util/memory.h"

namespace fedshard::train {

namespace {

double peak_rss_mb() {
  struct rusage ru {};
  getrusage(RUSAGE_SELF, &ru);
  return static_cast<double>(ru.ru_maxrss) / 1024.0;
}

nlohmann::json link_summary() {
  nlohmann::json j = nullptr;
  for (comm::Tier t : comm::kTiers)
    if (auto l = comm::LinkEmulator::instance().link(t)) j[comm::tier_metric_key(t)] = comm::describe(*l);
  return j;
}

}  // namespace

void fill_rank_row(at::Tensor row, at::Device device, const std::array<double, comm::kNumTiers>& step_bytes) {
  row[0] = peak_rss_mb();
  if (device.is_cuda()) row[1] = device_peak_allocated_bytes(device.index()) / (1024.0 * 1024.0);
  for (int t = 0; t < comm::kNumTiers; ++t) row[2 + t] = step_bytes[t];
}

nlohmann::json summary_line(const TrainSetup& s, const nlohmann::json& resolved, const TrainSummary& summary,
                            double wall_s, const comm::LedgerSnapshot& comm_total, const at::Tensor& per_rank,
                            double peak_flops, bool on_gpu) {
  const auto column = [&](int c) {
    const at::Tensor t = per_rank.select(1, c).contiguous();
    return std::vector<double>(t.data_ptr<double>(), t.data_ptr<double>() + t.numel());
  };
  // Counted at the MPI sends, next to the ring formula's figure, per tier and per communicator (this rank's).
  nlohmann::json bytes, formula, by_comm, sent_by_rank = nlohmann::json::array();
  for (comm::Tier tier : comm::kTiers) {
    bytes[comm::tier_metric_key(tier)] = comm_total.sent_bytes(tier);
    formula[comm::tier_metric_key(tier)] = comm_total.formula_bytes(tier);
  }
  for (const auto& [name, t] : comm_total.by_comm)
    by_comm[name] = {{"sent_bytes", t.sent_bytes}, {"formula_bytes", t.formula_bytes}, {"calls", t.calls},
                     {"seconds", t.seconds}};
  for (int64_t r = 0; r < per_rank.size(0); ++r) {
    nlohmann::json b;
    for (comm::Tier t : comm::kTiers) b[comm::tier_metric_key(t)] = per_rank[r][2 + static_cast<int>(t)].item<double>();
    sent_by_rank.push_back(b);
  }
  const auto rss = column(0);
  const auto& layout = s.emulation.virtual_layout;
  const auto& r = resolved.at("resolved");
  nlohmann::json line = {{"type", "summary"},
                         {"strategy", s.strategy.name()},
                         {"world", layout.world()},
                         {"group_size", r.at("group_size")},
                         {"group_sizes", layout.group_sizes()},
                         {"emulation", r.at("emulation")},
                         {"shard_size", r.at("shard_size")},
                         {"steps", summary.steps},
                         {"tokens", summary.tokens},
                         {"wall_s", wall_s},
                         {"tok_per_s", summary.tok_per_s},
                         {"final_val_loss", summary.final_val_loss},
                         {"final_val_ppl", summary.final_val_ppl},
                         {"unigram_val_ppl", summary.unigram_val_ppl},
                         {"bytes_total", bytes},
                         {"bytes_total_formula", formula},
                         {"bytes_counted", s.topology.backend == "mpi"},
                         {"bytes_by_communicator", by_comm},
                         {"step_bytes_by_rank", sent_by_rank},
                         {"comm_exposed_s", comm_total.exposed_wait_seconds},
                         {"peak_rss_mb", rss},
                         {"peak_rss_mb_max", *std::max_element(rss.begin(), rss.end())},
                         {"peak_flops_per_rank", peak_flops},
                         {"link_emulation", link_summary()}};
  if (on_gpu) {
    const auto gpu = column(1);
    line["peak_gpu_mb"] = gpu;
    line["peak_gpu_mb_max"] = *std::max_element(gpu.begin(), gpu.end());
  }
  return line;
}

}  // namespace fedshard::train
