#include "data/hf_tokenizer.h"

#include <limits>
#include <tuple>
#include <nlohmann/json.hpp>

#include "util/error.h"
#include "util/fnv1a.h"
#include "util/posix_file.h"

namespace fedshard::data {
namespace {

using nlohmann::json;

constexpr uint32_t kNoId = std::numeric_limits<uint32_t>::max();

// GPT-2's pattern, which the ByteLevel pre-tokenizer applies itself when its use_regex is true.
constexpr std::string_view kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

// Special tokens that stand for the start and the end of a document, by the names the families use.
constexpr const char* kBosNames[] = {"<|begin_of_text|>", "<s>", "<|endoftext|>"};
constexpr const char* kEosNames[] = {"<|end_of_text|>", "</s>", "<|endoftext|>"};

// GPT-2's bytes_to_unicode: byte-level BPE writes every byte as one printable code point (printable Latin-1
// bytes as themselves, the others as U+0100 onwards, in byte order). Inverse: code point -> byte, or kNoId.
std::vector<uint32_t> byte_of_code_point() {
  std::vector<uint32_t> byte_of(512, kNoId);
  uint32_t next = 256;
  for (uint32_t b = 0; b < 256; ++b) {
    const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
    byte_of[printable ? b : next++] = b;
  }
  return byte_of;
}

class TokenizerJson {
 public:
  explicit TokenizerJson(std::string path) : path_(std::move(path)) {}

  [[noreturn]] void fail(const std::string& key, const std::string& what) const {
    throw Error(cat(path_, ": ", key, ": ", what));
  }
  const json& at(const json& obj, const std::string& parent, const char* key) const {
    if (!obj.is_object() || !obj.contains(key)) fail(join(parent, key), "missing");
    return obj[key];
  }
  // A key that must be absent, null or equal to `allowed` (false, "", ...): anything else is a feature we lack.
  void must_be(const json& obj, const std::string& parent, const char* key, const json& allowed,
               const std::string& why) const {
    if (!obj.contains(key) || obj[key].is_null() || obj[key] == allowed) return;
    fail(join(parent, key), cat(obj[key].dump(), " is not supported (", why, ")"));
  }
  std::string string_at(const json& obj, const std::string& parent, const char* key) const {
    const json& v = at(obj, parent, key);
    if (!v.is_string()) fail(join(parent, key), "expected a string, got " + v.dump());
    return v.get<std::string>();
  }
  uint32_t id_at(const json& v, const std::string& key) const {
    if (!v.is_number_unsigned() || v.get<uint64_t>() >= kNoId) fail(key, "expected a token id, got " + v.dump());
    return v.get<uint32_t>();
  }
  static std::string join(const std::string& parent, const char* key) {
    return parent.empty() ? key : parent + "." + key;
  }

 private:
  std::string path_;
};

// A vocab or merges entry in byte-level form -> its bytes.
bool byte_level_to_bytes(const std::string& s, const std::vector<uint32_t>& byte_of, std::string& out) {
  out.clear();
  for (size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    uint32_t cp = 0;
    size_t len = 1;
    if (c < 0x80) {
      cp = c;
    } else if ((c & 0xE0) == 0xC0 && i + 1 < s.size()) {
      cp = (c & 0x1Fu) << 6 | (static_cast<unsigned char>(s[i + 1]) & 0x3Fu);
      len = 2;
    } else {
      return false;  // byte-level code points are all below U+0800: one or two UTF-8 bytes
    }
    if (cp >= byte_of.size() || byte_of[cp] == kNoId) return false;
    out.push_back(static_cast<char>(byte_of[cp]));
    i += len;
  }
  return !out.empty();
}

// The pre-tokenizer's regex: a ByteLevel that splits with GPT-2's pattern, or a Split by a regex followed by a
// ByteLevel that only maps bytes (Llama 3, Qwen2).
std::string pretokenizer_pattern(const TokenizerJson& r, const json& root) {
  const json& pre = r.at(root, "", "pre_tokenizer");
  const auto byte_level = [&](const json& p, const std::string& key, bool use_regex) {
    r.must_be(p, key, "add_prefix_space", false, "fedshard does not insert a space before each document");
    const bool regex = !p.contains("use_regex") || p["use_regex"] == true;
    if (regex != use_regex) {
      r.fail(key + ".use_regex", use_regex ? "false is not supported: a ByteLevel alone must split with its regex"
                                           : "true is not supported after a Split");
    }
  };
  if (pre.is_object() && pre.value("type", "") == "ByteLevel") {
    byte_level(pre, "pre_tokenizer", true);
    return std::string(kGpt2Pattern);
  }
  if (!pre.is_object() || pre.value("type", "") != "Sequence") {
    r.fail("pre_tokenizer", cat(pre.is_object() ? pre.value("type", pre.dump()) : pre.dump(),
                                " is not supported (a ByteLevel, or a Sequence of a Split and a ByteLevel)"));
  }
  const json& seq = r.at(pre, "pre_tokenizer", "pretokenizers");
  if (!seq.is_array() || seq.size() != 2 || !seq[0].is_object() || seq[0].value("type", "") != "Split" ||
      !seq[1].is_object() || seq[1].value("type", "") != "ByteLevel") {
    r.fail("pre_tokenizer.pretokenizers", "only [Split, ByteLevel] is supported, got " + seq.dump().substr(0, 200));
  }
  const json& split = seq[0];
  const std::string key = "pre_tokenizer.pretokenizers[0]";
  if (r.string_at(split, key, "behavior") != "Isolated") {
    r.fail(key + ".behavior", cat("\"", split["behavior"].get<std::string>(), "\" is not supported (Isolated)"));
  }
  r.must_be(split, key, "invert", false, "an inverted split");
  const json& pattern = r.at(split, key, "pattern");
  if (!pattern.is_object() || !pattern.contains("Regex") || !pattern["Regex"].is_string()) {
    r.fail(key + ".pattern", pattern.dump() + " is not supported (a Regex)");
  }
  byte_level(seq[1], "pre_tokenizer.pretokenizers[1]", false);
  return pattern["Regex"].get<std::string>();
}

// What the file asks for beyond byte-level BPE (a normalizer, truncation, padding, another decoder; another model
// type, dropout, subword markers, byte fallback) is refused, never ignored.
void check_supported_root(const TokenizerJson& r, const json& root) {
  r.must_be(root, "", "normalizer", nullptr, "fedshard reads text as it is");
  r.must_be(root, "", "truncation", nullptr, "fedshard does not cut documents");
  r.must_be(root, "", "padding", nullptr, "fedshard does not pad documents");
  const json& decoder = r.at(root, "", "decoder");
  if (!decoder.is_null() && (!decoder.is_object() || decoder.value("type", "") != "ByteLevel")) {
    r.fail("decoder", decoder.dump().substr(0, 200) + " is not supported (ByteLevel)");
  }
}

void check_supported_model(const TokenizerJson& r, const json& model) {
  if (r.string_at(model, "model", "type") != "BPE") {
    r.fail("model.type", cat("\"", model["type"].get<std::string>(), "\" is not supported (BPE)"));
  }
  r.must_be(model, "model", "dropout", nullptr, "BPE dropout is for training a tokenizer");
  r.must_be(model, "model", "unk_token", nullptr, "byte-level BPE has a token for every byte");
  r.must_be(model, "model", "continuing_subword_prefix", "", "byte-level BPE marks no subwords");
  r.must_be(model, "model", "end_of_word_suffix", "", "byte-level BPE marks no word ends");
  r.must_be(model, "model", "byte_fallback", false, "SentencePiece-style byte fallback");
  r.must_be(model, "model", "fuse_unk", false, "byte-level BPE has no unknown token");
}

// Every id the file defines (vocab and added tokens) and its text. Ids index tables: one far beyond the tokens the
// file defines would allocate for nothing (a fuzzer's id of 1.9e9 asked for 60 GB). Real files number their tokens
// densely; small gaps are allowed.
struct IdTable {
  size_t defined = 0;  // entries the file has
  std::vector<std::string> text;
  std::vector<bool> known;
  static constexpr size_t kMaxGap = 1024;

  void define(const TokenizerJson& r, uint32_t id, std::string t, const std::string& key) {
    if (id >= defined + kMaxGap)
      r.fail(key, cat("id ", id, " is beyond the ", defined, " tokens the file defines (gaps of up to ", kMaxGap,
                      " ids are allowed)"));
    if (id >= text.size()) {
      text.resize(id + 1);
      known.resize(id + 1, false);
    }
    if (known[id] && text[id] != t) r.fail(key, cat("id ", id, " is given to two different tokens"));
    known[id] = true;
    text[id] = std::move(t);
  }
};

// model.vocab: token bytes -> id, each id defined in `ids`.
std::unordered_map<std::string, uint32_t> read_vocab(const TokenizerJson& r, const json& model,
                                                     const std::vector<uint32_t>& byte_of, IdTable& ids) {
  const json& vocab = r.at(model, "model", "vocab");
  if (!vocab.is_object() || vocab.empty()) r.fail("model.vocab", "expected an object of token -> id");
  std::unordered_map<std::string, uint32_t> out;
  std::string bytes;
  for (const auto& [token, id_json] : vocab.items()) {
    const std::string key = "model.vocab[" + json(token).dump() + "]";
    if (!byte_level_to_bytes(token, byte_of, bytes)) r.fail(key, "not a byte-level token");
    const uint32_t id = r.id_at(id_json, key);
    if (!out.emplace(bytes, id).second) r.fail(key, "the same bytes as another token");
    ids.define(r, id, bytes, key);
  }
  return out;
}

// One merge of model.merges: "LEFT RIGHT" or [LEFT, RIGHT], in byte-level form.
std::pair<std::string, std::string> merge_pair(const TokenizerJson& r, const json& m, const std::string& key) {
  if (m.is_string()) {
    const std::string s = m.get<std::string>();
    const size_t space = s.find(' ');
    if (space == std::string::npos || s.find(' ', space + 1) != std::string::npos) {
      r.fail(key, "expected \"LEFT RIGHT\", got " + m.dump());
    }
    return {s.substr(0, space), s.substr(space + 1)};
  }
  if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string())
    return {m[0].get<std::string>(), m[1].get<std::string>()};
  r.fail(key, "expected \"LEFT RIGHT\" or [LEFT, RIGHT], got " + m.dump());
}

MergeTable read_merges(const TokenizerJson& r, const json& model, const std::unordered_map<std::string, uint32_t>& vocab,
                       const std::vector<uint32_t>& byte_of, const std::string& path) {
  const json& merges = r.at(model, "model", "merges");
  if (!merges.is_array()) r.fail("model.merges", "expected an array");
  FS_CHECK(merges.size() < kNoId, path, ": model.merges: too many merges");
  MergeTable out;
  std::string left, right;
  for (uint32_t rank = 0; rank < merges.size(); ++rank) {
    const json& m = merges[rank];
    const std::string key = cat("model.merges[", rank, "]");
    const auto [a, b] = merge_pair(r, m, key);
    if (!byte_level_to_bytes(a, byte_of, left) || !byte_level_to_bytes(b, byte_of, right)) {
      r.fail(key, "not byte-level tokens: " + m.dump());
    }
    const auto l = vocab.find(left), rt = vocab.find(right), merged = vocab.find(left + right);
    if (l == vocab.end() || rt == vocab.end() || merged == vocab.end()) {
      r.fail(key, m.dump() + " names a token that is not in model.vocab");
    }
    // A pair listed twice keeps its last rank, as the tokenizers library's map does (checked with 0.23.3).
    out.set(l->second, rt->second, PairMerge{rank, merged->second});
  }
  return out;
}

// added_tokens (special ones only), each id defined in `ids`; returns the ids of the start and the end of a document.
std::pair<uint32_t, uint32_t> read_added_tokens(const TokenizerJson& r, const json& root, IdTable& ids) {
  const json& added = root.contains("added_tokens") ? root["added_tokens"] : json::array();
  if (!added.is_array()) r.fail("added_tokens", "expected an array");
  uint32_t bos = kNoId, eos = kNoId;
  size_t bos_rank = std::size(kBosNames), eos_rank = std::size(kEosNames);
  for (size_t i = 0; i < added.size(); ++i) {
    const std::string key = cat("added_tokens[", i, "]");
    const std::string content = r.string_at(added[i], key, "content");
    const uint32_t id = r.id_at(r.at(added[i], key, "id"), key + ".id");
    if (added[i].value("special", false) != true) {
      r.fail(key, cat("\"", content, "\" is not special: only special added tokens are supported"));
    }
    ids.define(r, id, content, key);
    for (size_t k = 0; k < std::size(kBosNames); ++k)
      if (content == kBosNames[k] && k < bos_rank) bos = id, bos_rank = k;
    for (size_t k = 0; k < std::size(kEosNames); ++k)
      if (content == kEosNames[k] && k < eos_rank) eos = id, eos_rank = k;
  }
  if (eos == kNoId) {
    r.fail("added_tokens", "no end-of-document special token (<|end_of_text|>, </s> or <|endoftext|>)");
  }
  if (bos == kNoId) bos = eos;  // GPT-2 and Qwen2 start a document after the end of the last one
  return {bos, eos};
}

}  // namespace

HfTokenizer::HfTokenizer(const std::string& path) : path_(path) {
  const std::string data = read_file(path);
  fingerprint_ = fnv1a64(data.data(), data.size());
  json root;
  try {
    root = json::parse(data);
  } catch (const json::exception& e) {
    throw Error(cat(path, ": not valid JSON: ", e.what()));
  }
  const TokenizerJson r(path);
  FS_CHECK(root.is_object(), path, ": expected a JSON object (a Hugging Face tokenizer.json)");
  check_supported_root(r, root);
  const json& model = r.at(root, "", "model");
  check_supported_model(r, model);
  ignore_merges_ = model.value("ignore_merges", false);

  const std::vector<uint32_t> byte_of = byte_of_code_point();
  IdTable ids;
  ids.defined = r.at(model, "model", "vocab").size() +
                (root.contains("added_tokens") && root["added_tokens"].is_array() ? root["added_tokens"].size() : 0);
  vocab_ = read_vocab(r, model, byte_of, ids);
  for (uint32_t b = 0; b < 256; ++b) {
    const auto it = vocab_.find(std::string(1, static_cast<char>(b)));
    if (it == vocab_.end()) {
      r.fail("model.vocab", cat("byte ", b, " has no token: byte-level BPE needs all 256 (a tokenizer trained ",
                                "with ByteLevel.alphabet() as its initial alphabet has them)"));
    }
    byte_id_[b] = it->second;
  }
  merges_ = read_merges(r, model, vocab_, byte_of, path);
  std::tie(bos_, eos_) = read_added_tokens(r, root, ids);
  text_of_id_ = std::move(ids.text);
  known_id_ = std::move(ids.known);
  pretokenizer_ = std::make_unique<Pretokenizer>(pretokenizer_pattern(r, root), path + ": pre_tokenizer's regex");
}

// The tokenizers library's BPE word merge (lowest merge rank first, leftmost on ties), a whole-token piece taken
// as it is where the file sets ignore_merges.
std::vector<uint32_t> HfTokenizer::encode(std::string_view text) const {
  std::vector<uint32_t> ids;
  ids.reserve(text.size() / 3);
  for (std::string_view piece : pretokenizer_->split(text)) {
    if (merger_.cached(piece, ids)) continue;
    const size_t before = ids.size();
    const auto whole = ignore_merges_ ? vocab_.find(std::string(piece)) : vocab_.end();
    if (whole != vocab_.end()) {
      ids.push_back(whole->second);
    } else {
      merger_.merge(piece, byte_id_, merges_, ids);
    }
    merger_.remember(piece, ids.data() + before, ids.size() - before);
  }
  return ids;
}

std::string HfTokenizer::decode(const std::vector<uint32_t>& ids) const {
  std::string text;
  for (uint32_t id : ids) {
    FS_CHECK(id < known_id_.size() && known_id_[id], "token id ", id, " is not in ", path_, " (vocab size ",
             vocab_size(), ")");
    text += text_of_id_[id];
  }
  return text;
}

}  // namespace fedshard::data
