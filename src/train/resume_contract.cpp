#include "train/resume_contract.h"

#include <filesystem>

#include "util/error.h"
#include "util/safetensors.h"

namespace fedshard::train {

namespace {

// The checkpoint's value of `section.key`, as its config.json wrote it ("" where it predates the key).
std::string saved(const CheckpointMeta& m, const char* section, const char* key) {
  const auto& c = m.config;
  if (!c.contains(section) || !c.at(section).contains(key)) return "";
  const auto& v = c.at(section).at(key);
  return v.is_string() ? v.get<std::string>() : v.dump();
}

int bytes_of(const std::string& dtype) { return dtype == "float64" ? 8 : dtype == "bfloat16" ? 2 : 4; }

// The first option of `cfg` that reads the last global model (Aggregator::keeps_global, Nesterov's state),
// as "federation.compress = int8"; "" when none does.
std::string needs_global(const TrainConfig& cfg) {
  if (cfg.compress != "none") return "federation.compress = " + cfg.compress;
  if (cfg.overlap != "none") return "federation.overlap = " + cfg.overlap;
  if (cfg.normalize != "none") return "federation.normalize = " + cfg.normalize;
  if (bytes_of(cfg.reduce_dtype) < bytes_of(cfg.dtype)) return "parallel.reduce_dtype = " + cfg.reduce_dtype;
  if (cfg.outer_optimizer == "nesterov") return "federation.outer_optimizer = nesterov";
  return "";
}

// Whether the checkpoint's rank files hold the last global model (written by a run that kept it).
bool holds_global(const CheckpointMeta& m) {
  const SafetensorsFile f((std::filesystem::path(m.dir) / m.ranks.front().file).string());
  return f.contains("u0.fed.global") || f.contains("u0.outer.global");
}

}  // namespace

void check_resume_contract(const CheckpointMeta& meta, const TrainConfig& cfg, Relayout relayout) {
  const bool was_federated = meta.strategy.rfind("fl-", 0) == 0;
  const bool federated = cfg.strategy.rfind("fl-", 0) == 0;
  // A merge is a FedAvg round (restore_checkpoint): nothing of the checkpoint's rounds carries over.
  if (!was_federated || !federated || relayout == Relayout::Merge) return;
  const std::string& dir = meta.dir;
  const bool in_flight = !meta.round_in_flight.empty() && relayout == Relayout::Same;
  bool pending = false;
  for (bool p : meta.pending_rounds) pending = pending || p;
  bool equal_steps = true;
  for (int64_t s : meta.group_steps) equal_steps = equal_steps && s == meta.group_steps.front();
  // Every group holds the global model: no round in flight or pending, no step since the last round.
  const bool at_round = meta.round_in_flight.empty() && !pending && meta.steps_since_sync == 0;

  // A round in flight is applied after the resume where its schedule put it (same layout only: a relayout
  // applies it at the resume).
  const auto overlap = saved(meta, "federation", "overlap");
  FS_CHECK(!in_flight || cfg.overlap == overlap, "checkpoint ", dir, " holds a federation round in flight begun under ",
           "federation.overlap = ", overlap, "; resume it with the same overlap (this run has ", cfg.overlap, ")");

  // When rounds happen: K, or seconds:T. The groups must meet at the next round, so a change needs every
  // group at a round, and step rounds need every group at one step.
  const auto sync_every = saved(meta, "parallel", "sync_every"), round = saved(meta, "federation", "round");
  const bool timed = cfg.round.rfind("seconds", 0) == 0;
  const bool rounds_changed = (!sync_every.empty() && std::to_string(cfg.sync_every) != sync_every) ||
                              (!round.empty() && cfg.round != round);
  FS_CHECK(!rounds_changed || (at_round && (timed || equal_steps)), "checkpoint ", dir, " was written with ",
           "parallel.sync_every = ", sync_every, " and federation.round = ", round, " ",
           at_round ? "with its groups at different steps" : "between two rounds",
           "; change when rounds happen only from a checkpoint where every group is at one round (this run has ",
           "parallel.sync_every = ", cfg.sync_every, " and federation.round = ", cfg.round, ")");

  // Error feedback: the residuals are what the checkpoint's codec has not sent yet; only the same codec, cut
  // the same way, can send them.
  const auto compress = saved(meta, "federation", "compress"), block = saved(meta, "federation", "compress_block");
  FS_CHECK(compress.empty() || compress == "none" || cfg.compress == compress, "checkpoint ", dir,
           " was written with federation.compress = ", compress, " and holds its error-feedback residuals, which ",
           "federation.compress = ", cfg.compress, " cannot send; resume with --compress ", compress);
  FS_CHECK(compress != "int8" || block.empty() || std::to_string(cfg.compress_block) == block, "checkpoint ", dir,
           " was written with federation.compress_block = ", block, " and holds int8 residuals cut in its blocks; ",
           "resume with federation.compress_block = ", block, " (this run has ", cfg.compress_block, ")");

  // Deltas from the last global model (compression, overlap, FedNova, delta rounds, Nesterov): between two
  // rounds a group's own model is not the global one, so the checkpoint must hold it.
  const auto need = needs_global(cfg);
  FS_CHECK(need.empty() || at_round || holds_global(meta), "checkpoint ", dir, " was written between two rounds (",
           meta.steps_since_sync, " step(s) after the last) by a run that did not keep the last global model ",
           "(federation.compress, overlap, normalize and outer_optimizer were ", compress.empty() ? "none" : compress,
           ", ", overlap.empty() ? "none" : overlap, ", ", saved(meta, "federation", "normalize"), ", ",
           saved(meta, "federation", "outer_optimizer"), "); ", need, " needs it: resume with the checkpoint's ",
           "options or from a checkpoint taken at a round");
}

}  // namespace fedshard::train
