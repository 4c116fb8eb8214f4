#include "train/option_space.h"

#include <algorithm>
#include <functional>
#include <sstream>

#include <torch/version.h>

#include "federation/schedule.h"
#include "kernels/float8_linear.h"
#include "util/error.h"

namespace fedshard::train {

namespace {

using Op = Cond::Op;

bool is_listed(const std::string& v, const std::vector<std::string>& options) {
  return std::find(options.begin(), options.end(), v) != options.end();
}

std::string joined(const std::vector<std::string>& v, const std::string& sep) {
  std::string out;
  for (size_t i = 0; i < v.size(); ++i) out += (i ? sep : "") + v[i];
  return out;
}

const std::vector<std::string> kUnsharded = {"ddp", "fsdp", "hsdp"};

std::string fl_only(const Combination& c) {
  return cat("federation.overlap, compress, round and normalize apply to fl-* strategies and sites only (strategy ",
             c.cfg.strategy, " has no rounds without sites.server)");
}

// A site's rounds go through the round server (DESIGN.md "Sites"): what it cannot do there.
RefusalDecl site_refusal(std::string name, std::vector<Cond> all, std::string why, std::string says) {
  RefusalDecl d;
  d.name = std::move(name);
  d.all = {{"sites.server", Op::IsNot, {""}}};
  d.all.insert(d.all.end(), all.begin(), all.end());
  d.why = why;
  d.message = [says](const Combination& c) { return cat("sites.server = ", c.cfg.server, ": ", says); };
  return d;
}

std::string held_groups(const Combination& c) {
  return cat("parallel.emulate = ", c.cfg.emulate, " holds ", c.groups_per_rank, " groups per rank, trained in turn: ",
             "federation.overlap, compress, round, normalize, eval_group_model and train.slow need one group per rank ",
             "group (run on more ranks, or drop them)");
}

}  // namespace

bool Cond::holds(const TrainConfig& cfg) const {
  const auto v = option_value(cfg, key);
  switch (op) {
    case Op::Is: return v == values.front();
    case Op::IsNot: return v != values.front();
    case Op::In: return is_listed(v, values);
    case Op::NotIn: return !is_listed(v, values);
    case Op::StartsWith: return v.rfind(values.front(), 0) == 0;
    case Op::NotStartsWith: return v.rfind(values.front(), 0) != 0;
  }
  return false;
}

std::string option_value(const TrainConfig& cfg, const std::string& key) {
  const auto dot = key.find('.');
  const auto all = cfg.to_json();
  const auto& v = all.at(key.substr(0, dot)).at(key.substr(dot + 1));
  if (v.is_string()) return v.get<std::string>();
  if (v.is_array()) {
    std::string out;
    for (const auto& e : v) out += (out.empty() ? "" : ",") + e.dump();
    return out;
  }
  return v.dump();
}

const std::vector<OptionDecl>& declared_options() {
  using R = ResumeRule;
  static const std::vector<OptionDecl> o = {
      {"parallel.strategy", "ddp | fsdp | hsdp | fl-ddp | fl-fsdp | fl-hsdp",
       {"fl-ddp", "fl-fsdp", "fl-hsdp", "fsdp", "hsdp"}, R::Layout, "yes", "As `parallel.groups`"},
      {"parallel.groups", "group sizes, e.g. 4,2,2 (or parallel.group_size)", {"2,2", "4,2"}, R::Layout, "yes",
       "Same layout and strategy: exact. Another layout: a round in flight is applied at the resume (each group's "
       "model becomes the round's global model plus its own progress since the round began; `inner_state` applied "
       "to its units), then each group continues its own checkpoint group (`train.resume_groups`: model, "
       "optimizer, send residuals, step; averaged chunks' residuals go to their new owners) or all groups merge as "
       "at a FedAvg round (size-weighted mean; that model is the new global one, residuals zero)"},
      {"federation.overlap", "none | delayed | streaming:F", {"none", "delayed", "streaming:2"},
       R::SameWithRoundInFlight, "yes, unless a round is in flight",
       "A round in flight is applied after the resume where the checkpoint's schedule put it: it needs the same "
       "overlap; from `none` between two rounds, as `parallel.reduce_dtype`",
       [](const TrainConfig& c) { return c.overlap != "none"; }},
      {"parallel.sync_every", "K >= 1", {"4"}, R::AtRound, "at a round",
       "The groups must meet at the next round; between two rounds (or with groups at different steps under step "
       "rounds) they would not"},
      {"federation.round", "steps | steps:K | seconds:T", {"steps", "seconds:0.15"}, R::AtRound, "at a round",
       "As `parallel.sync_every`; `seconds:T` to `steps:K` also needs every group at one step"},
      {"federation.compress", "none | bf16 | int8 | int4 | topk:D", {"none", "bf16", "int8", "int4", "topk:0.02"},
       R::SameWithResiduals,
       "from `none`; else no",
       "Residuals start at zero from `none` (between two rounds, as `parallel.reduce_dtype`). A checkpoint of "
       "`bf16`/`int8`/`int4`/`topk:D` holds error-feedback residuals that only the same codec can send",
       [](const TrainConfig& c) { return c.compress != "none"; }},
      {"federation.compress_block", "a positive multiple of 4 (int4: of 8; topk: at most 16384)", {"256"},
       R::SameWithResiduals, "no, under `int8`/`int4`/`topk:D`", "Their residuals are cut in the checkpoint's blocks"},
      {"federation.topk_values", "means | levels", {"means", "levels"}, R::Free, "yes",
       "How the next rounds encode their kept values; the residuals are values, not encodings (a site's server "
       "refuses a change: it is part of the federation's identity)"},
      {"federation.ef_decay", "a factor in [0, 1]", {"1", "0.9"}, R::Free, "yes",
       "A factor of the next rounds' residuals, not state"},
      {"federation.sparse_mean", "union | sparsified", {"union", "sparsified"}, R::Free,
       "yes (to `union`, the owners' residuals of the averaged chunks are dropped)",
       "The groups' own residuals carry on either way; `union` has no owner"},
      {"parallel.reduce_dtype", "float32 | bfloat16 | float64", {"float32", "bfloat16"}, R::NeedsGlobal,
       "yes, if the last global model is known",
       "Narrower than the master dtype, rounds send deltas from the last global model: the checkpoint holds it "
       "(written with compress, overlap, normalize, delta rounds or Nesterov) or is at a round",
       [](const TrainConfig& c) { return c.reduce_dtype == "bfloat16" || (c.reduce_dtype == "float32" && c.dtype == "float64"); }},
      {"federation.normalize", "none | steps", {"none", "steps"}, R::NeedsGlobal, "as `parallel.reduce_dtype`",
       "FedNova weighs deltas from the last global model", [](const TrainConfig& c) { return c.normalize != "none"; }},
      {"federation.outer_optimizer", "fedavg | nesterov", {"fedavg", "nesterov"}, R::NeedsGlobal,
       "to `fedavg`: yes; to `nesterov`: as `parallel.reduce_dtype`",
       "Nesterov's global slice is the last global model, its momentum starts at zero; from Nesterov to FedAvg "
       "the momentum is dropped",
       [](const TrainConfig& c) { return c.outer_optimizer == "nesterov"; }},
      {"federation.inner_state", "keep | average | reset", {"keep", "average", "reset"}, R::Free, "yes",
       "Applied at the next round (also to a round in flight when it finishes)"},
      {"federation.outer_lr", "> 0 (nesterov; also outer_momentum)", {"1"}, R::Free, "yes",
       "A hyperparameter of the next outer steps (also `outer_momentum`)"},
      {"federation.clock", "wall | emulated:S", {"wall", "emulated:0.05"}, R::Free, "yes",
       "Not state (also `train.slow`, `eval.*`, `network.*`)"},
      {"train.grad_accum", "A >= 1", {"1", "2"}, R::Free, "yes", "Micro-batches per step: not state"},
      {"parallel.emulate", "\"\" | W | GxS", {"", "4x2"}, R::Free, "emulated runs keep no checkpoints",
       "A rank's held groups are not in the checkpoint format"},
      {"data.partition", "iid | by-source | dirichlet:ALPHA", {"iid", "by-source", "dirichlet:0.5"}, R::Free, "yes",
       "Which windows each group reads from the resumed step on"},
      {"model.kernels", "aten | fused", {"aten", "fused"}, R::Free, "yes",
       "Not state: what computes the norms, RoPE and the SwiGLU gate (also `model.cross_entropy`)"},
      {"model.cross_entropy", "chunked | chunked:ROWS | full", {"chunked", "chunked:24", "full"}, R::Free, "yes",
       "Not state: how the head's loss is computed"},
      {"model.matmul_dtype", "compute | float8", {"compute"}, R::Free, "yes",
       "Not state: the masters and the optimizer state stay in `model.dtype`"},
      {"sites.server", "\"\" | HOST:PORT,... (a site: rounds through the round server's shards)", {""}, R::Layout,
       "as the same site on the same layout only",
       "A site's checkpoint holds its last global model and its round; resumed, the site goes on from it where the "
       "federation has not moved on, else takes the server's global model. A checkpoint of a job that was not this "
       "site is refused"},
  };
  return o;
}

const OptionDecl& declared_option(const std::string& key) {
  for (const auto& o : declared_options())
    if (o.key == key) return o;
  throw std::logic_error("undeclared option " + key);
}

const std::vector<RefusalDecl>& declared_refusals() {
  static const std::vector<RefusalDecl> r = [] {
    std::vector<RefusalDecl> v;
    for (const char* key : {"federation.overlap", "federation.compress", "federation.round", "federation.normalize"}) {
      RefusalDecl d;
      d.name = cat("fl-only:", key);
      d.all = {{"parallel.strategy", Op::In, kUnsharded}, {key, Op::IsNot, {std::string(key) == "federation.round" ? "steps" : "none"}},
               {"sites.server", Op::Is, {""}}};
      d.why = "a strategy without federation has no rounds";
      d.message = fl_only;
      v.push_back(d);
    }
    // Options of one codec's rounds, set where that codec is not used, would be silently ignored.
    for (const char* key : {"federation.topk_values", "federation.sparse_mean"}) {
      RefusalDecl d;
      d.name = cat("topk-only:", key);
      d.all = {{key, Op::IsNot, {std::string(key) == "federation.topk_values" ? "means" : "union"}},
               {"federation.compress", Op::NotStartsWith, {"topk:"}}};
      d.why = "only topk:D's rounds keep values and take a sparse mean";
      d.message = [key](const Combination& c) {
        return cat(key, " = ", option_value(c.cfg, key), " applies to federation.compress = topk:D only (it is ",
                   c.cfg.compress, ")");
      };
      v.push_back(d);
    }
    {
      RefusalDecl d;
      d.name = "compress-only:federation.ef_decay";
      d.all = {{"federation.compress", Op::Is, {"none"}}};
      d.computed = [](const Combination& c) { return c.cfg.ef_decay != 1; };
      d.computed_says = "federation.ef_decay is not 1";
      d.why = "uncompressed rounds keep no error feedback to decay";
      d.message = [](const Combination& c) {
        return cat("federation.ef_decay = ", c.cfg.ef_decay, " decays error feedback, which only compressed rounds keep ",
                   "(federation.compress = none)");
      };
      v.push_back(d);
    }
    v.push_back(site_refusal("site-in-job-groups", {{"parallel.strategy", Op::NotIn, kUnsharded}},
                             "a site is one federation group; in-job groups inside it are a second level not built yet",
                             "a site trains as one group: use ddp, fsdp or hsdp inside it (in-job federation groups "
                             "inside a site are not supported)"));
    v.push_back(site_refusal("site-outer", {{"federation.outer_optimizer", Op::IsNot, {"fedavg"}}},
                             "the round server applies the outer optimizer, once per round",
                             "the round server applies the outer optimizer (fedshard serve --outer nesterov); the "
                             "site's federation.outer_optimizer must stay fedavg"));
    v.push_back(site_refusal("site-sparse-union",
                             {{"federation.compress", Op::StartsWith, {"topk:"}}, {"federation.sparse_mean", Op::Is, {"union"}}},
                             "the round server encodes the new global model's change once for every site",
                             "the round server sends the averaged change encoded once, top-k again (set "
                             "federation.sparse_mean = sparsified); the union of the sites' changes is not built across "
                             "sites"));
    v.push_back(site_refusal("site-average", {{"federation.inner_state", Op::Is, {"average"}}},
                             "the round server averages models, not optimizer state",
                             "the round server averages models, not optimizer state: federation.inner_state = average "
                             "is not supported (use keep or reset)"));
    v.push_back(site_refusal("site-normalize", {{"federation.normalize", Op::Is, {"steps"}}},
                             "the round server weighs sites by their tokens (FedNova's steps are not sent)",
                             "the round server weighs sites by their tokens: federation.normalize = steps is not "
                             "supported"));
    v.push_back(site_refusal("site-streaming", {{"federation.overlap", Op::StartsWith, {"streaming:"}}},
                             "a site's round carries the whole model",
                             "a site's round carries the whole model: federation.overlap = streaming:F is not "
                             "supported (none or delayed)"));
    v.push_back(site_refusal("site-emulate", {{"parallel.emulate", Op::IsNot, {""}}},
                             "a site is a real job of its own", "a site is a real job: parallel.emulate is not supported"));
    v.push_back(site_refusal("site-rejoin", {{"federation.rejoin_after", Op::IsNot, {"0"}}},
                             "in-job recovery regroups in-job groups; a site is one",
                             "federation.rejoin_after applies to in-job groups; a lost site rejoins by starting its "
                             "job again"));
    {
      RefusalDecl d;
      d.name = "streaming-timed";
      d.all = {{"federation.overlap", Op::StartsWith, {"streaming:"}}, {"federation.round", Op::StartsWith, {"seconds:"}}};
      d.why = "streaming:F staggers its fragments by steps; time-based rounds close at different steps per group";
      d.message = [](const Combination& c) {
        return cat("federation.overlap = ", c.cfg.overlap, " staggers fragments by steps; it needs federation.round = steps");
      };
      v.push_back(d);
    }
    {
      RefusalDecl d;
      d.name = "streaming-K";
      d.all = {{"federation.overlap", Op::StartsWith, {"streaming:"}}};
      d.computed = [](const Combination& c) {
        return c.cfg.sync_every % federation::parse_overlap(c.cfg.overlap).fragments != 0;
      };
      d.computed_says = "parallel.sync_every is not a multiple of F";
      d.why = "each fragment's round starts every K/F steps";
      d.message = [](const Combination& c) {
        return cat("federation.overlap = ", c.cfg.overlap, " needs parallel.sync_every (", c.cfg.sync_every,
                   ") to be a multiple of the fragment count");
      };
      v.push_back(d);
    }
    {
      RefusalDecl d;
      d.name = "streaming-units";
      d.all = {{"federation.overlap", Op::StartsWith, {"streaming:"}}};
      d.at_start = true;
      d.computed = [](const Combination& c) { return federation::parse_overlap(c.cfg.overlap).fragments > c.units; };
      d.computed_says = "F exceeds the model's units";
      d.why = "every fragment needs a unit";
      d.message = [](const Combination& c) {
        return cat("federation.overlap = ", c.cfg.overlap, " needs at least as many units as fragments; the model has ",
                   c.units);
      };
      v.push_back(d);
    }
    {
      RefusalDecl d;
      d.name = "fednova-average";
      d.all = {{"federation.normalize", Op::Is, {"steps"}}, {"federation.inner_state", Op::Is, {"average"}}};
      d.why = "FedNova rescales model deltas; optimizer state has none";
      d.message = [](const Combination&) {
        return std::string("federation.normalize = steps rescales model deltas; it does not apply to "
                           "federation.inner_state = average (use keep or reset)");
      };
      v.push_back(d);
    }
    {
      RefusalDecl d;
      d.name = "clock-untimed";
      d.all = {{"federation.clock", Op::IsNot, {"wall"}}, {"federation.round", Op::NotStartsWith, {"seconds:"}}};
      d.why = "only time-based rounds read the clock";
      d.message = [](const Combination& c) {
        return cat("federation.clock = ", c.cfg.clock,
                   " measures the steps of time-based rounds; it needs federation.round = seconds:T");
      };
      v.push_back(d);
    }
    {
      RefusalDecl d;
      d.name = "nccl-overlap";
      d.all = {{"federation.overlap", Op::IsNot, {"none"}}};
      d.computed = [](const Combination& c) { return (c.started ? c.backend : c.cfg.backend) == "nccl"; };
      d.computed_says = "the backend (resolved at start-up) is nccl";
      d.why = "NCCL has no federation lane yet: a round in flight would queue on its one stream";
      d.message = [](const Combination& c) {
        return cat("federation.overlap = ", c.cfg.overlap, " needs a federation lane of its own, which the nccl backend ",
                   "does not have (a round in flight would queue on its one stream ahead of the next step's ",
                   "collectives, and compressed rounds' second halves could queue in a different order on different ",
                   "ranks); use --set parallel.backend=mpi or federation.overlap = none");
      };
      v.push_back(d);
    }
    {
      RefusalDecl d;
      d.name = "reduce-wider";
      d.all = {{"parallel.reduce_dtype", Op::Is, {"float64"}}, {"model.dtype", Op::IsNot, {"float64"}}};
      d.why = "reductions land in the master dtype";
      d.message = [](const Combination& c) {
        return cat("parallel.reduce_dtype = float64 is wider than model.dtype = ", c.cfg.dtype,
                   ": reductions land in the master dtype");
      };
      v.push_back(d);
    }
    for (const char* key : {"checkpoint.every", "train.resume"}) {
      RefusalDecl d;
      d.name = cat("emulate-checkpoints:", key);
      d.all = {{"parallel.emulate", Op::IsNot, {""}}, {key, Op::IsNot, {std::string(key) == "train.resume" ? "" : "0"}}};
      d.why = "a rank's held groups are not in the checkpoint format";
      d.message = [](const Combination& c) {
        return cat("parallel.emulate = ", c.cfg.emulate, ": emulated runs keep no checkpoints (set checkpoint.every = 0 ",
                   "and drop train.resume); the metrics hold every evaluation");
      };
      v.push_back(d);
    }
    {
      RefusalDecl d;
      d.name = "emulate-held-groups";
      d.any = {{"federation.overlap", Op::IsNot, {"none"}}, {"federation.compress", Op::IsNot, {"none"}},
               {"federation.round", Op::IsNot, {"steps"}},    {"federation.normalize", Op::IsNot, {"none"}},
               {"train.slow", Op::IsNot, {""}},               {"federation.eval_group_model", Op::Is, {"true"}}};
      d.at_start = true;
      d.computed = [](const Combination& c) { return c.groups_per_rank > 1; };
      d.computed_says = "each rank group holds several virtual groups";
      d.why = "held groups train in lockstep on one clock, in turn";
      d.message = held_groups;
      v.push_back(d);
    }
    {
      RefusalDecl d;
      d.name = "float8-compute-dtype";
      d.all = {{"model.matmul_dtype", Op::Is, {"float8"}}, {"model.compute_dtype", Op::IsNot, {"bfloat16"}}};
      d.why = "float8 stands in for bfloat16 matmuls: outputs and everything between the matmuls stay bfloat16";
      d.message = [](const Combination& c) {
        return cat("model.matmul_dtype = float8 needs model.compute_dtype = bfloat16, got ", c.cfg.compute_dtype);
      };
      v.push_back(d);
    }
    {
      RefusalDecl d;
      d.name = "float8-libtorch";
      d.all = {{"model.matmul_dtype", Op::Is, {"float8"}}};
      d.computed = [](const Combination&) { return !kernels::float8_available(); };
      d.computed_says = "this LibTorch has no `_scaled_mm` (before 2.5)";
      d.why = "the float8 matmuls are ATen's `_scaled_mm`";
      d.message = [](const Combination&) {
        return cat("model.matmul_dtype = float8 needs ATen's _scaled_mm, which this LibTorch (", TORCH_VERSION,
                   ") does not have; build against LibTorch 2.5 or later");
      };
      v.push_back(d);
    }
    {
      RefusalDecl d;
      d.name = "float8-cpu";
      d.all = {{"model.matmul_dtype", Op::Is, {"float8"}}, {"model.device", Op::Is, {"cpu"}}};
      d.why = "float8 matmuls are a GPU's (tensor cores of compute capability 8.9 and later)";
      d.message = [](const Combination&) {
        return std::string("model.matmul_dtype = float8 runs on CUDA GPUs of compute capability 8.9 or later ") +
               "(model.device = cuda); on the CPU use compute";
      };
      v.push_back(d);
    }
    {
      RefusalDecl d;
      d.name = "float8-gpu";
      d.all = {{"model.matmul_dtype", Op::Is, {"float8"}}, {"model.device", Op::Is, {"cuda"}}};
      d.at_start = true;
      d.computed = [](const Combination& c) { return c.gpu_capability < 89; };
      d.computed_says = "the GPU's compute capability is below 8.9";
      d.why = "float8 tensor cores arrived with Ada (8.9) and Hopper (9.0)";
      d.message = [](const Combination& c) {
        return cat("model.matmul_dtype = float8 needs a GPU of compute capability 8.9 or later; this rank's has ",
                   c.gpu_capability / 10, ".", c.gpu_capability % 10);
      };
      v.push_back(d);
    }
    {
      RefusalDecl d;
      d.name = "rejoin-relaxed-rounds";
      d.all = {{"federation.rejoin_after", Op::IsNot, {"0"}}};
      d.any = {{"federation.overlap", Op::IsNot, {"none"}}, {"federation.compress", Op::IsNot, {"none"}}};
      d.why = "not yet covered: a joining group is sent a rank's state between rounds, where an overlapped round is "
              "still in flight, and compressed rounds' residuals are dealt by segment";
      d.message = [](const Combination& c) {
        return cat("federation.rejoin_after = ", c.cfg.rejoin_after, " is not covered with federation.overlap = ",
                   c.cfg.overlap, " and federation.compress = ", c.cfg.compress, " (set both to none, or "
                   "federation.rejoin_after = 0)");
      };
      v.push_back(d);
    }
    {
      RefusalDecl d;
      d.name = "rejoin-unequal-groups";
      d.all = {{"federation.rejoin_after", Op::IsNot, {"0"}}};
      d.computed = [](const Combination& c) {
        const auto& g = c.cfg.groups;
        return std::adjacent_find(g.begin(), g.end(), std::not_equal_to<>()) != g.end();
      };
      d.computed_says = "the groups differ in size";
      d.why = "not yet covered: a replacement takes the state of the rank at its position in the first group, whose "
              "shard is of another size where the groups differ";
      d.message = [](const Combination& c) {
        return cat("federation.rejoin_after = ", c.cfg.rejoin_after, " is not covered with groups of different sizes ",
                   "(parallel.groups = ", option_value(c.cfg, "parallel.groups"), "; set federation.rejoin_after = 0)");
      };
      v.push_back(d);
    }
    {
      RefusalDecl d;
      d.name = "rejoin-outside-recovery";
      d.all = {{"federation.rejoin_after", Op::IsNot, {"0"}}};
      d.at_start = true;
      d.computed = [](const Combination& c) { return !c.in_job_recovery; };
      d.computed_says = "in-job recovery does not cover the job";
      d.why = "only groups that went on without a lost group can take it back";
      d.message = [](const Combination& c) {
        const RuleDecl* why = nullptr;
        recovered_in_job(c, &why);
        return cat("federation.rejoin_after = ", c.cfg.rejoin_after, " needs in-job recovery, which does not cover ",
                   "this job (", why ? why->name + ": " + why->why : std::string("?"), ")");
      };
      v.push_back(d);
    }
    return v;
  }();
  return r;
}

const std::vector<RuleDecl>& declared_unrecovered() {
  static const std::vector<RuleDecl> r = [] {
    std::vector<RuleDecl> v;
    const auto rule = [&v](const std::string& name, std::vector<Cond> all, const std::string& why) {
      RuleDecl d;
      d.name = name;
      d.all = std::move(all);
      d.why = why;
      v.push_back(d);
    };
    const auto started = [&v](const std::string& name, std::function<bool(const Combination&)> computed,
                              const std::string& says, const std::string& why) {
      RuleDecl d;
      d.name = name;
      d.at_start = true;
      d.computed = std::move(computed);
      d.computed_says = says;
      d.why = why;
      v.push_back(d);
    };
    rule("unfederated", {{"parallel.strategy", Op::In, kUnsharded}},
         "one group: a lost rank takes shards that no other rank holds, and no group is left to go on");
    started("emulated", [](const Combination& c) { return c.emulated; }, "parallel.emulate holds several groups or "
            "ranks per rank", "a real rank stands for several: its loss is theirs, and emulated runs keep no "
            "checkpoints to go on from");
    started("nccl", [](const Combination& c) { return c.backend == "nccl"; }, "the backend (resolved at start-up) is nccl",
            "NCCL has no fault tolerance: a lost peer leaves the others inside a kernel, which only ending the "
            "process leaves");
    return v;
  }();
  return r;
}

bool recovered_in_job(const Combination& c, const RuleDecl** why) {
  for (const auto& r : declared_unrecovered())
    if (r.holds(c)) {
      if (why) *why = &r;
      return false;
    }
  return true;
}

bool RuleDecl::holds(const Combination& c) const {
  if (at_start && !c.started) return false;
  for (const auto& cond : all)
    if (!cond.holds(c.cfg)) return false;
  if (!any.empty() && std::none_of(any.begin(), any.end(), [&](const Cond& cond) { return cond.holds(c.cfg); }))
    return false;
  return !computed || computed(c);
}

void check_options(const Combination& c) {
  for (const auto& r : declared_refusals()) FS_CHECK(!r.holds(c), r.message(c));
}

namespace {

const char* op_name(Op op) {
  switch (op) {
    case Op::Is: return "is";
    case Op::IsNot: return "is not";
    case Op::In: return "in";
    case Op::NotIn: return "not in";
    case Op::StartsWith: return "starts with";
    case Op::NotStartsWith: return "does not start with";
  }
  return "";
}

const char* rule_name(ResumeRule r) {
  switch (r) {
    case ResumeRule::Free: return "free";
    case ResumeRule::Layout: return "layout";
    case ResumeRule::SameWithRoundInFlight: return "same-with-round-in-flight";
    case ResumeRule::AtRound: return "at-round";
    case ResumeRule::SameWithResiduals: return "same-with-residuals";
    case ResumeRule::NeedsGlobal: return "needs-global";
  }
  return "";
}

std::string cond_text(const Cond& c) {
  if (c.values.size() == 1 && c.values.front().empty() && (c.op == Op::Is || c.op == Op::IsNot))
    return "`" + c.key + (c.op == Op::Is ? "` is unset" : "` is set");
  std::vector<std::string> quoted;
  for (const auto& v : c.values) quoted.push_back("`" + v + "`");
  return "`" + c.key + "` " + op_name(c.op) + " " + joined(quoted, ", ");
}

}  // namespace

namespace {

nlohmann::json rule_json(const RuleDecl& r) {
  auto conds = [](const std::vector<Cond>& cs) {
    nlohmann::json out = nlohmann::json::array();
    for (const auto& c : cs) out.push_back({{"key", c.key}, {"op", op_name(c.op)}, {"values", c.values}});
    return out;
  };
  return {{"name", r.name},          {"all", conds(r.all)},     {"any", conds(r.any)},
          {"computed", r.computed ? r.computed_says : ""}, {"at_start", r.at_start}, {"why", r.why}};
}

// A rule's table row.
std::string rule_row(const RuleDecl& r) {
  std::vector<std::string> parts;
  for (const auto& c : r.all) parts.push_back(cond_text(c));
  if (!r.any.empty()) {
    std::vector<std::string> any;
    for (const auto& c : r.any) any.push_back(cond_text(c));
    parts.push_back("one of: " + joined(any, "; "));
  }
  if (r.computed) parts.push_back(r.computed_says + (r.at_start ? " (at start-up)" : ""));
  return "| " + joined(parts, " and ") + " | " + r.why + " |\n";
}

}  // namespace

nlohmann::json option_space_json() {
  nlohmann::json j;
  for (const auto& o : declared_options())
    j["options"].push_back({{"key", o.key}, {"values", o.values}, {"levels", o.levels},
                            {"resume", rule_name(o.resume)}, {"resume_allowed", o.resume_allowed}});
  for (const auto& r : declared_refusals()) j["refusals"].push_back(rule_json(r));
  for (const auto& r : declared_unrecovered()) j["in_job_recovery"]["not_when"].push_back(rule_json(r));
  return j;
}

std::string option_space_markdown() {
  std::ostringstream os;
  os << "### Refused combinations\n\n| refused when | why |\n|---|---|\n";
  for (const auto& r : declared_refusals()) os << rule_row(r);
  os << "\n### What a resume may change\n\n| option | change allowed | how the state is derived, or why refused |\n"
     << "|---|---|---|\n";
  for (const auto& o : declared_options())
    os << "| `" << o.key << "` | " << o.resume_allowed << " | " << o.resume_how << " |\n";
  os << "\n### Not recovered in the job\n\nA lost rank ends these jobs (every rank, within seconds, one error line "
     << "naming it); resume them from the last checkpoint. Every other federated job goes on without the lost "
     << "rank's group.\n\n| not recovered when | why |\n|---|---|\n";
  for (const auto& r : declared_unrecovered()) os << rule_row(r);
  return os.str();
}

}  // namespace fedshard::train
