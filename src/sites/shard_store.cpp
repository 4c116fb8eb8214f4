#include "sites/shard_store.h"

#include <filesystem>

#include "util/error.h"
#include "util/posix_file.h"
#include "util/safetensors.h"

namespace fedshard::sites {

namespace fs = std::filesystem;

namespace {

nlohmann::json sites_json(const std::vector<SiteTokens>& sites) {
  auto j = nlohmann::json::array();
  for (const auto& s : sites) j.push_back({{"site", s.site}, {"tokens", s.tokens}});
  return j;
}

std::vector<SiteTokens> sites_of(const nlohmann::json& j) {
  std::vector<SiteTokens> out;
  for (const auto& s : j) out.push_back({s.at("site").get<std::string>(), s.at("tokens").get<double>()});
  return out;
}

}  // namespace

ShardStore::ShardStore(std::string dir, int shard, int shards) : dir_(std::move(dir)), shard_(shard), shards_(shards) {
  ensure_writable_dir(dir_);
  const auto path = (fs::path(dir_) / "identity.json").string();
  if (!fs::exists(path)) return;
  try {
    const auto j = nlohmann::json::parse(read_file(path));
    FS_CHECK(j.at("shard") == shard_ && j.at("shards") == shards_, "it holds shard ", j.at("shard").dump(), "/",
             j.at("shards").dump(), ", not ", shard_, "/", shards_);
  } catch (const Error& e) {
    throw Error(cat(path, ": ", e.what()));
  } catch (const std::exception& e) {
    throw Error(cat(path, ": not a shard's identity file (", e.what(), ")"));
  }
}

std::optional<Identity> ShardStore::identity() const {
  const auto path = (fs::path(dir_) / "identity.json").string();
  if (!fs::exists(path)) return std::nullopt;
  try {
    return Identity::from_json(nlohmann::json::parse(read_file(path)).at("identity"));
  } catch (const Error& e) {
    throw Error(cat(path, ": ", e.what()));
  } catch (const std::exception& e) {
    throw Error(cat(path, ": not a shard's identity file (", e.what(), ")"));
  }
}

void ShardStore::pin(const Identity& identity) {
  write_file_atomically((fs::path(dir_) / "identity.json").string(),
                        nlohmann::json{{"identity", identity.to_json()}, {"shard", shard_}, {"shards", shards_}}.dump(1) +
                            "\n");
}

std::optional<ShardSnapshot> ShardStore::load(const std::string& name) const {
  const auto path = (fs::path(dir_) / name).string();
  if (!fs::exists(path)) return std::nullopt;
  const SafetensorsFile f(path);
  ShardSnapshot s;
  try {
    const auto& meta = f.metadata();
    s.round = std::stoll(meta.at("round"));
    s.attempt = static_cast<uint32_t>(std::stoul(meta.at("attempt")));
    s.participants = sites_of(nlohmann::json::parse(meta.at("participants")));
  } catch (const std::exception& e) {
    throw Error(cat(path, ": malformed round metadata (", e.what(), ")"));
  }
  s.global = f.tensor("global");
  if (f.contains("down_residual")) s.down_residual = f.tensor("down_residual");
  if (f.contains("down_delta")) s.down_delta = f.tensor("down_delta");
  for (const auto& [key, entry] : f.entries())
    if (key.rfind("outer.", 0) == 0) s.outer[key.substr(6)] = f.tensor(key);
  return s;
}

std::optional<ShardSnapshot> ShardStore::committed() const { return load("committed.safetensors"); }
std::optional<ShardSnapshot> ShardStore::prepared() const { return load("prepared.safetensors"); }

void ShardStore::prepare(const ShardSnapshot& s) {
  std::vector<std::pair<std::string, at::Tensor>> tensors{{"global", s.global.contiguous()}};
  if (s.down_residual.defined()) tensors.emplace_back("down_residual", s.down_residual.contiguous());
  if (s.down_delta.defined()) tensors.emplace_back("down_delta", s.down_delta.contiguous());
  for (const auto& [name, t] : s.outer) tensors.emplace_back("outer." + name, t.contiguous());
  write_safetensors((fs::path(dir_) / "prepared.safetensors").string(), tensors,
                    {{"round", std::to_string(s.round)},
                     {"attempt", std::to_string(s.attempt)},
                     {"participants", sites_json(s.participants).dump()}});
}

void ShardStore::commit_prepared() {
  rename_file((fs::path(dir_) / "prepared.safetensors").string(), (fs::path(dir_) / "committed.safetensors").string());
  sync_dir(dir_);
}

void ShardStore::drop_prepared() {
  std::error_code ec;
  fs::remove(fs::path(dir_) / "prepared.safetensors", ec);
}

}  // namespace fedshard::sites
