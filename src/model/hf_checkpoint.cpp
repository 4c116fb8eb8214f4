#include "model/hf_checkpoint.h"

#include <cstdio>
#include <filesystem>
#include <set>

#include "model/llama.h"
#include "util/error.h"
#include "util/posix_file.h"

namespace fedshard::model {

namespace fs = std::filesystem;

namespace {

constexpr const char* kSingle = "model.safetensors";
constexpr const char* kIndex = "model.safetensors.index.json";

nlohmann::json parse_json_file(const std::string& path, const nlohmann::json::parser_callback_t& cb = nullptr) {
  const auto text = read_file(path);
  try {
    return nlohmann::json::parse(text, cb);
  } catch (const Error&) {
    throw;
  } catch (const std::exception& e) {
    throw Error(cat(path, ": not valid JSON (", e.what(), ")"));
  }
}

// weight_map of the index, refusing a tensor named twice (a JSON parser would silently keep the last).
std::map<std::string, std::string> read_weight_map(const std::string& path) {
  std::string top_key;
  std::set<std::string> seen;
  const auto index = parse_json_file(path, [&](int depth, nlohmann::json::parse_event_t event, nlohmann::json& j) {
    if (event != nlohmann::json::parse_event_t::key) return true;
    if (depth == 1) top_key = j.get<std::string>();
    if (depth == 2 && top_key == "weight_map")
      FS_CHECK(seen.insert(j.get<std::string>()).second, path, ": weight_map names tensor '", j.get<std::string>(),
               "' twice");
    return true;
  });
  FS_CHECK(index.is_object() && index.contains("weight_map") && index["weight_map"].is_object(), path,
           ": no 'weight_map' object");
  std::map<std::string, std::string> out;
  for (const auto& [tensor, file] : index["weight_map"].items()) {
    FS_CHECK(file.is_string(), path, ": weight_map entry of '", tensor, "' is not a file name");
    const auto name = file.get<std::string>();
    FS_CHECK(!name.empty() && name.find('/') == std::string::npos && name != "." && name != "..", path,
             ": weight_map puts tensor '", tensor, "' in '", name, "', which is not a file in this directory");
    out[tensor] = name;
  }
  return out;
}

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

bool float_dtype(const std::string& d) { return d == "F32" || d == "F16" || d == "BF16" || d == "F64"; }

std::string shape_text(const std::vector<int64_t>& s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + "]";
}

at::ScalarType scalar_type(const std::string& dtype) {
  if (dtype == "float32") return at::kFloat;
  if (dtype == "bfloat16") return at::kBFloat16;
  FS_CHECK(dtype == "float16", "export dtype must be float32, bfloat16 or float16, got '", dtype, "'");
  return at::kHalf;
}

}  // namespace

bool is_hf_dir(const std::string& dir) {
  return fs::exists(fs::path(dir) / "config.json") &&
         (fs::exists(fs::path(dir) / kSingle) || fs::exists(fs::path(dir) / kIndex));
}

std::string HfCheckpoint::config_path() const { return (fs::path(dir_) / "config.json").string(); }

HfCheckpoint::HfCheckpoint(const std::string& dir) : dir_(dir) {
  const auto config = parse_json_file(config_path());
  cfg_ = model_from_hf_config(config, config_path(), "hf:" + dir);
  try {
    ids_ = hf_token_ids(config);
  } catch (const Error& e) {
    throw Error(cat(config_path(), ": ", e.what()));
  }

  // Which file holds each HF tensor, and that the files hold exactly those.
  std::map<std::string, const SafetensorsFile*> file_of;
  const auto index_path = (fs::path(dir) / kIndex).string();
  if (fs::exists(index_path)) {
    std::map<std::string, const SafetensorsFile*> opened;
    for (const auto& [tensor, name] : read_weight_map(index_path)) {
      if (!opened.count(name)) {
        const auto path = (fs::path(dir) / name).string();
        FS_CHECK(fs::exists(path), index_path, ": shard '", name, "' (holding '", tensor, "') does not exist");
        files_.push_back(std::make_unique<SafetensorsFile>(path));
        opened[name] = files_.back().get();
      }
      const auto* f = opened[name];
      FS_CHECK(f->contains(tensor), f->path(), ": no tensor '", tensor, "', which ", kIndex, " puts in this shard");
      file_of[tensor] = f;
    }
    for (const auto& f : files_)
      for (const auto& [tensor, e] : f->entries()) {
        FS_CHECK(file_of.count(tensor), f->path(), ": tensor '", tensor, "' is not in ", kIndex);
        FS_CHECK(file_of.at(tensor) == f.get(), f->path(), ": tensor '", tensor, "' is also in ",
                 file_of.at(tensor)->path(), " (", kIndex, " names one)");
      }
  } else {
    const auto path = (fs::path(dir) / kSingle).string();
    FS_CHECK(fs::exists(path), dir, ": no ", kSingle, " and no ", kIndex);
    files_.push_back(std::make_unique<SafetensorsFile>(path));
    for (const auto& [tensor, e] : files_.back()->entries()) file_of[tensor] = files_.back().get();
  }

  for (const auto& [hf_name, f] : file_of) {
    // Older exports store RoPE's inverse frequencies, which are computed from config.json, not learned.
    if (ends_with(hf_name, ".rotary_emb.inv_freq")) continue;
    FS_CHECK(!ends_with(hf_name, ".bias"), f->path(), ": tensor '", hf_name, "' is a bias; fedshard's Llama has none");
    FS_CHECK(!(cfg_.tie_embeddings && hf_name == "lm_head.weight"), f->path(),
             ": tensor 'lm_head.weight' is present but config.json ties it to the embedding (tie_word_embeddings)");
    std::string name;
    try {
      name = from_hf_name(hf_name);
    } catch (const Error& e) {
      throw Error(cat(f->path(), ": ", e.what()));
    }
    where_[name] = {f, hf_name};
  }
  const Llama shapes(cfg_, at::kFloat, /*materialize=*/false);
  for (const auto& p : shapes.named_parameters()) {
    const auto hf_name = to_hf_name(p.name);
    auto it = where_.find(p.name);
    FS_CHECK(it != where_.end(), dir, ": no tensor '", hf_name, "' in ", files_.size() == 1 ? files_[0]->path() : kIndex);
    const auto& e = it->second.file->entries().at(hf_name);
    FS_CHECK(e.shape == p.shape, it->second.file->path(), ": tensor '", hf_name, "' has shape ", shape_text(e.shape),
             ", config.json needs ", shape_text(p.shape));
    FS_CHECK(float_dtype(e.dtype), it->second.file->path(), ": tensor '", hf_name, "' has dtype ", e.dtype,
             " (F32, F16, BF16 or F64 expected)");
  }
  for (const auto& [name, loc] : where_) {
    bool known = false;
    for (const auto& p : shapes.named_parameters()) known = known || p.name == name;
    FS_CHECK(known, loc.file->path(), ": tensor '", loc.hf_name, "' is not part of the model config.json describes (",
             cfg_.n_layers, " layers)");
  }
}

void HfCheckpoint::read(const std::string& name, int64_t begin, at::Tensor dst) const {
  const auto& loc = where_.at(name);
  dst.copy_(loc.file->read_range(loc.hf_name, begin, dst.numel()).view(dst.sizes()));
}

std::vector<std::string> write_hf_checkpoint(const std::string& dir, const ModelConfig& cfg,
                                             const std::function<at::Tensor(const std::string&)>& fetch,
                                             const std::string& dtype, int64_t max_shard_bytes,
                                             const nlohmann::json& config, const nlohmann::json& generation_config) {
  const auto type = scalar_type(dtype);
  const int64_t elem = static_cast<int64_t>(c10::elementSize(type));
  const auto params = Llama(cfg, type, /*materialize=*/false).named_parameters();
  // save_pretrained's rule: fill a shard in order until the next tensor would exceed the limit (a tensor
  // larger than the limit gets a shard of its own).
  std::vector<std::vector<size_t>> shards(1);
  int64_t in_shard = 0, total = 0, count = 0;
  for (size_t i = 0; i < params.size(); ++i) {
    int64_t numel = 1;
    for (int64_t d : params[i].shape) numel *= d;
    const int64_t bytes = numel * elem;
    if (!shards.back().empty() && in_shard + bytes > max_shard_bytes) {
      shards.emplace_back();
      in_shard = 0;
    }
    shards.back().push_back(i);
    in_shard += bytes;
    total += bytes;
    count += numel;
  }
  ensure_writable_dir(dir);
  std::vector<std::string> written;
  nlohmann::json weight_map = nlohmann::json::object();
  for (size_t s = 0; s < shards.size(); ++s) {
    char name[64];
    std::snprintf(name, sizeof name, "model-%05zu-of-%05zu.safetensors", s + 1, shards.size());
    const std::string file = shards.size() == 1 ? kSingle : name;
    std::vector<std::pair<std::string, at::Tensor>> tensors;
    for (size_t i : shards[s]) {
      const auto t = fetch(params[i].name);
      FS_ASSERT(t.sizes().vec() == params[i].shape, "export: parameter ", params[i].name, " has the wrong shape");
      tensors.emplace_back(to_hf_name(params[i].name), t.to(type).contiguous());
      weight_map[tensors.back().first] = file;
    }
    write_safetensors((fs::path(dir) / file).string(), tensors, {{"format", "pt"}});
    written.push_back(file);
  }
  if (shards.size() > 1)
    write_file_atomically((fs::path(dir) / kIndex).string(),
                          nlohmann::json{{"metadata", {{"total_size", total}, {"total_parameters", count}}},
                                         {"weight_map", weight_map}}
                                  .dump(2) + "\n");
  write_file_atomically((fs::path(dir) / "config.json").string(), config.dump(2) + "\n");
  write_file_atomically((fs::path(dir) / "generation_config.json").string(), generation_config.dump(2) + "\n");
  // Weights of an earlier export into this directory would contradict the new index (or its absence).
  const std::set<std::string> keep(written.begin(), written.end());
  for (const auto& entry : fs::directory_iterator(dir)) {
    const auto n = entry.path().filename().string();
    const bool weights = n == kSingle || n == kIndex || (n.rfind("model-", 0) == 0 && ends_with(n, ".safetensors"));
    if (weights && !keep.count(n) && !(n == kIndex && shards.size() > 1)) fs::remove(entry.path());
  }
  return written;
}

}  // namespace fedshard::model
