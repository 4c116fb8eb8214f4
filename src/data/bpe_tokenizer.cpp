#include "data/bpe_tokenizer.h"

#include <charconv>
#include <limits>

#include "util/error.h"
#include "util/fnv1a.h"
#include "util/posix_file.h"

namespace fedshard::data {
namespace {

constexpr uint32_t kNoRank = std::numeric_limits<uint32_t>::max();

int base64_value(char c) {
  if (c >= 'A' && c <= 'Z') return c - 'A';
  if (c >= 'a' && c <= 'z') return c - 'a' + 26;
  if (c >= '0' && c <= '9') return c - '0' + 52;
  if (c == '+') return 62;
  if (c == '/') return 63;
  return -1;
}

// Standard alphabet, '=' padding required (what tiktoken files use). False on anything else.
bool decode_base64(std::string_view in, std::string& out) {
  out.clear();
  if (in.empty() || in.size() % 4 != 0) return false;
  size_t pad = 0;
  while (pad < 2 && in[in.size() - 1 - pad] == '=') ++pad;
  for (size_t i = 0; i < in.size(); i += 4) {
    uint32_t quad = 0;
    for (size_t k = 0; k < 4; ++k) {
      const bool padding = i + k >= in.size() - pad;
      const int v = padding ? 0 : base64_value(in[i + k]);
      if (v < 0) return false;
      quad = quad << 6 | static_cast<uint32_t>(v);
    }
    const size_t n = i + 4 == in.size() ? 3 - pad : 3;
    for (size_t k = 0; k < n; ++k) out.push_back(static_cast<char>(quad >> (16 - 8 * k) & 0xff));
  }
  return true;
}

// Malformed lines can be huge (a binary file read as text): quote only their start.
std::string_view shorten(std::string_view s) { return s.substr(0, 60); }

std::string hex_byte(unsigned char b) {
  const char* digits = "0123456789abcdef";
  return {'0', 'x', digits[b >> 4], digits[b & 15]};
}

struct RankLine {
  std::string bytes;
  uint64_t rank;
  size_t line;
};

// Lines "BASE64 RANK"; checks each line's form, not yet how the ranks fit together.
std::vector<RankLine> parse_ranks_file(const std::string& path, std::string_view data) {
  std::vector<RankLine> entries;
  size_t line_no = 0;
  for (size_t pos = 0; pos < data.size();) {
    size_t end = data.find('\n', pos);
    if (end == std::string_view::npos) end = data.size();
    std::string_view line = data.substr(pos, end - pos);
    pos = end + 1;
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.empty()) continue;  // tiktoken skips blank lines, e.g. a trailing newline
    const size_t space = line.find(' ');
    FS_CHECK(space != std::string_view::npos && line.find(' ', space + 1) == std::string_view::npos, path, ":",
             line_no, ": expected \"BASE64 RANK\", got \"", shorten(line), "\"");
    RankLine e{{}, 0, line_no};
    const std::string_view b64 = line.substr(0, space), rank = line.substr(space + 1);
    FS_CHECK(decode_base64(b64, e.bytes), path, ":", line_no, ": bad base64 token \"", shorten(b64), "\"");
    const auto [ptr, ec] = std::from_chars(rank.data(), rank.data() + rank.size(), e.rank);
    FS_CHECK(ec == std::errc() && ptr == rank.data() + rank.size(), path, ":", line_no, ": bad rank \"",
             shorten(rank), "\"");
    entries.push_back(std::move(e));
  }
  return entries;
}

// Llama 3.1's specials as its Hugging Face tokenizer_config.json names them (ids n..n+255). Meta's reference
// tokenizer.py calls n+5 "<|step_id|>" and numbers the tail reserved tokens from 2; the ids are the same.
std::vector<std::string> llama3_special_names() {
  std::vector<std::string> names = {
      "<|begin_of_text|>",
      "<|end_of_text|>",
      "<|reserved_special_token_0|>",
      "<|reserved_special_token_1|>",
      "<|finetune_right_pad_id|>",
      "<|reserved_special_token_2|>",
      "<|start_header_id|>",
      "<|end_header_id|>",
      "<|eom_id|>",
      "<|eot_id|>",
      "<|python_tag|>",
  };
  for (uint32_t i = 3; names.size() < BpeTokenizer::kNumSpecials; ++i) {
    names.push_back(cat("<|reserved_special_token_", i, "|>"));
  }
  return names;
}

}  // namespace

BpeTokenizer::BpeTokenizer(const std::string& path) : path_(path), special_names_(llama3_special_names()) {
  const std::string data = read_file(path);
  fingerprint_ = fnv1a64(data.data(), data.size());

  std::vector<RankLine> entries = parse_ranks_file(path, data);
  const size_t n = entries.size();
  FS_CHECK(n > 0, "tiktoken ranks file ", path, " has no tokens");
  FS_CHECK(n <= std::numeric_limits<uint32_t>::max() - kNumSpecials, "tiktoken ranks file ", path,
           " has too many tokens (", n, ")");

  // n distinct ranks all below n are exactly 0..n-1.
  tokens_.resize(n);
  std::vector<size_t> line_of_rank(n, 0);
  for (RankLine& e : entries) {
    FS_CHECK(e.rank < n, path, ":", e.line, ": rank ", e.rank, " is out of range; the file has ", n,
             " tokens, so ranks must be 0..", n - 1, " without gaps");
    FS_CHECK(line_of_rank[e.rank] == 0, path, ":", e.line, ": rank ", e.rank, " already appears on line ",
             line_of_rank[e.rank]);
    line_of_rank[e.rank] = e.line;
    tokens_[e.rank] = std::move(e.bytes);
  }
  ranks_.reserve(n);
  for (uint32_t r = 0; r < n; ++r) {
    auto [it, inserted] = ranks_.emplace(tokens_[r], r);
    FS_CHECK(inserted, path, ":", line_of_rank[r], ": token already appears on line ", line_of_rank[it->second]);
  }
  for (int b = 0; b < 256; ++b) {
    const char c = static_cast<char>(b);
    byte_rank_[b] = rank_of(std::string_view(&c, 1));
  }
  // Every split of a token into two tokens is a merge to it, its rank the priority (tiktoken merges the pair
  // whose concatenated bytes rank lowest; segments are always tokens, so the pair of ids names those bytes).
  for (uint32_t r = 0; r < n; ++r) {
    const std::string_view token = tokens_[r];
    for (size_t k = 1; k < token.size(); ++k) {
      const uint32_t left = rank_of(token.substr(0, k)), right = rank_of(token.substr(k));
      if (left != kNoRank && right != kNoRank) merges_.set(left, right, PairMerge{r, r});
    }
  }
}

uint32_t BpeTokenizer::rank_of(std::string_view bytes) const {
  auto it = ranks_.find(bytes);
  return it == ranks_.end() ? kNoRank : it->second;
}

std::vector<uint32_t> BpeTokenizer::encode(std::string_view text) const {
  std::vector<uint32_t> ids;
  ids.reserve(text.size() / 3);
  for (std::string_view piece : pretokenizer_.split(text)) {
    if (merger_.cached(piece, ids)) continue;
    const size_t before = ids.size();
    const uint32_t whole = rank_of(piece);
    if (whole != kNoRank) {
      ids.push_back(whole);
    } else {
      for (const char c : piece) {
        const auto byte = static_cast<unsigned char>(c);
        FS_CHECK(byte_rank_[byte] != kNoRank, "byte ", hex_byte(byte), " is not in the vocabulary of ", path_);
      }
      merger_.merge(piece, byte_rank_, merges_, ids);
    }
    merger_.remember(piece, ids.data() + before, ids.size() - before);
  }
  return ids;
}

std::string BpeTokenizer::decode(const std::vector<uint32_t>& ids) const {
  std::string text;
  for (uint32_t id : ids) {
    if (id < num_regular()) {
      text += tokens_[id];
    } else {
      FS_CHECK(id < vocab_size(), "token id ", id, " is out of range for ", path_, " (vocab size ", vocab_size(),
               ")");
      text += special_names_[id - num_regular()];
    }
  }
  return text;
}

}  // namespace fedshard::data
