#include "train/checkpoint.h"

#include <ATen/core/grad_mode.h>
#include <ATen/CPUGeneratorImpl.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <set>

#include "comm/mpi_runtime.h"
#include "train/engine.h"
#include "util/error.h"
#include "util/hex.h"
#include "util/posix_file.h"
#include "util/safetensors.h"

namespace fedshard::train {

namespace fs = std::filesystem;

namespace {

constexpr const char* kFormat = "fedshard-checkpoint";
constexpr int kVersion = 1;

std::string step_dir_name(int64_t step) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "step-%08lld", static_cast<long long>(step));
  return buf;
}

std::string rank_file_name(int rank) {
  char buf[40];
  std::snprintf(buf, sizeof buf, "rank-%05d.safetensors", rank);
  return buf;
}

// Every architecture field, so a checkpoint describes its model without the preset table.
nlohmann::json model_json(const model::ModelConfig& c) {
  nlohmann::json j = {{"name", c.name},
                      {"dim", c.dim},
                      {"n_layers", c.n_layers},
                      {"n_heads", c.n_heads},
                      {"n_kv_heads", c.n_kv_heads},
                      {"vocab_size", c.vocab_size},
                      {"multiple_of", c.multiple_of},
                      {"ffn_dim_multiplier", c.ffn_dim_multiplier ? nlohmann::json(*c.ffn_dim_multiplier) : nullptr},
                      {"ffn_hidden", c.ffn_hidden},
                      {"norm_eps", c.norm_eps},
                      {"rope_theta", c.rope_theta},
                      {"max_seq_len", c.max_seq_len},
                      {"tie_embeddings", c.tie_embeddings}};
  if (c.rope_scaling)
    j["rope_scaling"] = {{"factor", c.rope_scaling->factor},
                         {"low_freq_factor", c.rope_scaling->low_freq_factor},
                         {"high_freq_factor", c.rope_scaling->high_freq_factor},
                         {"original_max_position", c.rope_scaling->original_max_position}};
  else
    j["rope_scaling"] = nullptr;
  return j;
}

model::ModelConfig model_from_json(const nlohmann::json& j) {
  model::ModelConfig c;
  c.name = j.at("name");
  c.dim = j.at("dim");
  c.n_layers = j.at("n_layers");
  c.n_heads = j.at("n_heads");
  c.n_kv_heads = j.at("n_kv_heads");
  c.vocab_size = j.at("vocab_size");
  c.multiple_of = j.at("multiple_of");
  if (!j.at("ffn_dim_multiplier").is_null()) c.ffn_dim_multiplier = j.at("ffn_dim_multiplier").get<double>();
  c.ffn_hidden = j.value("ffn_hidden", int64_t{0});  // absent before HF configs could set it
  c.norm_eps = j.at("norm_eps");
  c.rope_theta = j.at("rope_theta");
  c.max_seq_len = j.at("max_seq_len");
  c.tie_embeddings = j.at("tie_embeddings");
  if (!j.at("rope_scaling").is_null()) {
    const auto& r = j.at("rope_scaling");
    c.rope_scaling = model::RopeScaling{r.at("factor"), r.at("low_freq_factor"), r.at("high_freq_factor"),
                                        r.at("original_max_position")};
  }
  c.validate();
  return c;
}

// A state tensor's name in a rank file: its unit, then its key within the unit (train/rank_state.h).
std::string unit_key(size_t u, const std::string& key) { return "u" + std::to_string(u) + "." + key; }
std::string fed_key(const std::string& name) { return state_key(StatePart::Federation, name); }

}  // namespace

std::vector<UnitLayout> unit_layout(const model::ModelConfig& cfg) {
  model::Llama shapes(cfg, at::kFloat, /*materialize=*/false);
  std::vector<UnitLayout> out;
  for (const auto& slots : parallel::group_units(shapes).slots) {
    UnitLayout u;
    for (const auto& s : slots) {
      parallel::FlatEntry e{s.name, s.shape, u.numel, 1};
      for (int64_t d : s.shape) e.numel *= d;
      u.numel += e.numel;
      u.entries.push_back(e);
    }
    out.push_back(u);
  }
  return out;
}

std::optional<std::string> find_checkpoint(const std::string& spec, const std::string& run_dir) {
  if (spec != "auto") {
    FS_CHECK(fs::is_regular_file(fs::path(spec) / "meta.json"), "--resume ", spec,
             ": not a checkpoint directory (no meta.json)");
    return spec;
  }
  const fs::path latest = fs::path(run_dir) / "checkpoints" / "latest";
  if (!fs::exists(latest)) return std::nullopt;
  std::string name = read_file(latest.string());
  while (!name.empty() && (name.back() == '\n' || name.back() == ' ')) name.pop_back();
  const fs::path dir = fs::path(run_dir) / "checkpoints" / name;
  FS_CHECK(!name.empty() && name.find('/') == std::string::npos && fs::is_directory(dir), latest.string(),
           " names '", name, "', which is not a checkpoint directory");
  return dir.string();
}

namespace {

// meta.json's fields (Errors and the library's exceptions propagate: load_checkpoint_meta names the file).
void read_meta_fields(const nlohmann::json& j, const std::string& meta_path, CheckpointMeta& m) {
  FS_CHECK(j.at("format") == kFormat && j.at("version") == kVersion, meta_path, ": not a ", kFormat, " v", kVersion,
           " file");
  m.step = j.at("step");
  const auto& t = j.at("topology");
  try {
    // Checkpoints before groups of different sizes record only equal groups: world / group_size of them.
    m.layout = t.contains("groups") ? comm::Layout(t.at("groups").get<std::vector<int>>(), t.at("shard_size"),
                                                   t.value("pad_multiple", int64_t{0}))
                                    : comm::Layout::uniform(t.at("world"), t.at("group_size"), t.at("shard_size"));
  } catch (const Error& e) {
    throw Error(cat(meta_path, ": impossible topology (", e.what(), ")"));
  }
  m.strategy = t.at("strategy");
  m.optimizer_steps = j.at("optimizer").at("steps");
  if (j.contains("tokens")) {
    m.tokens = j.at("tokens");
  } else {  // checkpoints before this field: a constant world of the checkpoint's layout
    const auto& data = j.at("config").at("data");
    m.tokens = m.step * m.layout.world() * data.at("batch_size").get<int64_t>() * data.at("seq_len").get<int64_t>();
  }
  const auto& fed = j.at("federation");
  m.outer = fed.value("outer", "");
  m.syncs = fed.value("syncs", 0);
  m.steps_since_sync = fed.value("steps_since_sync", 0);
  m.round_in_flight = fed.value("round_in_flight", std::vector<size_t>{});
  m.group_steps = fed.value("group_steps", std::vector<int64_t>{});
  m.pending_rounds = fed.value("pending_rounds", std::vector<bool>{});
  m.tokenizer = j.value("tokenizer", "");
  for (int g = 0; g < m.layout.groups(); ++g) m.group_ids.push_back(g);
  if (fed.contains("group_ids")) {
    m.group_ids = fed.at("group_ids").get<std::vector<int>>();
    FS_CHECK(static_cast<int>(m.group_ids.size()) == m.layout.groups(), meta_path, ": ", m.group_ids.size(),
             " group ids for ", m.layout.groups(), " groups");
  }
  m.config = j.at("config");
  for (const auto& u : j.at("units")) m.padded.push_back(u.at("padded_numel"));
  for (const auto& r : j.at("ranks")) {
    CheckpointRank cr;
    cr.rank = r.at("rank");
    cr.group = r.at("group");
    cr.position = r.at("position");
    cr.file = r.at("file");
    const auto sum = parse_hex64(r.at("checksum").get<std::string>());
    FS_CHECK(sum.has_value(), meta_path, ": rank ", cr.rank, " has a malformed checksum");
    cr.checksum = *sum;
    cr.shard = r.at("shard").get<std::vector<std::pair<int64_t, int64_t>>>();
    cr.slice = r.at("slice").get<std::vector<std::pair<int64_t, int64_t>>>();
    m.ranks.push_back(cr);
  }
}

// The checkpoint's architecture is the one being trained, and its unit layout the one this model produces.
void check_meta_model(const nlohmann::json& j, const std::string& meta_path, const model::ModelConfig& model,
                      const CheckpointMeta& m) {
  const auto want = model_json(model);
  for (const auto& [k, v] : want.items())
    // ffn_hidden is absent from checkpoints written before HF configs could set it.
    FS_CHECK(j.at("model").value(k, k == "ffn_hidden" ? nlohmann::json(0) : nlohmann::json()) == v, meta_path,
             ": checkpoint model has ", k, " = ", j.at("model").at(k).dump(), ", the configured model has ", v.dump());
  const auto layout = unit_layout(model);
  const auto& units = j.at("units");
  FS_CHECK(units.size() == layout.size(), meta_path, ": ", units.size(), " units, the model has ", layout.size());
  for (size_t u = 0; u < layout.size(); ++u) {
    FS_CHECK(units[u].at("numel") == layout[u].numel, meta_path, ": unit ", u, " has ", units[u].at("numel").dump(),
             " parameters, the model's has ", layout[u].numel);
    FS_CHECK(m.padded[u] >= layout[u].numel && m.padded[u] % m.layout.pad_multiple() == 0, meta_path, ": unit ", u,
             " padding does not fit the topology");
  }
  FS_CHECK(static_cast<int>(m.ranks.size()) == m.layout.world(), meta_path, ": lists ", m.ranks.size(),
           " rank files for ", m.layout.world(), " ranks");
  for (size_t r = 0; r < m.ranks.size(); ++r)
    FS_CHECK(m.ranks[r].rank == static_cast<int>(r) && m.ranks[r].shard.size() == layout.size() &&
                 m.ranks[r].slice.size() == layout.size() && m.ranks[r].file == rank_file_name(static_cast<int>(r)),
             meta_path, ": rank entry ", r, " is inconsistent");
}

}  // namespace

CheckpointMeta load_checkpoint_meta(const std::string& dir, const model::ModelConfig& model, bool verify_all_files,
                                    int verify_rank) {
  const std::string meta_path = (fs::path(dir) / "meta.json").string();
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(read_file(meta_path));
  } catch (const Error&) {
    throw;
  } catch (const std::exception& e) {
    throw Error(cat(meta_path, ": not valid JSON (", e.what(), ")"));
  }
  CheckpointMeta m;
  m.dir = dir;
  try {
    read_meta_fields(j, meta_path, m);
    check_meta_model(j, meta_path, model, m);
  } catch (const Error&) {
    throw;
  } catch (const std::exception& e) {
    throw Error(cat(meta_path, ": malformed checkpoint metadata (", e.what(), ")"));
  }
  for (const auto& r : m.ranks) {
    const std::string path = (fs::path(dir) / r.file).string();
    FS_CHECK(fs::is_regular_file(path), "checkpoint file ", path, " is missing");
    if (verify_all_files || r.rank == verify_rank)
      FS_CHECK(file_checksum(path) == r.checksum, "checkpoint file ", path,
               " is corrupt (checksum differs from meta.json)");
  }
  return m;
}

bool same_layout(const CheckpointMeta& meta, const comm::Layout& layout, const std::string& strategy) {
  return meta.layout == layout && meta.strategy == strategy;
}

namespace {

// Collective over `world`: every rank gets root's error flag (a control scalar where the communicators work).
bool any_failed_at(comm::Communicator& world, bool failed, int root, const at::TensorOptions& on_device) {
  auto status = at::full({1}, failed ? 1L : 0L, on_device);
  world.broadcast(status, root, comm::Traffic::Control)->wait();
  return status.to(at::kCPU).item<int64_t>() != 0;
}

// Step 1: rank 0 makes an empty temporary directory.
std::string make_temporary_dir(const fs::path& root, const fs::path& tmp) {
  try {
    std::error_code ec;
    fs::create_directories(root, ec);
    FS_CHECK(!ec, "cannot create ", root.string(), ": ", ec.message());
    fs::remove_all(tmp, ec);
    fs::create_directory(tmp, ec);
    FS_CHECK(!ec, "cannot create ", tmp.string(), ": ", ec.message());
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

// Step 2: this rank's file (train/rank_state.h), with the schedule's counters, the optimizer's step counts per slice
// (the run's are meta.json's) and the RNG; returns its checksum. A round in flight is waited for and saved with its
// outcome: it is applied after the resume where it would have been without the checkpoint.
uint64_t write_rank_file(const fs::path& file, const TrainingState& state, parallel::ShardedModel& sharded,
                         optim::Optimizer& inner, federation::Lane* lane, const Faults& faults) {
  if (lane) lane->settle();
  std::vector<std::pair<std::string, at::Tensor>> tensors;
  const auto rank = rank_state(sharded, inner, lane);
  for (const auto& s : rank.tensors)
    tensors.emplace_back(unit_key(s.unit, s.key()), s.tensor.detach().to(at::kCPU).contiguous());
  const auto& slice_steps = rank.counts.slice_steps;
  tensors.emplace_back("schedule", at::tensor({static_cast<double>(state.steps_since_sync), state.round_time}, at::kDouble));
  tensors.emplace_back("opt.slice_steps", at::tensor(std::vector<int64_t>(slice_steps.begin(), slice_steps.end()), at::kLong));
  tensors.emplace_back("rng.cpu", at::detail::getDefaultCPUGenerator().get_state());
  const uint64_t checksum = write_safetensors(file.string(), tensors, {{"step", std::to_string(state.step)}});
  faults.at(FaultPoint::Checkpoint, state.step);
  return checksum;
}

nlohmann::json meta_json(const TrainingState& state, const nlohmann::json& config, const model::ModelConfig& model,
                         const comm::Layout& layout, parallel::ShardedModel& sharded, optim::Optimizer& inner,
                         federation::Lane* lane, const at::Tensor& checksums) {
  nlohmann::json meta = {{"format", kFormat}, {"version", kVersion}, {"step", state.step},
                         {"tokens", state.tokens}, {"config", config},
                         {"model", model_json(model)}, {"tokenizer", state.tokenizer}};
  meta["topology"] = {{"world", layout.world()},
                      {"groups", layout.group_sizes()},
                      {"shard_size", layout.shard_spec()},
                      {"pad_multiple", layout.pad_multiple()},
                      {"strategy", config["resolved"]["strategy"]}};
  meta["optimizer"] = {{"name", config["optim"]["name"]}, {"steps", inner.steps()}};
  meta["federation"] = lane ? nlohmann::json{{"outer", config["federation"]["outer_optimizer"]},
                                            {"syncs", state.syncs},
                                            {"group_ids", state.group_ids},
                                            {"steps_since_sync", state.steps_since_sync},
                                            {"round_in_flight", lane->round_units()},
                                            {"group_steps", state.group_steps},
                                            {"pending_rounds", state.pending_rounds}}
                           : nlohmann::json::object();
  const auto units = unit_layout(model);
  for (size_t u = 0; u < units.size(); ++u) {
    nlohmann::json entries = nlohmann::json::array();
    for (const auto& e : units[u].entries)
      entries.push_back({{"name", e.name}, {"shape", e.shape}, {"offset", e.offset}, {"numel", e.numel}});
    meta["units"].push_back({{"numel", units[u].numel},
                             {"padded_numel", sharded.units()[u]->flat().padded_numel()},
                             {"entries", entries}});
  }
  for (int r = 0; r < layout.world(); ++r) {
    nlohmann::json shard = nlohmann::json::array(), slice = nlohmann::json::array();
    for (const auto& u : sharded.units()) {
      const int64_t padded = u->flat().padded_numel();
      shard.push_back(layout.shard_range(padded, r));
      slice.push_back(layout.slice_range(padded, r));
    }
    const auto c = layout.coords(r);
    meta["ranks"].push_back({{"rank", r},
                             {"group", c.group},
                             {"position", c.position},
                             {"file", rank_file_name(r)},
                             {"checksum", hex64(static_cast<uint64_t>(checksums[2 * r].item<int64_t>()))},
                             {"shard", shard},
                             {"slice", slice}});
  }
  return meta;
}

// Step 4: rank 0 publishes: meta.json, the directory renamed into place, `latest`, the oldest pruned.
void publish(const fs::path& root, const fs::path& tmp, const std::string& name, int keep, const nlohmann::json& meta) {
  write_file_atomically((tmp / "meta.json").string(), meta.dump(1) + "\n");
  const fs::path final_dir = root / name;
  std::error_code ec;
  // A checkpoint of this step already there (written again after a lost group) is swapped out whole.
  replace_dir(tmp.string(), final_dir.string());
  sync_dir(root.string());
  write_file_atomically((root / "latest").string(), name + "\n");
  // Keep the newest `keep` complete checkpoints.
  std::vector<std::string> steps;
  for (const auto& e : fs::directory_iterator(root))
    if (e.is_directory() && e.path().filename().string().rfind("step-", 0) == 0)
      steps.push_back(e.path().filename().string());
  std::sort(steps.begin(), steps.end());
  for (size_t i = 0; i + static_cast<size_t>(keep) < steps.size(); ++i)
    if (steps[i] != name) fs::remove_all(root / steps[i], ec);
}

}  // namespace

void save_checkpoint(const std::string& run_dir, int keep, const TrainingState& state, const nlohmann::json& config,
                     const model::ModelConfig& model, comm::Topology& topo, parallel::ShardedModel& sharded,
                     optim::Optimizer& inner, federation::Lane* lane, const Faults& faults) {
  at::NoGradGuard no_grad;
  auto& world = topo.world();
  const int rank = topo.world_rank();
  const fs::path root = fs::path(run_dir) / "checkpoints";
  const std::string name = step_dir_name(state.step);
  const fs::path tmp = root / (".tmp-" + name);
  // Control scalars live where the communicators work (the GPU under NCCL).
  const auto on_device = at::TensorOptions().dtype(at::kLong).device(sharded.options().device);

  // 1. Rank 0 prepares an empty temporary directory; any failure is shared before anyone writes.
  std::string error = rank == 0 ? make_temporary_dir(root, tmp) : "";
  const bool not_made = any_failed_at(world, !error.empty(), 0, on_device);
  // 2. Every rank writes its own file.
  uint64_t checksum = 0;
  if (!not_made) {
    try {
      checksum = write_rank_file(tmp / rank_file_name(rank), state, sharded, inner, lane, faults);
    } catch (const Error& e) {
      error = e.what();
    }
  }
  // 3. Everyone learns every rank's checksum and status.
  auto mine = at::tensor({static_cast<int64_t>(checksum), error.empty() ? 0L : 1L}, at::kLong).to(on_device);
  auto all = at::empty({2 * world.size()}, on_device);
  world.all_gather(mine, all, comm::Traffic::Control)->wait();
  all = all.to(at::kCPU);
  int first_failed = -1;
  for (int r = 0; r < world.size() && first_failed < 0; ++r)
    if (all[2 * r + 1].item<int64_t>() != 0) first_failed = r;
  if (not_made) first_failed = 0;
  // 4. Rank 0 publishes.
  if (first_failed < 0 && rank == 0) {
    try {
      publish(root, tmp, name, keep, meta_json(state, config, model, topo.layout(), sharded, inner, lane, all));
    } catch (const Error& e) {
      error = e.what();
      first_failed = 0;
    }
  }
  auto published = at::full({1}, static_cast<int64_t>(first_failed), on_device);
  world.broadcast(published, 0, comm::Traffic::Control)->wait();
  first_failed = static_cast<int>(published.item<int64_t>());
  if (first_failed < 0) return;
  if (rank == 0) {
    std::error_code ec;
    fs::remove_all(tmp, ec);
  }
  auto latest = find_checkpoint("auto", run_dir);
  throw Error(cat("checkpoint at step ", state.step, " failed: ", rank == first_failed ? error : "see rank " + std::to_string(first_failed),
                  latest ? "; the previous checkpoint " + *latest + " is intact" : ""))
      .reported_by(rank == first_failed)
      .everywhere(true);
}

}  // namespace fedshard::train

namespace fedshard::train {

namespace {

// Reads the rank files of a checkpoint on demand (headers parsed once).
class RankFiles {
 public:
  explicit RankFiles(const CheckpointMeta& m) : m_(m) {}
  const SafetensorsFile& get(int rank) {
    auto& f = files_[rank];
    if (!f) f = std::make_unique<SafetensorsFile>((fs::path(m_.dir) / m_.ranks[rank].file).string());
    return *f;
  }

 private:
  const CheckpointMeta& m_;
  std::map<int, std::unique_ptr<SafetensorsFile>> files_;
};

// The padded flat of tensor `what` of unit u as group g stored it: shards of the ranks of replica 0 (or, for
// outer state, every rank's slice), placed at their ranges.
at::Tensor assemble(RankFiles& files, const CheckpointMeta& m, size_t u, const std::string& what, int group,
                    bool slices) {
  at::Tensor full;
  for (const auto& r : m.ranks) {
    if (r.group != group || (!slices && m.layout.coords(r.rank).replica != 0)) continue;
    const auto& f = files.get(r.rank);
    const std::string key = unit_key(u, what);
    if (!f.contains(key)) return at::Tensor();
    auto part = f.tensor(key);
    if (!full.defined()) full = at::zeros({m.padded[u]}, part.options());
    const auto [a, b] = slices ? r.slice[u] : r.shard[u];
    FS_CHECK(part.numel() == b - a, f.path(), ": ", key, " has ", part.numel(), " elements, meta.json says ", b - a);
    full.narrow(0, a, b - a).copy_(part);
  }
  return full;
}

// Mean over the checkpoint's groups weighted by their sizes, i.e. by the tokens each trained on since the
// last round (the FedAvg model of a mid-round checkpoint; exact for one group).
at::Tensor assemble_mean(RankFiles& files, const CheckpointMeta& m, size_t u, const std::string& what) {
  at::Tensor sum;
  for (int g = 0; g < m.layout.groups(); ++g) {
    auto t = assemble(files, m, u, what, g, false);
    if (!t.defined()) return t;
    t = t * (static_cast<double>(m.layout.group_size(g)) / m.layout.world());
    sum = sum.defined() ? sum + t : t;
  }
  return sum;
}

// Copies the unpadded prefix of an old padded flat into a tensor covering [begin, end) of the new padding.
void cut(const at::Tensor& old_full, int64_t numel, int64_t begin, at::Tensor dst) {
  dst.zero_();
  const int64_t hi = std::min(begin + dst.numel(), numel);
  if (hi > begin) dst.narrow(0, 0, hi - begin).copy_(old_full.narrow(0, begin, hi - begin));
}

// A state tensor the checkpoint does not hold (written without overlap, compression or an outer optimizer that
// this run has): its value, or an undefined tensor to leave it as the new engine made it (zero). The last global
// slice is the outer optimizer's, else the model's (the resume contract, train/resume_contract.h, refuses the
// resumes where the model is not the global one); residuals stay zero.
at::Tensor missing_state(const StateTensor& s, const SafetensorsFile& f, const comm::Topology& topo,
                         parallel::FlatParam& flat, federation::Lane& lane, const std::string& inner_state) {
  const auto [a, b] = topo.layout().slice_range(flat.padded_numel(), topo.world_rank());
  const auto model_slice = [&, a = a, b = b] { return flat.shard().detach().narrow(0, a - flat.shard_offset(), b - a); };
  const auto outer = lane.outer_state()[s.unit];
  // An outer optimizer the checkpoint did not have (FedAvg to Nesterov, which the resume contract allows where the
  // last global model is known): its global slice is that model, its momentum zero.
  if (s.is(StatePart::Outer, "global")) {
    const auto global = unit_key(s.unit, fed_key("global"));
    return f.contains(global) ? f.tensor(global) : model_slice();
  }
  if (s.part == StatePart::Outer) return at::zeros_like(s.tensor);
  if (s.is(StatePart::Federation, "global")) return outer.count("global") ? outer.at("global") : model_slice();
  if (s.is(StatePart::Federation, "residual") || s.is(StatePart::Federation, "mean_residual")) return at::Tensor();
  // Checkpoints before round_scale was saved: only inner_state = average reads it.
  if (s.is(StatePart::Federation, "round_scale") && inner_state != "average") return at::Tensor();
  throw Error(cat("checkpoint has a federation round in flight without its '", s.name, "' of unit ", s.unit));
}

// The round schedule's counters as `rank` saved them (checkpoints before they were saved per rank: meta's).
void restore_schedule(RankFiles& files, const CheckpointMeta& m, int rank, TrainingState& st) {
  const auto& f = files.get(rank);
  st.steps_since_sync = m.steps_since_sync;
  if (!f.contains("schedule")) return;
  const auto t = f.tensor("schedule").to(at::kDouble);
  st.steps_since_sync = static_cast<int64_t>(t[0].item<double>());
  st.round_time = t[1].item<double>();
}

// This rank's optimizer step counts per slice as `rank` saved them (checkpoints before they were saved: the
// run's count for every slice).
std::vector<int64_t> saved_slice_steps(RankFiles& files, const CheckpointMeta& m, int rank, size_t slices) {
  const auto& f = files.get(rank);
  if (!f.contains("opt.slice_steps")) return std::vector<int64_t>(slices, m.optimizer_steps);
  const auto t = f.tensor("opt.slice_steps").to(at::kLong).contiguous();
  FS_CHECK(static_cast<size_t>(t.numel()) == slices, f.path(), ": opt.slice_steps has ", t.numel(),
           " entries for ", slices, " units");
  return std::vector<int64_t>(t.data_ptr<int64_t>(), t.data_ptr<int64_t>() + t.numel());
}

int first_rank_of(const CheckpointMeta& m, int group) {
  for (const auto& r : m.ranks)
    if (r.group == group) return r.rank;
  throw Error(cat(m.dir, ": no rank of group ", group));
}


// The same layout: every rank restores exactly its own state from its own file.
void restore_own_file(RankFiles& files, const CheckpointMeta& meta, comm::Topology& topo,
                      parallel::ShardedModel& sharded, optim::Optimizer& inner, federation::Lane* lane,
                      TrainingState& st) {
  const int rank = topo.world_rank();
  const auto& f = files.get(rank);
  if (lane) lane->restore_round(meta.round_in_flight);
  for (const auto& s : rank_state(sharded, inner, lane).tensors) {
    const auto key = unit_key(s.unit, s.key());
    // The model and the inner optimizer's state are always there (f.tensor names the file and key if not).
    if (f.contains(key) || s.part == StatePart::Param || s.part == StatePart::Inner) {
      set_state(s, f.tensor(key), lane);
      continue;
    }
    const auto* agg = dynamic_cast<federation::Aggregator*>(lane);
    const auto value = missing_state(s, f, topo, sharded.units()[s.unit]->flat(), *lane,
                                     agg ? agg->options().inner_state : "keep");
    if (value.defined()) set_state(s, value, lane);
  }
  inner.set_slice_steps(saved_slice_steps(files, meta, rank, sharded.units().size()));
  // The default generator is shared process state: ATen hands out a const handle to it.
  auto gen = at::detail::getDefaultCPUGenerator();
  gen.set_state(f.tensor("rng.cpu"));
  restore_schedule(files, meta, rank, st);
  const auto g = static_cast<size_t>(topo.coords().group);
  if (!meta.group_steps.empty()) st.step = meta.group_steps.at(g);
  st.pending_round = !meta.pending_rounds.empty() && meta.pending_rounds.at(g);
}

// Another layout: each unit of the checkpoint reassembled (one group's, or the groups' mean) and this rank's
// shard and slice cut out of it (restore_checkpoint in checkpoint.h says what is taken from where).
class Reslice {
 public:
  Reslice(RankFiles& files, const CheckpointMeta& meta, comm::Topology& topo, parallel::ShardedModel& sharded,
          federation::Lane* lane, const std::vector<int>& continues)
      : files_(files), m_(meta), topo_(topo), sharded_(sharded), lane_(lane),
        agg_(dynamic_cast<federation::Aggregator*>(lane)), layout_(unit_layout(sharded.config())),
        own_(continues.empty() ? -1 : continues.at(topo.coords().group)), source_(std::max(own_, 0)),
        in_round_(meta.round_in_flight.begin(), meta.round_in_flight.end()),
        inner_state_(agg_ ? agg_->options().inner_state : meta.config.at("federation").value("inner_state", "keep")) {}

  int own() const { return own_; }
  int source() const { return source_; }
  // Units whose inner state the round in flight resets (federation.inner_state = reset).
  std::vector<size_t> reset_units() const {
    std::vector<size_t> out;
    for (size_t u : in_round_)
      if (inner_state_ == "reset") out.push_back(u);
    return out;
  }

  // This rank's new value of s, or undefined to leave it (zero; a merge starts without residuals: its model is the
  // global one, nothing is left unsent).
  at::Tensor value(const StateTensor& s) {
    const size_t u = s.unit;
    auto& flat = sharded_.units()[u]->flat();
    if (s.part == StatePart::Param) {
      const auto p = own_ < 0 ? weighted([&](int g) { return group_param(u, g); }, size_share()) : group_param(u, own_);
      return cut(p, u, flat.shard_offset(), s.tensor);
    }
    if (s.part == StatePart::Inner) return cut(inner_moment(u, s.key()), u, flat.shard_offset(), s.tensor);
    const auto [begin, end] = topo_.layout().slice_range(flat.padded_numel(), topo_.world_rank());
    if (s.part == StatePart::Outer) {
      auto old = assemble(files_, m_, u, s.key(), source_, true);
      if (s.name == "global" && (own_ < 0 || !old.defined())) return my_slice(flat, begin, end);  // a merge
      return cut(old, u, begin, s.tensor);
    }
    if (s.is(StatePart::Federation, "global")) {
      // A merged model is the new global one; a continuing group keeps the last (the round's, if applied).
      auto old = own_ < 0 ? at::Tensor()
                          : assemble(files_, m_, u, fed_key(in_round_.count(u) ? "round_global" : "global"), source_, true);
      if (old.defined()) return cut(old, u, begin, at::empty({end - begin}, old.options()));
      const auto outer = lane_->outer_state()[u];
      return own_ >= 0 && outer.count("global") ? outer.at("global").clone() : my_slice(flat, begin, end);
    }
    if (own_ >= 0 && s.is(StatePart::Federation, "residual")) {
      auto old = assemble(files_, m_, u, s.key(), own_, true);
      return old.defined() ? cut(old, u, begin, at::empty({end - begin}, old.options())) : old;
    }
    if (own_ >= 0 && s.is(StatePart::Federation, "mean_residual")) {
      // Each chunk's residual is held by its owner in one group: their sum is the whole field.
      auto old = weighted([&](int g) { return assemble(files_, m_, u, s.key(), g, true); },
                          [](int) { return 1.0; });
      return old.defined() ? agg_->owned_part(u, cut(old, u, begin, at::empty({end - begin}, old.options()))) : old;
    }
    return at::Tensor();
  }

 private:
  // A checkpoint group's parameters with the round in flight applied: global + (own - slice at begin).
  at::Tensor group_param(size_t u, int g) {
    auto p = assemble(files_, m_, u, state_key(StatePart::Param), g, false);
    if (in_round_.count(u))
      p = p + assemble(files_, m_, u, fed_key("round_global"), g, true) -
          assemble(files_, m_, u, fed_key("round_sent"), g, true);
    return p;
  }
  // An inner optimizer moment: the own group's, or averaged as the round in flight's inner_state would (a merge
  // averages anyway).
  at::Tensor inner_moment(size_t u, const std::string& key) {
    const bool average = own_ < 0 || (in_round_.count(u) && inner_state_ == "average");
    if (!average) return assemble(files_, m_, u, key, own_, false);
    const auto of_group = [&](int g) { return assemble(files_, m_, u, key, g, false); };
    if (own_ < 0) return weighted(of_group, size_share());
    return weighted(of_group, [this, u](int g) {
      return files_.get(first_rank_of(m_, g)).tensor(unit_key(u, fed_key("round_scale"))).to(at::kDouble).item<double>();
    });
  }
  at::Tensor weighted(const std::function<at::Tensor(int)>& of_group, const std::function<double(int)>& weight) {
    at::Tensor sum;
    for (int g = 0; g < m_.layout.groups(); ++g) {
      auto t = of_group(g);
      if (!t.defined()) return t;
      t = t * weight(g);
      sum = sum.defined() ? sum + t : t;
    }
    return sum;
  }
  std::function<double(int)> size_share() const {
    return [this](int g) { return static_cast<double>(m_.layout.group_size(g)) / m_.layout.world(); };
  }
  // The unpadded prefix of an old padded flat, from `begin` of the new padding, into dst (zero where none);
  // undefined where the checkpoint has none.
  at::Tensor cut(const at::Tensor& old, size_t u, int64_t begin, at::Tensor dst) const {
    if (!old.defined()) return old;
    auto out = at::empty_like(dst);
    fedshard::train::cut(old, layout_[u].numel, begin, out);
    return out;
  }
  static at::Tensor my_slice(parallel::FlatParam& flat, int64_t begin, int64_t end) {
    return flat.shard().detach().narrow(0, begin - flat.shard_offset(), end - begin).clone();
  }

  RankFiles& files_;
  const CheckpointMeta& m_;
  comm::Topology& topo_;
  parallel::ShardedModel& sharded_;
  federation::Lane* lane_;
  federation::Aggregator* agg_;  // the in-job lane (a site resumes on its own layout only)
  std::vector<UnitLayout> layout_;
  int own_, source_;  // the checkpoint group this one continues (-1: a merge); whose outer state it takes
  std::set<size_t> in_round_;
  std::string inner_state_;
};

}  // namespace

TrainingState restore_checkpoint(const CheckpointMeta& meta, comm::Topology& topo, const std::string& strategy,
                                 parallel::ShardedModel& sharded, optim::Optimizer& inner, federation::Lane* lane,
                                 const std::vector<int>& continues) {
  at::NoGradGuard no_grad;
  RankFiles files(meta);
  TrainingState st;
  st.step = meta.step;
  st.tokens = meta.tokens;
  st.syncs = meta.syncs;
  inner.set_steps(meta.optimizer_steps);
  if (same_layout(meta, topo.layout(), strategy)) {
    restore_own_file(files, meta, topo, sharded, inner, lane, st);
    return st;
  }
  FS_CHECK(!lane || dynamic_cast<federation::Aggregator*>(lane), "a site resumes on the layout of its checkpoint only");
  Reslice reslice(files, meta, topo, sharded, lane, continues);
  if (lane) lane->restore_round({});
  for (const auto& s : rank_state(sharded, inner, lane).tensors) {
    const auto value = reslice.value(s);
    if (value.defined())
      set_state(s, value, lane);
    else if (s.part != StatePart::Federation)
      s.tensor.zero_();
  }
  const int own = reslice.own(), steps_from = first_rank_of(meta, reslice.source());
  inner.set_slice_steps(saved_slice_steps(files, meta, steps_from, sharded.units().size()));
  inner.reset_state(reslice.reset_units());
  // Groups that continue their own models stay mid-round at their own step; merged ones start a round.
  if (own >= 0) restore_schedule(files, meta, steps_from, st);
  if (own >= 0 && !meta.group_steps.empty()) st.step = meta.group_steps.at(static_cast<size_t>(own));
  st.pending_round = own >= 0 && !meta.pending_rounds.empty() && meta.pending_rounds.at(static_cast<size_t>(own));
  return st;
}

model::ModelConfig checkpoint_model(const std::string& dir) {
  const std::string path = (fs::path(dir) / "meta.json").string();
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(read_file(path));
  } catch (const Error&) {
    throw;
  } catch (const std::exception& e) {
    throw Error(cat(path, ": not valid JSON (", e.what(), ")"));
  }
  try {
    return model_from_json(j.at("model"));
  } catch (const Error& e) {
    throw Error(cat(path, ": ", e.what()));
  } catch (const std::exception& e) {
    throw Error(cat(path, ": no usable model description (", e.what(), ")"));
  }
}

std::map<std::string, at::Tensor> consolidated_parameters(const CheckpointMeta& meta) {
  at::NoGradGuard no_grad;
  RankFiles files(meta);
  std::map<std::string, at::Tensor> out;
  const auto layout = unit_layout(checkpoint_model(meta.dir));
  for (size_t u = 0; u < layout.size(); ++u) {
    const auto full = assemble_mean(files, meta, u, state_key(StatePart::Param));
    for (const auto& e : layout[u].entries) out[e.name] = full.narrow(0, e.offset, e.numel).view(e.shape).clone();
  }
  return out;
}

}  // namespace fedshard::train
