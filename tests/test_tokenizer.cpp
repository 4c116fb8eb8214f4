#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "data/bpe_tokenizer.h"
#include "data/encode_pool.h"
#include "data/byte_tokenizer.h"
#include "data/pretokenizer.h"
#include "data/sentencepiece_tokenizer.h"
#include "data/tokenizer.h"
#include "util/error.h"

namespace fs = std::filesystem;
using fedshard::Error;
using namespace fedshard::data;
using Ids = std::vector<uint32_t>;

namespace {

std::string base64(std::string_view in) {
  const char* alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  for (size_t i = 0; i < in.size(); i += 3) {
    uint32_t quad = 0;
    const size_t n = std::min<size_t>(3, in.size() - i);
    for (size_t k = 0; k < 3; ++k) {
      quad = quad << 8 | (k < n ? static_cast<unsigned char>(in[i + k]) : 0);
    }
    for (size_t k = 0; k < 4; ++k) out.push_back(k <= n ? alphabet[quad >> (18 - 6 * k) & 63] : '=');
  }
  return out;
}

uint64_t fnv1a64(std::string_view data) {
  uint64_t h = 0xcbf29ce484222325ULL;
  for (unsigned char c : data) h = (h ^ c) * 0x100000001b3ULL;
  return h;
}

// A fresh directory per test, removed afterwards.
class TempDir {
 public:
  TempDir() {
    static int counter = 0;
    path_ = fs::temp_directory_path() / ("fedshard_test_tokenizer_" + std::to_string(getpid()) + "_" +
                                         std::to_string(counter++));
    fs::create_directories(path_);
  }
  ~TempDir() { fs::remove_all(path_); }
  std::string write(const std::string& name, const std::string& contents) const {
    const std::string file = (path_ / name).string();
    std::ofstream(file, std::ios::binary) << contents;
    return file;
  }

 private:
  fs::path path_;
};

// Lines "base64 rank" in the given order.
std::string ranks_file(const std::vector<std::pair<std::string, uint32_t>>& tokens) {
  std::string out;
  for (const auto& [bytes, rank] : tokens) out += base64(bytes) + " " + std::to_string(rank) + "\n";
  return out;
}

// All 256 bytes (id == byte value) and a few merges chosen so the tests can predict exact ids.
constexpr uint32_t kTh = 256, kThe = 257, kSpaceThe = 258, kYz = 259, kXy = 260, kQqq = 261, kHe = 262;
constexpr uint32_t kNumTestTokens = 263;

std::string small_vocab() {
  std::vector<std::pair<std::string, uint32_t>> tokens;
  for (uint32_t b = 0; b < 256; ++b) tokens.push_back({std::string(1, static_cast<char>(b)), b});
  tokens.push_back({"th", kTh});
  tokens.push_back({"the", kThe});
  tokens.push_back({" the", kSpaceThe});
  tokens.push_back({"yz", kYz});
  tokens.push_back({"xy", kXy});
  tokens.push_back({"qqq", kQqq});  // reachable only by whole-piece lookup: "qq" is not a token
  tokens.push_back({"he", kHe});
  // Lines out of rank order: ids come from the ranks, not from line positions.
  std::reverse(tokens.begin(), tokens.end());
  return ranks_file(tokens);
}

template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

void expect_has(const std::string& msg, std::initializer_list<const char*> parts) {
  for (const char* part : parts) EXPECT_NE(msg.find(part), std::string::npos) << msg << " lacks " << part;
}

std::vector<std::string> split(const Pretokenizer& p, std::string_view text) {
  std::vector<std::string> out;
  for (std::string_view piece : p.split(text)) out.emplace_back(piece);
  return out;
}

// Random valid UTF-8 built from a pool mixing ASCII, digits, punctuation, whitespace and 2/3/4-byte characters.
std::string random_text(std::mt19937& rng, size_t n_chars) {
  static const std::vector<std::string> pool = {
      "a", "b", "t", "h", "e", "x", "y", "z", "q", "T", "H", " ", " ", "  ", "\n", "\r\n", "\t", "0", "1",
      "9", "'", "'s", "!", ".", ",", "-", "(", "é", "ß", "Ω", "ж", "中", "文", "€", "😀", "𝔸", "\u00a0"};
  std::uniform_int_distribution<size_t> pick(0, pool.size() - 1);
  std::string s;
  for (size_t i = 0; i < n_chars; ++i) s += pool[pick(rng)];
  return s;
}

}  // namespace

// ---- bytes ----

TEST(ByteTokenizer, IdsAndRoundTrip) {
  ByteTokenizer t;
  EXPECT_EQ(t.vocab_size(), 258u);
  EXPECT_EQ(t.bos_id(), 256u);
  EXPECT_EQ(t.eos_id(), 257u);
  EXPECT_EQ(t.kind(), TokenizerKind::Bytes);
  EXPECT_EQ(t.encode("A\n\xc3\xa9"), (Ids{65, 10, 0xc3, 0xa9}));
  std::string all;
  for (int b = 0; b < 256; ++b) all.push_back(static_cast<char>(b));
  all += "héllo 中文 😀";
  EXPECT_EQ(t.decode(t.encode(all)), all);
  EXPECT_EQ(t.decode({256, 104, 105, 257}), "<|begin_of_text|>hi<|end_of_text|>");
  EXPECT_NE(error_of([&] { t.decode({258}); }).find("258"), std::string::npos);
}

TEST(MakeTokenizer, BytesAndUnknownSpecs) {
  auto t = make_tokenizer("bytes");
  EXPECT_EQ(t->spec(), "bytes");
  EXPECT_EQ(t->kind(), TokenizerKind::Bytes);
  EXPECT_EQ(t->fingerprint(), fnv1a64("bytes"));
  for (const char* spec : {"foo", "", "tiktoken:", "Bytes", "tiktoken"}) {
    const std::string msg = error_of([&] { make_tokenizer(spec); });
    EXPECT_NE(msg.find("unknown tokenizer spec \"" + std::string(spec) + "\""), std::string::npos) << msg;
  }
}

// ---- pre-tokenizer ----

TEST(Pretokenizer, SplitsLikeLlama3) {
  Pretokenizer p;
  using V = std::vector<std::string>;
  EXPECT_EQ(split(p, "Hello world's 12345!!"), (V{"Hello", " world", "'s", " ", "123", "45", "!!"}));
  // llama-models' test encodes this to 6 ids (2028, 374, 264, 1296, 11914, 13): one per piece.
  EXPECT_EQ(split(p, "This is a test sentence."), (V{"This", " is", " a", " test", " sentence", "."}));
  EXPECT_EQ(split(p, "I'M don't WE'LL"), (V{"I", "'M", " don", "'t", " WE", "'LL"}));
  // A run of spaces gives all but the last to the whitespace piece; the last joins the next word.
  EXPECT_EQ(split(p, "a   b"), (V{"a", "  ", " b"}));
  EXPECT_EQ(split(p, "a\n\n b\r\n"), (V{"a", "\n\n", " b", "\r\n"}));
  EXPECT_EQ(split(p, "x  "), (V{"x", "  "}));
  EXPECT_EQ(split(p, "foo.bar();\n"), (V{"foo", ".bar", "();\n"}));
  EXPECT_EQ(split(p, "café 中文 1234567"), (V{"café", " 中文", " ", "123", "456", "7"}));
  EXPECT_EQ(split(p, "$100"), (V{"$", "100"}));
  EXPECT_TRUE(p.split("").empty());
}

// \s is Unicode White_Space, as in tiktoken; U+180E, U+200B, U+2060 and U+FEFF are format characters, not
// spaces. Expected pieces: tiktoken 0.14.0 with Llama 3's pat_str and a vocabulary holding every substring, so
// each piece encodes to one token.
TEST(Pretokenizer, WhiteSpaceIsUnicodeWhiteSpace) {
  Pretokenizer p;
  using V = std::vector<std::string>;
  for (const std::string format : {"\u180e", "\u200b", "\u2060", "\ufeff"}) {
    EXPECT_EQ(split(p, format + "'s"), (V{format + "'", "s"})) << format;
    EXPECT_EQ(split(p, "a" + format + "b"), (V{"a", format + "b"})) << format;
    EXPECT_EQ(split(p, "x" + format + format + "y"), (V{"x", format + format, "y"})) << format;
  }
  for (const std::string space : {"\u3000", "\u00a0", "\u0085", "\u1680", "\v"}) {
    EXPECT_EQ(split(p, space + "'s"), (V{space, "'s"})) << space;
    EXPECT_EQ(split(p, "a" + space + "b"), (V{"a", space + "b"})) << space;
    EXPECT_EQ(split(p, "x" + space + space + "y"), (V{"x", space, space + "y"})) << space;
    EXPECT_EQ(split(p, "x" + space + space), (V{"x", space + space})) << space;
  }
}

// Letters and digits assigned in Unicode 15 and 16 (Nag Mundari U+1E4D0, its digits U+1E4F0, Todhri U+105C0, Kawi
// digits U+11F50) are \p{L} and \p{N} to tiktoken and Hugging Face tokenizers, unassigned in PCRE2 10.42's tables.
// Expected pieces: tokenizers 0.23.3's Split with Llama 3's pattern (tiktoken 0.14.0 classifies them alike).
TEST(Pretokenizer, LettersAndDigitsOfUnicode16) {
  Pretokenizer p;
  using V = std::vector<std::string>;
  EXPECT_EQ(split(p, "a\U0001E4D0\U0001E4D1 \U0001E4F0\U0001E4F1\U0001E4F2\U0001E4F3 \U000105C0x.\U00011F50\U00011F51"),
            (V{"a\U0001E4D0\U0001E4D1", " ", "\U0001E4F0\U0001E4F1\U0001E4F2", "\U0001E4F3", " \U000105C0x", ".",
               "\U00011F50\U00011F51"}));
}

TEST(Pretokenizer, RejectsInvalidUtf8) {
  Pretokenizer p;
  for (const char* bad : {"\xff", "ok \xe4\xb8", "\xed\xa0\x80", "\xc0\xaf", "abc\x80"}) {
    const std::string msg = error_of([&] { p.split(bad); });
    EXPECT_NE(msg.find("not valid UTF-8"), std::string::npos) << msg;
  }
  EXPECT_NE(error_of([&] { p.split("abc\x80"); }).find("byte 3"), std::string::npos);
}

// A tokenizer.json's Split regex ("Isolated"): text between matches is a piece of its own; \s and \S are
// White_Space as in Llama 3's built-in pattern; a pattern that matches nothing is refused rather than looping.
TEST(Pretokenizer, HuggingFaceSplitRegex) {
  using V = std::vector<std::string>;
  const Pretokenizer digits(R"(\d+)", "test pattern");
  EXPECT_EQ(split(digits, "ab12c345"), (V{"ab", "12", "c", "345"}));
  EXPECT_EQ(split(digits, "12ab"), (V{"12", "ab"}));
  const Pretokenizer words(R"(\S+|\s+)", "test pattern");
  EXPECT_EQ(split(words, "a\u180eb c"), (V{"a\u180eb", " ", "c"}));
  const Pretokenizer llama3(R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|)"
                            R"( ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)",
                            "Llama 3's pattern from a tokenizer.json");
  const Pretokenizer builtin;
  for (const char* text : {"Hello world's 12345!!", "a\u180e's \u3000 x\n\n y", "foo.bar();\n", "I'M don't"}) {
    EXPECT_EQ(split(llama3, text), split(builtin, text)) << text;
  }
  const Pretokenizer empty("x*", "test pattern");
  EXPECT_NE(error_of([&] { empty.split("ab"); }).find("matched an empty string at byte 0"), std::string::npos);
  EXPECT_NE(error_of([] { Pretokenizer("[^\\S]", "test pattern"); }).find("\\S inside a character class"),
            std::string::npos);
  EXPECT_NE(error_of([] { Pretokenizer("(unclosed", "test pattern"); }).find("cannot compile test pattern"),
            std::string::npos);
}

// ---- tiktoken BPE ----

class BpeTest : public ::testing::Test {
 protected:
  TempDir dir;
  std::string path = dir.write("small.tiktoken", small_vocab());
  std::unique_ptr<Tokenizer> tok = make_tokenizer("tiktoken:" + path);
};

TEST_F(BpeTest, MergesInRankOrder) {
  // "xyz": left-to-right greedy would take "xy" first; "yz" has the lower rank, so BPE gives x + yz.
  EXPECT_EQ(tok->encode("xyz"), (Ids{'x', kYz}));
  // "th" (256) beats "he" (262), then "th"+"e" -> "the"; a space-prefixed piece merges on to " the".
  EXPECT_EQ(tok->encode("thethe"), (Ids{kThe, kThe}));
  EXPECT_EQ(tok->encode(" the"), (Ids{kSpaceThe}));
  EXPECT_EQ(tok->encode("hex"), (Ids{kHe, 'x'}));
  EXPECT_EQ(tok->encode("xyzthe the"), (Ids{'x', kYz, kThe, kSpaceThe}));
}

TEST_F(BpeTest, WholePieceLookup) {
  EXPECT_EQ(tok->encode("qqq"), (Ids{kQqq}));
  EXPECT_EQ(tok->encode("qqqq"), (Ids{'q', 'q', 'q', 'q'}));  // no merge path: "qq" is not a token
  EXPECT_EQ(tok->encode("the"), (Ids{kThe}));
}

TEST_F(BpeTest, SpecialsAndVocab) {
  const uint32_t n = kNumTestTokens;
  EXPECT_EQ(tok->vocab_size(), n + 256);
  EXPECT_EQ(tok->bos_id(), n);
  EXPECT_EQ(tok->eos_id(), n + 1);
  EXPECT_EQ(tok->kind(), TokenizerKind::Tiktoken);
  EXPECT_EQ(tok->spec(), "tiktoken:" + path);
  EXPECT_EQ(tok->decode({n, 't', 'h', n + 1}), "<|begin_of_text|>th<|end_of_text|>");
  const std::vector<std::pair<uint32_t, std::string>> specials = {
      {2, "<|reserved_special_token_0|>"}, {3, "<|reserved_special_token_1|>"}, {4, "<|finetune_right_pad_id|>"},
      {5, "<|reserved_special_token_2|>"}, {6, "<|start_header_id|>"},          {7, "<|end_header_id|>"},
      {8, "<|eom_id|>"},                   {9, "<|eot_id|>"},                   {10, "<|python_tag|>"},
      {11, "<|reserved_special_token_3|>"}, {255, "<|reserved_special_token_247|>"}};
  for (const auto& [offset, name] : specials) EXPECT_EQ(tok->decode({n + offset}), name);
  // Specials in the input are plain text.
  const Ids ids = tok->encode("<|eot_id|>");
  EXPECT_TRUE(std::all_of(ids.begin(), ids.end(), [&](uint32_t id) { return id < n; }));
  EXPECT_EQ(tok->decode(ids), "<|eot_id|>");
  const std::string msg = error_of([&] { tok->decode({n + 256}); });
  EXPECT_NE(msg.find("out of range"), std::string::npos) << msg;
}

TEST_F(BpeTest, FingerprintIsFileHash) {
  EXPECT_EQ(tok->fingerprint(), fnv1a64(small_vocab()));
  const std::string other = dir.write("other.tiktoken", small_vocab() + base64("zz") + " 263\n");
  EXPECT_NE(make_tokenizer("tiktoken:" + other)->fingerprint(), tok->fingerprint());
}

TEST_F(BpeTest, RoundTripsRandomUtf8) {
  std::mt19937 rng(1234);
  for (int i = 0; i < 300; ++i) {
    const std::string text = random_text(rng, 1 + i % 60);
    EXPECT_EQ(tok->decode(tok->encode(text)), text);
  }
}

TEST_F(BpeTest, InvalidUtf8IsAnError) {
  const std::string msg = error_of([&] { tok->encode("the \xc3"); });
  EXPECT_NE(msg.find("not valid UTF-8"), std::string::npos) << msg;
}

TEST_F(BpeTest, LongRunsStayFast) {
  // One huge piece each: the heap keeps BPE O(n log n), and PCRE2 must not run out of JIT stack.
  for (const std::string& text : {std::string(300000, ' '), std::string(300000, 'h'), std::string(300000, '!'),
                                  std::string(100000, 't') + std::string(100000, 'h')}) {
    EXPECT_EQ(tok->decode(tok->encode(text)), text);
  }
}

// Compares the heap-based merge with a direct transcription of tiktoken's quadratic loop, on a random vocabulary
// dense in merges so that rank order decides almost every step.
TEST(BpeAgainstReference, RandomVocabulary) {
  std::mt19937 rng(99);
  const std::string alphabet = "abcd";
  std::vector<std::pair<std::string, uint32_t>> tokens;
  for (uint32_t b = 0; b < 256; ++b) tokens.push_back({std::string(1, static_cast<char>(b)), 0});
  std::map<std::string, uint32_t> seen;
  std::uniform_int_distribution<int> len(2, 5), ch(0, 3);
  while (tokens.size() < 256 + 300) {
    std::string s;
    for (int i = len(rng); i > 0; --i) s.push_back(alphabet[ch(rng)]);
    if (seen.emplace(s, 0).second) tokens.push_back({s, 0});
  }
  std::vector<uint32_t> ranks(tokens.size());
  for (uint32_t i = 0; i < ranks.size(); ++i) ranks[i] = i;
  std::shuffle(ranks.begin(), ranks.end(), rng);
  std::map<std::string, uint32_t> rank_of;
  for (size_t i = 0; i < tokens.size(); ++i) rank_of[tokens[i].first] = tokens[i].second = ranks[i];

  const auto reference = [&](const std::string& piece) {
    if (rank_of.count(piece)) return Ids{rank_of[piece]};
    std::vector<std::string> parts;
    for (char c : piece) parts.emplace_back(1, c);
    for (;;) {
      size_t best = parts.size();
      uint32_t best_rank = UINT32_MAX;
      for (size_t i = 0; i + 1 < parts.size(); ++i) {
        auto it = rank_of.find(parts[i] + parts[i + 1]);
        if (it != rank_of.end() && it->second < best_rank) best = i, best_rank = it->second;
      }
      if (best == parts.size()) break;
      parts[best] += parts[best + 1];
      parts.erase(parts.begin() + static_cast<long>(best) + 1);
    }
    Ids ids;
    for (const auto& p : parts) ids.push_back(rank_of.at(p));
    return ids;
  };

  TempDir dir;
  auto tok = make_tokenizer("tiktoken:" + dir.write("random.tiktoken", ranks_file(tokens)));
  std::uniform_int_distribution<int> word_len(1, 40);
  for (int i = 0; i < 500; ++i) {
    std::string word;
    for (int k = word_len(rng); k > 0; --k) word.push_back(alphabet[ch(rng)]);
    ASSERT_EQ(tok->encode(word), reference(word)) << word;
  }
}

TEST(BpeFileErrors, ClearMessages) {
  TempDir dir;
  const auto error_for = [&](const std::string& contents) {
    const std::string path = dir.write("bad.tiktoken", contents);
    return error_of([&] { make_tokenizer("tiktoken:" + path); });
  };
  const std::string a = base64("a"), b = base64("b"), c = base64("c");

  const std::string missing = error_of([&] { make_tokenizer("tiktoken:/nonexistent/dir/tok.model"); });
  expect_has(missing, {"cannot open", "/nonexistent/dir/tok.model"});
  expect_has(error_for(a + " 0\nYW!= 1\n"), {"bad.tiktoken:2:", "bad base64"});
  expect_has(error_for(a + " 0\nYW 1\n"), {"bad.tiktoken:2:", "bad base64"});
  expect_has(error_for(a + " 0\n" + b + " 0\n"), {"bad.tiktoken:2:", "rank 0 already appears on line 1"});
  expect_has(error_for(a + " 0\n" + b + " 2\n"), {"bad.tiktoken:2:", "rank 2 is out of range"});
  expect_has(error_for(a + " 0\n" + a + " 1\n"), {"bad.tiktoken:2:", "token already appears on line 1"});
  expect_has(error_for(a + " 0\n" + b + "\n"), {"bad.tiktoken:2:", "expected \"BASE64 RANK\""});
  expect_has(error_for(a + " 0\n" + b + " 1x\n"), {"bad.tiktoken:2:", "bad rank"});
  expect_has(error_for(a + " 0\n" + b + " -1\n"), {"bad.tiktoken:2:", "bad rank"});
  expect_has(error_for("\n\n"), {"has no tokens"});
  // Blank lines and CRLF endings are accepted, as tiktoken does.
  EXPECT_EQ(make_tokenizer("tiktoken:" + dir.write("ok.tiktoken", a + " 0\r\n\r\n" + b + " 1"))->vocab_size(), 258u);

  // A byte missing from the vocabulary is named when it is met.
  auto tok = make_tokenizer("tiktoken:" + dir.write("ab.tiktoken", a + " 0\n" + b + " 1\n"));
  EXPECT_EQ(tok->encode("abba"), (Ids{0, 1, 1, 0}));
  expect_has(error_of([&] { tok->encode("abc"); }), {"byte 0x63", "ab.tiktoken"});
}

// The real Llama 3 vocabulary, when a copy is at hand (it is not shipped): ids from llama-models' own test.
TEST(Llama3, KnownIds) {
  const char* path = std::getenv("FEDSHARD_LLAMA3_TOKENIZER");
  if (path == nullptr) GTEST_SKIP() << "set FEDSHARD_LLAMA3_TOKENIZER to Llama 3's tokenizer.model";
  auto tok = make_tokenizer(std::string("tiktoken:") + path);
  EXPECT_EQ(tok->vocab_size(), 128256u);
  EXPECT_EQ(tok->bos_id(), 128000u);
  EXPECT_EQ(tok->eos_id(), 128001u);
  EXPECT_EQ(tok->encode("This is a test sentence."), (Ids{2028, 374, 264, 1296, 11914, 13}));
  EXPECT_EQ(tok->encode("user"), (Ids{882}));
  EXPECT_EQ(tok->encode("\n\n"), (Ids{271}));
  EXPECT_EQ(tok->decode({128000, 2028, 374, 264, 1296, 11914, 13, 128001}),
            "<|begin_of_text|>This is a test sentence.<|end_of_text|>");
}

// ---- sentencepiece (the library in its helper process; conformance: tests/sentencepiece_tokenizer.py) ----

TEST(SentencePiece, FixtureIdsRoundTripAndSpecials) {
  const std::string model = std::string(FEDSHARD_TEST_FIXTURES) + "/sentencepiece/tiny-bpe.model";
  EXPECT_TRUE(is_sentencepiece_model(model));
  auto tok = make_tokenizer("sentencepiece:" + model);
  EXPECT_EQ(tok->kind(), TokenizerKind::SentencePiece);
  EXPECT_EQ(tok->spec(), "sentencepiece:" + model);
  EXPECT_EQ(tok->vocab_size(), 400u);
  EXPECT_EQ(tok->bos_id(), 1u);
  EXPECT_EQ(tok->eos_id(), 2u);
  // sentencepiece 0.2.3's encode of these (make_fixture.py's model): a control piece's text is text.
  EXPECT_EQ(tok->encode("Hello, world 123"),
            (Ids{331, 375, 332, 343, 343, 333, 352, 276, 264, 343, 342, 331, 379, 388, 394}));
  EXPECT_EQ(tok->encode("<s>"), (Ids{331, 392, 339, 393}));
  EXPECT_EQ(tok->encode("\xc3\xa9"), (Ids{331, 198, 172}));  // é by byte fallback
  EXPECT_EQ(tok->encode(""), Ids{});
  for (const std::string text : {"The Licensee's rights", "tabs\tand  spaces\n\nend", "héllo 中文 😀 42"})
    EXPECT_EQ(tok->decode(tok->encode(text)), text);
  EXPECT_EQ(tok->decode({1, 2}), "");  // BOS and EOS decode to nothing, as the library has them
  expect_has(error_of([&] { tok->decode({400}); }), {"token id 400", "400 pieces"});

  // Two tokenizers (two helpers) at once, and a long document in one request.
  auto other = make_tokenizer("sentencepiece:" + model);
  const std::string long_text(1 << 18, 'x');
  EXPECT_EQ(other->decode(other->encode(long_text)), long_text);
  EXPECT_EQ(tok->encode("Hello"), other->encode("Hello"));
}

TEST(SentencePiece, RefusesWhatIsNotAModel) {
  TempDir dir;
  expect_has(error_of([&] { make_tokenizer("sentencepiece:" + dir.write("text.model", "plain text\n")); }),
             {"text.model", "not a SentencePiece model"});
  expect_has(error_of([&] { make_tokenizer("sentencepiece:" + dir.write("x", "") + ".missing.model"); }),
             {"x.missing.model"});
  EXPECT_FALSE(is_sentencepiece_model(dir.write("ranks.tiktoken", "IQ== 0\n")));
  EXPECT_FALSE(is_sentencepiece_model(dir.write("blank-first.tiktoken", "\n\n\nIQ== 0\n")));
}

// ---- the encode pool of prepare --workers ----

// Documents come back in submission order with the ids one tokenizer gives, for any number of workers and a
// bound on text in flight far below one document; the first failing document (in order) is the error.
TEST(EncodePool, OrderIdsAndFirstErrorForAnyWorkers) {
  TempDir dir;
  const std::string spec = "tiktoken:" + dir.write("ab.tiktoken", base64("a") + " 0\n" + base64("b") + " 1\n");
  const auto reference = make_tokenizer(spec);
  std::mt19937 rng(5);
  std::vector<std::string> docs;
  for (int i = 0; i < 300; ++i) {
    std::string d(std::uniform_int_distribution<int>(0, 3000)(rng), 'a');
    for (auto& c : d) c = "ab"[rng() % 2];
    docs.push_back(d);
  }
  for (int workers : {1, 2, 4}) {
    for (size_t bound : {size_t{1}, size_t{1} << 20}) {
      EncodePool pool(spec, workers, bound);
      size_t next = 0;
      for (size_t i = 0; i < docs.size(); ++i)
        pool.submit(docs[i], "doc " + std::to_string(i), [&, i](std::vector<uint32_t>& ids) {
          ASSERT_EQ(i, next++);
          ASSERT_EQ(ids, reference->encode(docs[i]));
        });
      pool.finish();
      EXPECT_EQ(next, docs.size()) << workers << " workers";
    }
    // "c" has no token: documents 40 and 70 fail; 40's error comes first, after 0..39 were delivered.
    EncodePool pool(spec, workers, 1 << 20);
    size_t delivered = 0;
    const std::string msg = error_of([&] {
      for (size_t i = 0; i < 100; ++i)
        pool.submit(i == 40 || i == 70 ? "abc" : "ab", "doc " + std::to_string(i),
                    [&](std::vector<uint32_t>&) { ++delivered; });
      pool.finish();
    });
    expect_has(msg, {"doc 40: ", "byte 0x63"});
    EXPECT_EQ(delivered, 40u) << workers << " workers";
  }
}
