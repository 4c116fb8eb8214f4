#include "train/resume_contract.h"

#include <filesystem>

#include "federation/codec.h"
#include "train/cadence.h"
#include "train/option_space.h"
#include "util/error.h"
#include "util/safetensors.h"

namespace fedshard::train {

namespace {

// The checkpoint's value of `key` ("section.key"), as its config.json wrote it ("" where it predates the key).
std::string saved(const CheckpointMeta& m, const std::string& key) {
  const auto dot = key.find('.');
  const auto section = key.substr(0, dot), name = key.substr(dot + 1);
  const auto& c = m.config;
  if (!c.contains(section) || !c.at(section).contains(name)) return "";
  const auto& v = c.at(section).at(name);
  if (v.is_array()) {
    std::string out;
    for (const auto& e : v) out += (out.empty() ? "" : ",") + e.dump();
    return out;
  }
  return v.is_string() ? v.get<std::string>() : v.dump();
}

// Whether the checkpoint's rank files hold the last global model (written by a run that kept it).
bool holds_global(const CheckpointMeta& m) {
  const SafetensorsFile f((std::filesystem::path(m.dir) / m.ranks.front().file).string());
  return f.contains("u0.fed.global") || f.contains("u0.outer.global");
}

}  // namespace

void check_resume_contract(const CheckpointMeta& meta, const TrainConfig& cfg, Relayout relayout) {
  // A site's checkpoint holds its own view of the federation (its last global model and round): only that site,
  // on the same layout, goes on from it.
  const auto site = saved(meta, "sites.name");
  FS_CHECK(site == cfg.site, "checkpoint ", meta.dir, " was written ", site.empty() ? "by a job that was not a site" :
           "by site " + site, "; this run is ", cfg.site.empty() ? "not a site" : "site " + cfg.site,
           " (sites.name): a site resumes from its own checkpoints only");
  FS_CHECK(site.empty() || relayout == Relayout::Same, "checkpoint ", meta.dir, " of site ", site, " was written on ",
           "another layout (sites.server): a site resumes on the layout of its checkpoint only");
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
  const bool timed = Cadence::timed_rounds(cfg);
  const auto compress = saved(meta, "federation.compress");
  const bool residuals = !compress.empty() && compress != "none";
  std::string rounds_changed;  // the first option that changes when rounds happen

  for (const auto& o : declared_options()) {
    const auto old = saved(meta, o.key), now = option_value(cfg, o.key);
    const bool changed = !old.empty() && now != old;
    switch (o.resume) {
      case ResumeRule::Free:
      case ResumeRule::Layout:
      case ResumeRule::NeedsGlobal:
        break;
      case ResumeRule::SameWithRoundInFlight:
        // A round in flight is applied after the resume where its schedule put it (same layout only: a
        // relayout applies it at the resume).
        FS_CHECK(!in_flight || !changed, "checkpoint ", dir, " holds a federation round in flight begun under ", o.key,
                 " = ", old, "; resume it with the same ", o.key.substr(o.key.find('.') + 1), " (this run has ", now, ")");
        break;
      case ResumeRule::AtRound:
        if (changed && rounds_changed.empty()) rounds_changed = o.key;
        break;
      case ResumeRule::SameWithResiduals:
        // The residuals are what the checkpoint's codec has not sent yet; only that codec, cut the same way,
        // can send them.
        FS_CHECK(!residuals || !changed || (o.key != "federation.compress" && !federation::blockwise_codec(compress)), "checkpoint ", dir,
                 " was written with ", o.key, " = ", old, " and holds its error-feedback residuals (federation.compress = ",
                 compress, "), which ", o.key, " = ", now, " cannot send; resume with ", o.key, " = ", old);
        break;
    }
  }
  // When rounds happen: the groups must meet at the next round, so a change needs every group at one round,
  // and step rounds need every group at one step.
  FS_CHECK(rounds_changed.empty() || (at_round && (timed || equal_steps)), "checkpoint ", dir, " was written with ",
           "parallel.sync_every = ", saved(meta, "parallel.sync_every"), " and federation.round = ",
           saved(meta, "federation.round"), " ", at_round ? "with its groups at different steps" : "between two rounds",
           "; change when rounds happen only from a checkpoint where every group is at one round (this run has ",
           "parallel.sync_every = ", cfg.sync_every, " and federation.round = ", cfg.round, ")");
  // Deltas from the last global model: between two rounds a group's own model is not the global one, so the
  // checkpoint must hold it.
  if (at_round) return;
  for (const auto& o : declared_options())
    FS_CHECK(!o.reads_global || !o.reads_global(cfg) || holds_global(meta), "checkpoint ", dir,
             " was written between two rounds (", meta.steps_since_sync, " step(s) after the last) by a run that did ",
             "not keep the last global model (federation.compress, overlap, normalize and outer_optimizer were ",
             compress.empty() ? "none" : compress, ", ", saved(meta, "federation.overlap"), ", ",
             saved(meta, "federation.normalize"), ", ", saved(meta, "federation.outer_optimizer"), "); ", o.key, " = ",
             option_value(cfg, o.key), " needs it: resume with the checkpoint's options or from a checkpoint taken at a round");
}

}  // namespace fedshard::train
