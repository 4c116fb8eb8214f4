#include "data/manifest.h"

#include <algorithm>
#include <filesystem>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>
#include <utility>

#include "data/shard_file.h"
#include "util/error.h"
#include "util/hex.h"
#include "util/posix_file.h"

namespace fedshard::data {
namespace {

namespace fs = std::filesystem;
using OrderedJson = nlohmann::ordered_json;

constexpr const char* kSplits[] = {"train", "val"};

// Typed field access with errors that name the file and the field's path ("shards[3].tokens").
class ManifestJson {
 public:
  explicit ManifestJson(std::string file) : file_(std::move(file)) {}

  [[noreturn]] void fail(const std::string& what) const { throw Error(cat(file_, ": ", what)); }

  const OrderedJson& field(const OrderedJson& obj, const std::string& at, const char* key) const {
    if (!obj.is_object()) fail(cat("\"", at, "\" must be an object"));
    const auto it = obj.find(key);
    if (it == obj.end()) fail(cat("missing field \"", join(at, key), "\""));
    return *it;
  }

  std::string string(const OrderedJson& obj, const std::string& at, const char* key) const {
    const OrderedJson& v = field(obj, at, key);
    if (!v.is_string()) fail(cat("field \"", join(at, key), "\" must be a string"));
    return v.get<std::string>();
  }

  uint64_t unsigned_int(const OrderedJson& obj, const std::string& at, const char* key, uint64_t max) const {
    const OrderedJson& v = field(obj, at, key);
    if (!v.is_number_unsigned() || v.get<uint64_t>() > max)
      fail(cat("field \"", join(at, key), "\" must be an integer in [0, ", max, "]"));
    return v.get<uint64_t>();
  }

  double number(const OrderedJson& obj, const std::string& at, const char* key) const {
    const OrderedJson& v = field(obj, at, key);
    if (!v.is_number()) fail(cat("field \"", join(at, key), "\" must be a number"));
    return v.get<double>();
  }

  uint64_t hex(const OrderedJson& obj, const std::string& at, const char* key) const {
    const auto v = parse_hex64(string(obj, at, key));
    if (!v) fail(cat("field \"", join(at, key), "\" must be 16 hex digits"));
    return *v;
  }

 private:
  static std::string join(const std::string& at, const char* key) { return at.empty() ? key : at + "." + key; }

  std::string file_;
};

constexpr auto kMaxU32 = std::numeric_limits<uint32_t>::max();
constexpr auto kMaxI64 = static_cast<uint64_t>(std::numeric_limits<int64_t>::max());

TokenizerKind parse_kind(const ManifestJson& r, const std::string& name) {
  for (auto kind : {TokenizerKind::Bytes, TokenizerKind::Tiktoken, TokenizerKind::HuggingFace, TokenizerKind::SentencePiece})
    if (tokenizer_kind_name(kind) == name) return kind;
  r.fail(cat("unknown tokenizer kind \"", name, "\""));
}

// A shard file must name a file inside the corpus directory, nothing else.
bool plain_file_name(const std::string& name) {
  return !name.empty() && name != "." && name != ".." && name.find('/') == std::string::npos;
}

}  // namespace

SplitTotals Manifest::totals(const std::string& split) const {
  SplitTotals t;
  for (const auto& s : shards) {
    if (s.split != split) continue;
    ++t.shards;
    t.documents += s.documents;
    t.tokens += s.tokens;
  }
  return t;
}

void Manifest::save(const std::string& dir) const {
  OrderedJson j;
  j["format"] = kFormat;
  j["version"] = kVersion;
  j["tokenizer"] = {{"spec", tokenizer.spec},
                    {"kind", tokenizer_kind_name(tokenizer.kind)},
                    {"vocab_size", tokenizer.vocab_size},
                    {"bos", tokenizer.bos},
                    {"eos", tokenizer.eos},
                    {"fingerprint", hex64(tokenizer.fingerprint)}};
  j["seed"] = seed;
  j["val_fraction"] = val_fraction;
  j["sources"] = sources;
  j["shards"] = OrderedJson::array();
  for (const auto& s : shards) {
    j["shards"].push_back({{"file", s.file},
                           {"split", s.split},
                           {"source", s.source},
                           {"tokens", s.tokens},
                           {"documents", s.documents},
                           {"checksum", hex64(s.checksum)}});
  }
  for (const char* split : kSplits) {
    const SplitTotals t = totals(split);
    j["totals"][split] = {{"shards", t.shards}, {"documents", t.documents}, {"tokens", t.tokens}};
  }
  j["baseline"]["unigram_val_ppl"] = unigram_val_ppl ? OrderedJson(*unigram_val_ppl) : OrderedJson(nullptr);
  write_file_atomically((fs::path(dir) / kFileName).string(), j.dump(2) + "\n");
}

namespace {

TokenizerInfo read_tokenizer(const ManifestJson& r, const OrderedJson& j) {
  const OrderedJson& tok = r.field(j, "", "tokenizer");
  TokenizerInfo t;
  t.spec = r.string(tok, "tokenizer", "spec");
  t.kind = parse_kind(r, r.string(tok, "tokenizer", "kind"));
  t.vocab_size = static_cast<uint32_t>(r.unsigned_int(tok, "tokenizer", "vocab_size", kMaxU32));
  t.bos = static_cast<uint32_t>(r.unsigned_int(tok, "tokenizer", "bos", kMaxU32));
  t.eos = static_cast<uint32_t>(r.unsigned_int(tok, "tokenizer", "eos", kMaxU32));
  t.fingerprint = r.hex(tok, "tokenizer", "fingerprint");
  if (t.bos >= t.vocab_size || t.eos >= t.vocab_size)
    r.fail(cat("tokenizer bos/eos ", t.bos, "/", t.eos, " outside vocab ", t.vocab_size));
  return t;
}

std::vector<ShardEntry> read_shards(const ManifestJson& r, const OrderedJson& j, const std::vector<std::string>& sources) {
  const OrderedJson& shards = r.field(j, "", "shards");
  if (!shards.is_array()) r.fail("field \"shards\" must be an array");
  std::vector<ShardEntry> out;
  std::set<std::string> files;
  for (size_t i = 0; i < shards.size(); ++i) {
    const std::string at = cat("shards[", i, "]");
    ShardEntry s;
    s.file = r.string(shards[i], at, "file");
    s.split = r.string(shards[i], at, "split");
    s.source = r.string(shards[i], at, "source");
    s.tokens = static_cast<int64_t>(r.unsigned_int(shards[i], at, "tokens", kMaxI64));
    s.documents = static_cast<int64_t>(r.unsigned_int(shards[i], at, "documents", kMaxI64));
    s.checksum = r.hex(shards[i], at, "checksum");
    if (!plain_file_name(s.file)) r.fail(cat(at, ".file \"", s.file, "\" is not a plain file name"));
    if (!files.insert(s.file).second) r.fail(cat(at, ".file \"", s.file, "\" is listed twice"));
    if (s.split != "train" && s.split != "val") r.fail(cat(at, ".split \"", s.split, "\" is not train or val"));
    if (!std::binary_search(sources.begin(), sources.end(), s.source))
      r.fail(cat(at, ".source \"", s.source, "\" is not in sources"));
    out.push_back(std::move(s));
  }
  return out;
}

// Totals are redundant (for people reading the file); disagreement means the file was edited or damaged.
void check_totals(const ManifestJson& r, const OrderedJson& j, const Manifest& m) {
  const OrderedJson& totals = r.field(j, "", "totals");
  for (const char* split : kSplits) {
    const std::string at = cat("totals.", split);
    const OrderedJson& t = r.field(totals, "totals", split);
    const SplitTotals sum = m.totals(split);
    const std::pair<const char*, int64_t> fields[] = {
        {"shards", sum.shards}, {"documents", sum.documents}, {"tokens", sum.tokens}};
    for (const auto& [key, expected] : fields) {
      const uint64_t listed = r.unsigned_int(t, at, key, kMaxI64);
      if (listed != static_cast<uint64_t>(expected))
        r.fail(cat(at, ".", key, " is ", listed, " but the shards add up to ", expected));
    }
  }
}

}  // namespace

Manifest Manifest::load(const std::string& dir) {
  const std::string file = (fs::path(dir) / kFileName).string();
  std::error_code ec;
  FS_CHECK(fs::is_regular_file(file, ec), "no ", kFileName, " in ", dir, " (run fedshard prepare first)");
  const ManifestJson r(file);
  OrderedJson j;
  try {
    j = OrderedJson::parse(read_file(file));
  } catch (const OrderedJson::exception& e) {  // a syntax error, or a number no double holds (out_of_range)
    r.fail(cat("not valid JSON: ", e.what()));
  }

  if (!j.is_object() || !j.contains("format") || j["format"] != kFormat)
    r.fail(cat("not a fedshard token manifest (expected \"format\": \"", kFormat, "\")"));
  const uint64_t version = r.unsigned_int(j, "", "version", kMaxU32);
  if (version != kVersion) r.fail(cat("manifest version ", version, ", this build reads version ", kVersion));

  Manifest m;
  m.tokenizer = read_tokenizer(r, j);
  m.seed = r.unsigned_int(j, "", "seed", std::numeric_limits<uint64_t>::max());
  m.val_fraction = r.number(j, "", "val_fraction");
  if (!(m.val_fraction >= 0 && m.val_fraction < 1)) r.fail(cat("val_fraction ", m.val_fraction, " not in [0, 1)"));

  const OrderedJson& sources = r.field(j, "", "sources");
  if (!sources.is_array()) r.fail("field \"sources\" must be an array");
  for (size_t i = 0; i < sources.size(); ++i) {
    if (!sources[i].is_string() || sources[i].get<std::string>().empty())
      r.fail(cat("sources[", i, "] must be a non-empty string"));
    m.sources.push_back(sources[i].get<std::string>());
    if (i > 0 && !(m.sources[i - 1] < m.sources[i])) r.fail("sources must be sorted and unique");
  }
  m.shards = read_shards(r, j, m.sources);
  check_totals(r, j, m);

  const OrderedJson& baseline = r.field(j, "", "baseline");
  if (!r.field(baseline, "baseline", "unigram_val_ppl").is_null())
    m.unigram_val_ppl = r.number(baseline, "baseline", "unigram_val_ppl");
  return m;
}

}  // namespace fedshard::data
