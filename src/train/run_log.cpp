#include "train/run_log.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>

#include "comm/tier.h"
#include "train/checkpoint.h"
#include "util/error.h"
#include "util/posix_file.h"

namespace fedshard::train {

namespace {

// Seconds collectives spent really running (emulated=false) or held back by link emulation (true).
double comm_seconds(const comm::LedgerSnapshot& d, bool emulated) {
  double s = 0;
  for (comm::Tier t : comm::kTiers)
    for (comm::Traffic k : {comm::Traffic::Data, comm::Traffic::Control})
      s += emulated ? d.at(t, k).emulated_seconds : d.at(t, k).seconds;
  return s;
}

}  // namespace

RunLog::RunLog(const TrainConfig& cfg) : cfg_(cfg), progress_(cfg.steps) {}

void RunLog::open(const nlohmann::json& config, const CheckpointMeta* resumed, bool same_layout,
                  const nlohmann::json& relayout, const std::string& started) {
  if (!writer_) return;
  // First: a TensorBoard directory that cannot be made stops the run before it writes anything.
  if (!cfg_.tensorboard.empty()) metrics_.mirror_to_tensorboard(cfg_.tensorboard, resumed ? resumed->step : -1);
  this->config(config);
  if (resumed) {
    reopen_metrics_after(resumed->step);
    metrics_.write({{"type", "resume"},
                    {"step", resumed->step},
                    {"checkpoint", resumed->dir},
                    {"same_layout", same_layout}});
    if (!relayout.is_null()) metrics_.write(relayout);
    std::fprintf(stderr, "fedshard: resuming from %s (step %lld)\n", resumed->dir.c_str(),
                 static_cast<long long>(resumed->step));
  } else {
    metrics_.open((std::filesystem::path(cfg_.out) / "metrics.jsonl").string(), /*append=*/false);
  }
  std::fprintf(stderr, "%s\n", started.c_str());
}

void RunLog::config(const nlohmann::json& config) {
  if (writer_) write_file_atomically((std::filesystem::path(cfg_.out) / "config.json").string(), config.dump(2) + "\n");
}

void RunLog::reopen_metrics_after(int64_t step) {
  const auto path = (std::filesystem::path(cfg_.out) / "metrics.jsonl").string();
  std::string kept;
  if (std::filesystem::exists(path)) {
    std::istringstream in(read_file(path));
    for (std::string line; std::getline(in, line);) {
      nlohmann::json j;
      try {
        j = nlohmann::json::parse(line);
      } catch (const std::exception&) {
        break;  // a line cut short by the crash ends what is kept
      }
      if (j.value("type", "") == "summary" || j.value("step", int64_t{0}) > step) continue;
      kept += line + "\n";
    }
  }
  write_file_atomically(path, kept);
  metrics_.open(path, /*append=*/true);
}

void RunLog::step(const StepRecord& r) {
  nlohmann::json bytes;
  for (comm::Tier tier : comm::kTiers) bytes[comm::tier_metric_key(tier)] = r.sent[static_cast<int>(tier)];
  metrics_.write({{"type", "step"},
                  {"step", r.step},
                  {"tokens", r.tokens},
                  {"loss", r.loss},
                  {"lr", r.lr},
                  {"grad_norm", r.grad_norm},
                  {"time_s",
                   {{"total", r.seconds},
                    {"compute", r.seconds - r.comm.exposed_wait_seconds},
                    {"comm_exposed", r.comm.exposed_wait_seconds},
                    {"optimizer", r.optimizer_seconds},
                    {"round", r.round_seconds},
                    {"comm_real", comm_seconds(r.comm, false)},
                    {"comm_emulated_hold", comm_seconds(r.comm, true)}}},
                  {"bytes", bytes},
                  {"tok_per_s", r.tok_per_s},
                  {"mfu", r.mfu},
                  {"aggregated", r.aggregated},
                  {"profiled", r.profiled}});
}

void RunLog::eval(int64_t step, int64_t tokens, const std::string& model, const EvalResult& e, double wall_s) {
  metrics_.write({{"type", "eval"},
                  {"step", step},
                  {"tokens", tokens},
                  {"val_loss", e.loss},
                  {"val_ppl", e.ppl},
                  {"val_tokens", e.tokens},
                  {"wall_s", wall_s},
                  {"model", model}});
}

void RunLog::round(int64_t step, int64_t tokens, const std::vector<int64_t>& group_steps) {
  metrics_.write({{"type", "round"}, {"step", step}, {"tokens", tokens}, {"group_steps", group_steps}});
}

void RunLog::progress(int64_t step, double loss, double lr, double tok_per_s, double val_ppl) {
  if (!writer_) return;
  char extra[64] = "";
  if (val_ppl > 0) std::snprintf(extra, sizeof extra, "val ppl %.3f", val_ppl);
  progress_.update(step, loss, lr, tok_per_s, extra);
}

void RunLog::take_over(int64_t step) {
  // After the lost writer's last whole line (under time-based rounds, its last through kept_through_), the lines it
  // did not write, as this rank logged them (its group's loss), and their TensorBoard mirror in a new event file
  // that starts after that step.
  if (!cfg_.tensorboard.empty()) metrics_.mirror_to_tensorboard(cfg_.tensorboard, kept_through_.value_or(step));
  reopen_metrics_after(kept_through_.value_or(std::numeric_limits<int64_t>::max()));
  if (kept_through_) metrics_.skip_steps_through(*kept_through_);
}

void RunLog::hold_for_takeover(bool timed_rounds) {
  timed_ = timed_rounds;
  metrics_.hold_lines(timed_ ? std::numeric_limits<size_t>::max() : 2 * (static_cast<size_t>(cfg_.sync_every) + 1));
}

void RunLog::round_agreed(int64_t step, int64_t writer_step) {
  writer_round_step_ = writer_step;
  metrics_.forget_held_before(std::min(step, writer_step));
}

void RunLog::membership(const nlohmann::json& line, const std::string& said, int64_t step, bool lost) {
  // Every rank keeps the mark, so that a later takeover keeps what an earlier writer wrote.
  if (lost && timed_) kept_through_ = std::max(kept_through_.value_or(0), writer_round_step_);
  if (!writer_) {
    metrics_.write(line);  // held: the writer may be lost before it writes the line
    return;
  }
  const bool took_over = !metrics_.is_open();
  if (took_over) take_over(step);
  metrics_.write(line);
  if (took_over) metrics_.write_held();
  std::fprintf(stderr, "%s\n", said.c_str());
}

void RunLog::preempted(int64_t step, int signal, bool emulated, int exit_code) {
  if (!writer_) return;
  metrics_.write({{"type", "preempted"}, {"step", step}, {"signal", signal}});
  std::fprintf(stderr, "fedshard: preempted: stopped after step %lld %s; exit %d (requeue)\n",
               static_cast<long long>(step), emulated ? "(emulated: no checkpoint)" : "with a checkpoint", exit_code);
}

void RunLog::summary(const nlohmann::json& line) {
  if (writer_) metrics_.write(line);
}

void RunLog::audit(int launch_rank, const nlohmann::json& line) {
  const auto dir = std::filesystem::path(cfg_.out) / "audit";
  std::filesystem::create_directories(dir);
  char name[40];
  std::snprintf(name, sizeof name, "rank-%05d.jsonl", launch_rank);
  std::ofstream f(dir / name, std::ios::app);
  f << line.dump() << "\n";
  FS_CHECK(f.good(), "cannot write ", (dir / name).string());
}

}  // namespace fedshard::train
