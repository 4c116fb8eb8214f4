// The options that shape training state, declared once: each option's values, the levels the pairwise harness
// draws (tests/pairwise.py), how a resume may change it, and the combinations that are refused and why. The
// config validator and the start-up checks (check_options), the resume contract (train/resume_contract.cpp),
// `fedshard options` (docs/federation.md's tables are its --markdown output, checked by tests/docs_tables.sh)
// and the harness (its --json output) all read this declaration; no other list of these refusals exists.
#pragma once

#include <nlohmann/json.hpp>

#include <functional>
#include <string>
#include <vector>

#include "train/config.h"

namespace fedshard::train {

// A combination being checked: the configuration and, from start-up on (prepare_training), what only the job
// knows. Rules that read the start-up facts are checked then; the others already when the config is read.
struct Combination {
  explicit Combination(const TrainConfig& c) : cfg(c) {}
  const TrainConfig& cfg;
  bool started = false;     // the facts below are known
  std::string backend;      // parallel.backend resolved (auto: nccl for cuda in a CUDA build, else mpi)
  int units = 0;            // the model's units (embedding, each block, norm + head)
  int groups_per_rank = 1;  // parallel.emulate: virtual groups each real rank group holds
  bool emulated = false;    // parallel.emulate: virtual groups or virtual ranks (parallel/emulation.h: active)
  bool in_job_recovery = false;  // a lost group leaves and the others go on (recovered_in_job)
  int gpu_capability = 0;        // model.device = cuda: the rank's GPU's compute capability, major * 10 + minor
};

// How a resume may change an option (docs/federation.md, "Resuming with other options").
enum class ResumeRule {
  Free,                 // not state: any change
  Layout,               // re-sliced, per group or merged (train/checkpoint.h)
  SameWithRoundInFlight,  // a round in flight needs the checkpoint's value
  AtRound,              // when rounds happen: changed only where every group is at one round
  SameWithResiduals,    // error-feedback residuals need the checkpoint's codec
  NeedsGlobal,          // some values read the last global model: known, or every group at a round
};

struct OptionDecl {
  std::string key;                  // "federation.overlap"
  std::string values;               // as the docs say them
  std::vector<std::string> levels;  // what the pairwise harness draws ("" = the option left unset)
  ResumeRule resume;
  std::string resume_allowed;       // the contract table's second column
  std::string resume_how;           // and its third
  // Whether this option's value in cfg makes the rounds read the last global model (a delta's base), which a
  // resume between two rounds needs the checkpoint to hold; null: never.
  std::function<bool(const TrainConfig&)> reads_global = nullptr;
};

// A condition on one option's value, as data: the harness evaluates the same conditions.
struct Cond {
  enum class Op { Is, IsNot, In, NotIn, StartsWith, NotStartsWith };
  std::string key;
  Op op;
  std::vector<std::string> values;
  bool holds(const TrainConfig& cfg) const;
};

// A rule on combinations: it holds where every `all` condition holds, at least one `any` condition (if there are
// any) holds, and `computed` (arithmetic or start-up facts; null: none) says so.
struct RuleDecl {
  std::string name;  // a short id, for tables
  std::vector<Cond> all, any;
  std::function<bool(const Combination&)> computed;
  bool at_start = false;  // `computed` reads start-up facts
  std::string computed_says;  // `computed`, in words (tables)
  std::string why;            // the docs table's reason
  // Before start-up (c.started false) a rule that reads start-up facts does not hold.
  bool holds(const Combination& c) const;
};

// A refused combination, and its error line.
struct RefusalDecl : RuleDecl {
  std::function<std::string(const Combination&)> message;
};

const std::vector<OptionDecl>& declared_options();
const std::vector<RefusalDecl>& declared_refusals();
// The federated combinations that in-job recovery does not cover, and why: where one holds, a lost rank ends the
// job (comm/failure_watch.h) and the job is resumed from its last checkpoint.
const std::vector<RuleDecl>& declared_unrecovered();
// Whether a lost group leaves and the others go on in the job (c.started: the start-up facts are known); the
// first unrecovered rule that holds, in `why` (may be null).
bool recovered_in_job(const Combination& c, const RuleDecl** why = nullptr);
const OptionDecl& declared_option(const std::string& key);

// The value of `key` in cfg as the declaration compares it (numbers in decimal, lists comma-joined).
std::string option_value(const TrainConfig& cfg, const std::string& key);

// Throws fedshard::Error with the first refused combination's line: before start-up (c.started false) the
// rules that need no start-up facts, after it all of them.
void check_options(const Combination& c);

// `fedshard options --json` and `--markdown` (the tables of docs/federation.md).
nlohmann::json option_space_json();
std::string option_space_markdown();

}  // namespace fedshard::train
