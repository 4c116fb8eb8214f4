// Data pipeline: prepare (split, shards, manifest, baseline), shard validation, windows and the sampler.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "data/byte_tokenizer.h"
#include "data/manifest.h"
#include "data/prepare.h"
#include "data/shard_file.h"
#include "data/token_dataset.h"
#include "data/window_sampler.h"
#include "util/error.h"
#include "util/rng.h"

namespace fs = std::filesystem;
using fedshard::Error;
using namespace fedshard::data;

namespace {

constexpr uint32_t kEos = ByteTokenizer::kEos;

std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  EXPECT_TRUE(in) << p;
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

void spit(const fs::path& p, const std::string& contents) {
  fs::create_directories(p.parent_path());
  std::ofstream(p, std::ios::binary) << contents;
}

// The message of the fedshard::Error that f throws; "" (and a test failure) if it throws none.
std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected a fedshard::Error";
  return "";
}

std::vector<uint32_t> shard_tokens(const fs::path& dir, const Manifest& m, const ShardEntry& e) {
  ShardExpectation x{m.tokenizer.kind, m.tokenizer.vocab_size, m.tokenizer.fingerprint,
                     static_cast<uint64_t>(e.tokens), e.checksum, 0};
  ShardFile f((dir / e.file).string(), x);
  return {f.tokens(), f.tokens() + f.size()};
}

// Documents of one split (and optionally one source), each decoded without its EOS, in manifest order.
std::vector<std::string> documents(const fs::path& dir, const std::string& split, const std::string& source = "") {
  const Manifest m = Manifest::load(dir.string());
  std::vector<uint32_t> all;
  for (const auto& e : m.shards) {
    if (e.split != split || (!source.empty() && e.source != source)) continue;
    const auto t = shard_tokens(dir, m, e);
    all.insert(all.end(), t.begin(), t.end());
  }
  std::vector<std::string> docs(1);
  for (uint32_t t : all) {
    if (t == kEos) {
      docs.emplace_back();
    } else {
      EXPECT_LT(t, 256u);
      docs.back().push_back(static_cast<char>(t));
    }
  }
  EXPECT_TRUE(docs.back().empty()) << "split does not end with EOS";
  docs.pop_back();
  return docs;
}

// A corpus of real text in three sources, one of them nested two levels deep, plus a hidden file to skip.
class DataTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::temp_directory_path() /
            ("fedshard_test_data_" + std::to_string(getpid()) + "_" +
             ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(root_);
    corpus_ = root_ / "corpus";
    const fs::path licenses = "/usr/share/common-licenses";
    ASSERT_TRUE(fs::is_directory(licenses)) << "test text comes from " << licenses;
    for (const char* f : {"GFDL-1.2", "GFDL-1.3", "GPL-1", "GPL-2", "GPL-3", "LGPL-2", "LGPL-2.1", "LGPL-3"})
      add("gnu", f, slurp(licenses / f));
    for (const char* f : {"Apache-2.0", "Artistic", "BSD", "CC0-1.0", "MPL-1.1", "MPL-2.0"})
      add("permissive", f, slurp(licenses / f));
    // Paragraphs of the Apache license as short documents in nested folders.
    const std::string apache = slurp(licenses / "Apache-2.0");
    size_t begin = 0;
    for (int i = 0; i < 12; ++i) {
      const size_t end = apache.find("\n\n", begin);
      ASSERT_NE(end, std::string::npos);
      add("paragraphs", (i < 6 ? "a/" : "b/deeper/") + std::to_string(10 + i) + ".txt",
          apache.substr(begin, end - begin));
      begin = end + 2;
    }
    spit(corpus_ / "paragraphs" / ".hidden.txt", "must not be read");
  }
  void TearDown() override { fs::remove_all(root_); }

  void add(const std::string& source, const std::string& name, const std::string& text) {
    spit(corpus_ / source / name, text);
    texts_[source].push_back(text);  // callers add in sorted-path order
  }

  PrepareOptions options(const std::string& out_name, uint64_t seed = 7) const {
    PrepareOptions o;
    o.inputs = {corpus_.string()};
    o.out = (root_ / out_name).string();
    o.val_fraction = 0.25;
    o.seed = seed;
    return o;
  }

  fs::path root_, corpus_;
  std::map<std::string, std::vector<std::string>> texts_;  // source -> documents in sorted-path order
};

TEST_F(DataTest, PrepareWritesManifest) {
  const PrepareSummary s = prepare_corpus(options("out"));
  const Manifest m = Manifest::load((root_ / "out").string());
  EXPECT_EQ(m.tokenizer.spec, "bytes");
  EXPECT_EQ(m.tokenizer.kind, TokenizerKind::Bytes);
  EXPECT_EQ(m.tokenizer.vocab_size, 258u);
  EXPECT_EQ(m.tokenizer.bos, 256u);
  EXPECT_EQ(m.tokenizer.eos, 257u);
  EXPECT_EQ(m.tokenizer.fingerprint, ByteTokenizer().fingerprint());
  EXPECT_EQ(m.seed, 7u);
  EXPECT_EQ(m.val_fraction, 0.25);
  EXPECT_EQ(m.sources, (std::vector<std::string>{"gnu", "paragraphs", "permissive"}));
  EXPECT_EQ(s.manifest.shards.size(), m.shards.size());
  // round(0.25 n) val documents per source: 8 -> 2, 12 -> 3, 6 -> 2 (1.5 rounds up).
  const std::map<std::string, int64_t> val_docs = {{"gnu", 2}, {"paragraphs", 3}, {"permissive", 2}};
  std::vector<std::string> files;
  for (const auto& e : m.shards) {
    files.push_back(e.file);
    const auto n = static_cast<int64_t>(texts_.at(e.source).size());
    EXPECT_EQ(e.documents, e.split == "val" ? val_docs.at(e.source) : n - val_docs.at(e.source)) << e.file;
  }
  EXPECT_EQ(files, (std::vector<std::string>{"train-gnu-000.bin", "train-paragraphs-000.bin",
                                             "train-permissive-000.bin", "val-gnu-000.bin",
                                             "val-paragraphs-000.bin", "val-permissive-000.bin"}));
  EXPECT_EQ(m.totals("train").documents, 26 - 7);
  EXPECT_EQ(m.totals("val").documents, 7);
  ASSERT_TRUE(m.unigram_val_ppl.has_value());
  EXPECT_GT(*m.unigram_val_ppl, 1.0);
  EXPECT_LT(*m.unigram_val_ppl, 258.0);
  // Nothing but the corpus is left behind: no .tmp files, no OUT.tmp-* directories.
  std::set<std::string> in_root, in_out;
  for (const auto& e : fs::directory_iterator(root_)) in_root.insert(e.path().filename().string());
  EXPECT_EQ(in_root, (std::set<std::string>{"corpus", "out"}));
  for (const auto& e : fs::directory_iterator(root_ / "out")) in_out.insert(e.path().filename().string());
  std::set<std::string> expected(files.begin(), files.end());
  expected.insert("manifest.json");
  EXPECT_EQ(in_out, expected);
}

TEST_F(DataTest, ShardsHoldEveryDocumentOnceInOrder) {
  prepare_corpus(options("out"));
  const fs::path out = root_ / "out";
  for (const auto& [source, texts] : texts_) {
    const auto train = documents(out, "train", source);
    const auto val = documents(out, "val", source);
    EXPECT_FALSE(val.empty()) << source;
    // Each split keeps the sorted file order; together they are the source's files, each once.
    for (const auto* split : {&train, &val}) {
      std::vector<size_t> positions;
      for (const auto& d : *split) {
        const auto it = std::find(texts.begin(), texts.end(), d);
        ASSERT_NE(it, texts.end()) << source << ": a document that is no file";
        positions.push_back(static_cast<size_t>(it - texts.begin()));
      }
      EXPECT_TRUE(std::is_sorted(positions.begin(), positions.end())) << source;
    }
    std::multiset<std::string> both(train.begin(), train.end());
    both.insert(val.begin(), val.end());
    EXPECT_EQ(both, std::multiset<std::string>(texts.begin(), texts.end())) << source;
  }
}

TEST_F(DataTest, SplitIsDeterministicInSeed) {
  prepare_corpus(options("a", 7));
  prepare_corpus(options("b", 7));
  prepare_corpus(options("c", 8));
  const Manifest a = Manifest::load((root_ / "a").string());
  for (const auto& e : a.shards) EXPECT_EQ(slurp(root_ / "a" / e.file), slurp(root_ / "b" / e.file)) << e.file;
  EXPECT_EQ(slurp(root_ / "a" / "manifest.json"), slurp(root_ / "b" / "manifest.json"));
  EXPECT_NE(documents(root_ / "a", "val"), documents(root_ / "c", "val"));
}

TEST_F(DataTest, LongSplitsAreCutIntoShards) {
  PrepareOptions o = options("big");
  prepare_corpus(o);
  o.out = (root_ / "small").string();
  o.max_shard_tokens = 5000;  // below the longest license: some documents span shards
  prepare_corpus(o);
  const Manifest big = Manifest::load((root_ / "big").string());
  const Manifest small = Manifest::load((root_ / "small").string());
  EXPECT_GT(small.shards.size(), 2 * big.shards.size());
  for (const auto& e : small.shards) EXPECT_LE(e.tokens, 5000) << e.file;
  EXPECT_EQ(small.shards[1].file, "train-gnu-001.bin");
  for (const char* split : {"train", "val"}) {
    EXPECT_EQ(small.totals(split).tokens, big.totals(split).tokens);
    EXPECT_EQ(small.totals(split).documents, big.totals(split).documents);
    EXPECT_EQ(documents(root_ / "small", split), documents(root_ / "big", split));
  }
  EXPECT_EQ(small.unigram_val_ppl, big.unigram_val_ppl);
}

TEST_F(DataTest, ReplacesOnlyAPreparedCorpus) {
  prepare_corpus(options("out", 7));
  prepare_corpus(options("out", 9));
  EXPECT_EQ(Manifest::load((root_ / "out").string()).seed, 9u);
  EXPECT_EQ(std::distance(fs::directory_iterator(root_), fs::directory_iterator()), 2);  // corpus, out

  spit(root_ / "precious" / "notes.txt", "not a corpus");
  const std::string msg = error_of([&] { prepare_corpus(options("precious")); });
  EXPECT_NE(msg.find("precious exists and is not a prepared corpus"), std::string::npos) << msg;
  EXPECT_EQ(slurp(root_ / "precious" / "notes.txt"), "not a corpus");

  PrepareOptions inside = options("");
  inside.out = (corpus_ / "gnu" / "out").string();
  EXPECT_NE(error_of([&] { prepare_corpus(inside); }).find("overlaps input directory"), std::string::npos);
}

TEST_F(DataTest, BadInputsAreNamed) {
  PrepareOptions o = options("out");
  o.inputs = {(root_ / "nowhere").string()};
  std::string msg = error_of([&] { prepare_corpus(o); });
  EXPECT_NE(msg.find("input " + o.inputs[0] + " does not exist"), std::string::npos) << msg;

  fs::create_directories(root_ / "empty");
  o.inputs = {(root_ / "empty").string()};
  msg = error_of([&] { prepare_corpus(o); });
  EXPECT_NE(msg.find("input directory " + o.inputs[0] + " is empty"), std::string::npos) << msg;

  fs::create_directories(corpus_ / "nothing_here");
  msg = error_of([&] { prepare_corpus(options("out")); });
  EXPECT_NE(msg.find("source directory " + (corpus_ / "nothing_here").string() + " has no documents"),
            std::string::npos)
      << msg;

  o = options("out");
  o.val_fraction = 1;
  EXPECT_NE(error_of([&] { prepare_corpus(o); }).find("val fraction must be in [0, 1)"), std::string::npos);
  EXPECT_FALSE(fs::exists(root_ / "out"));
}

TEST_F(DataTest, ManifestErrors) {
  const fs::path out = root_ / "out";
  std::string msg = error_of([&] { Manifest::load(out.string()); });
  EXPECT_EQ(msg, "no manifest.json in " + out.string() + " (run fedshard prepare first)");

  prepare_corpus(options("out"));
  const fs::path file = out / "manifest.json";
  const std::string good = slurp(file);
  spit(file, good.substr(0, good.size() / 2));
  msg = error_of([&] { Manifest::load(out.string()); });
  EXPECT_EQ(msg.rfind(file.string() + ": not valid JSON", 0), 0u) << msg;

  auto j = nlohmann::json::parse(good);
  j["totals"]["val"]["tokens"] = 1;
  spit(file, j.dump());
  msg = error_of([&] { Manifest::load(out.string()); });
  EXPECT_NE(msg.find("totals.val.tokens is 1 but the shards add up to"), std::string::npos) << msg;

  j = nlohmann::json::parse(good);
  j["shards"][0].erase("checksum");
  spit(file, j.dump());
  msg = error_of([&] { Manifest::load(out.string()); });
  EXPECT_EQ(msg, file.string() + ": missing field \"shards[0].checksum\"");

  j = nlohmann::json::parse(good);
  j["shards"][0]["file"] = "../elsewhere.bin";
  spit(file, j.dump());
  EXPECT_NE(error_of([&] { Manifest::load(out.string()); }).find("not a plain file name"), std::string::npos);
}

TEST(ShardFile, RoundTrip) {
  const fs::path dir = fs::temp_directory_path() / ("fedshard_test_shard_" + std::to_string(getpid()));
  fs::create_directories(dir);
  const std::string path = (dir / "s.bin").string();
  std::vector<uint32_t> tokens;
  for (uint32_t i = 0; i < 700000; ++i) tokens.push_back(i * 2654435761u % 1000);  // spans write buffers
  ShardHeader h;
  {
    ShardWriter w(path, TokenizerKind::Tiktoken, 1000, 0x1234);
    w.append(tokens.data(), 3);
    w.append(tokens.data() + 3, tokens.size() - 3);
    EXPECT_FALSE(fs::exists(path)) << "visible before finish()";
    h = w.finish();
  }
  EXPECT_EQ(h.tokens, tokens.size());
  EXPECT_EQ(fs::file_size(path), 48 + 4 * tokens.size());
  EXPECT_FALSE(fs::exists(path + ".tmp"));
  const ShardFile f(path, {TokenizerKind::Tiktoken, 1000, 0x1234, tokens.size(), h.checksum, 1000});
  EXPECT_EQ(std::vector<uint32_t>(f.tokens(), f.tokens() + f.size()), tokens);
  EXPECT_EQ(f.header().fingerprint, 0x1234u);
  EXPECT_EQ(f.header().kind, TokenizerKind::Tiktoken);

  {
    ShardWriter abandoned((dir / "t.bin").string(), TokenizerKind::Bytes, 258, 1);
    abandoned.append(tokens.data(), 10);
  }
  EXPECT_FALSE(fs::exists(dir / "t.bin"));
  EXPECT_FALSE(fs::exists(dir / "t.bin.tmp"));

  // A token outside the vocabulary is caught even when header and checksum agree.
  ShardWriter w((dir / "u.bin").string(), TokenizerKind::Bytes, 258, 1);
  const uint32_t bad[] = {1, 2, 258};
  w.append(bad, 3);
  const ShardHeader hu = w.finish();
  const ShardExpectation agrees{TokenizerKind::Bytes, 258, 1, 3, hu.checksum, 0};
  const std::string msg = error_of([&] { ShardFile((dir / "u.bin").string(), agrees); });
  EXPECT_EQ(msg, (dir / "u.bin").string() + ": token 258 at position 2 is outside vocab 258");
  fs::remove_all(dir);
}

// Damaged shards and shards that disagree with the manifest or the model are refused, naming the file.
TEST_F(DataTest, BadShardsAreRefused) {
  const fs::path out = root_ / "out";
  prepare_corpus(options("out"));
  const Manifest m = Manifest::load(out.string());
  const ShardEntry& e = m.shards[0];
  const std::string path = (out / e.file).string();
  const std::string good = slurp(path);
  const auto expect_error = [&](const std::string& what) {
    const std::string msg = error_of([&] { TokenDataset(out.string(), "train", 16, 0); });
    EXPECT_EQ(msg.rfind(path + ": " + what, 0), 0u) << msg;
  };

  fs::resize_file(path, good.size() - 10);
  expect_error("truncated: " + std::to_string(e.tokens - 3) + " tokens in file, header says " +
               std::to_string(e.tokens));

  std::string flipped = good;
  flipped[48 + 1001] ^= 1;
  spit(path, flipped);
  expect_error("corrupt token data: checksum ");

  spit(path, good);
  EXPECT_NO_THROW(TokenDataset(out.string(), "train", 16, 258));
  EXPECT_NO_THROW(TokenDataset(out.string(), "train", 16, 512));  // a padded model vocabulary
  const std::string msg = error_of([&] { TokenDataset(out.string(), "train", 16, 100); });
  EXPECT_EQ(msg, path + ": vocab 258 but model vocab is only 100");

  auto j = nlohmann::json::parse(slurp(out / "manifest.json"));
  j["tokenizer"]["fingerprint"] = "0123456789abcdef";
  spit(out / "manifest.json", j.dump());
  expect_error("tokenizer fingerprint 2f2ec0474f1c4fe4 but manifest says 0123456789abcdef");

  spit(path, std::string("NOTASHARD") + good.substr(9));
  expect_error("not a fedshard token shard (bad magic)");
}

TEST_F(DataTest, EmptySplitIsAnError) {
  const fs::path out = root_ / "out";
  prepare_corpus(options("out"));
  const int64_t val_tokens = Manifest::load(out.string()).totals("val").tokens;
  std::string msg = error_of([&] { TokenDataset(out.string(), "val", val_tokens, 0); });
  EXPECT_EQ(msg, "val split of " + out.string() + " has " + std::to_string(val_tokens) +
                     " tokens: fewer than one window of seq_len+1 = " + std::to_string(val_tokens + 1));

  PrepareOptions o = options("none");
  o.val_fraction = 0;
  prepare_corpus(o);
  EXPECT_FALSE(Manifest::load(o.out).unigram_val_ppl.has_value());
  msg = error_of([&] { TokenDataset(o.out, "val", 8, 0); });
  EXPECT_EQ(msg, "val split of " + o.out + " has 0 tokens: fewer than one window of seq_len+1 = 9");
}

TEST_F(DataTest, WindowsAreShardSlices) {
  PrepareOptions o = options("out");
  o.max_shard_tokens = 20000;
  prepare_corpus(o);
  const fs::path out = root_ / "out";
  constexpr int64_t L = 100;
  const TokenDataset ds(out.string(), "train", L, 258);
  EXPECT_EQ(ds.seq_len(), L);
  const Manifest& m = ds.manifest();

  int64_t w = 0;
  for (const auto& e : m.shards) {
    if (e.split != "train") continue;
    const auto tokens = shard_tokens(out, m, e);
    const int64_t n = (e.tokens - 1) / L;
    for (int64_t i = 0; i < n; ++i, ++w) EXPECT_EQ(m.sources[ds.source_of(w)], e.source) << w;
    if (n == 0) continue;
    // Spot-check the first and last window of the shard against the file's own tokens.
    for (int64_t i : {int64_t{0}, n - 1}) {
      const at::Tensor b = ds.batch({w - n + i});
      ASSERT_EQ(b.sizes(), (std::vector<int64_t>{1, L + 1}));
      ASSERT_EQ(b.scalar_type(), at::kLong);
      for (int64_t k = 0; k <= L; ++k)
        ASSERT_EQ(b[0][k].item<int64_t>(), tokens[i * L + k]) << e.file << " window " << i << " token " << k;
    }
  }
  EXPECT_EQ(ds.num_windows(), w);
  const at::Tensor b = ds.batch({2, 0, w - 1});
  EXPECT_TRUE(b[0].equal(ds.batch({2})[0]));
  EXPECT_TRUE(b[1].equal(ds.batch({0})[0]));
  EXPECT_TRUE(b[2].equal(ds.batch({w - 1})[0]));
  EXPECT_THROW(ds.batch({w}), std::logic_error);
}

// The manifest records whichever tokenizer prepared the corpus; here a tiny tiktoken file (every byte plus
// one merge), so vocab 257 regular + 256 specials and EOS = 258.
TEST_F(DataTest, PreparesWithTiktoken) {
  std::string ranks;
  const char* alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  const auto base64 = [&](const std::string& in) {
    std::string out;
    for (size_t i = 0; i < in.size(); i += 3) {
      const size_t n = std::min<size_t>(3, in.size() - i);
      uint32_t quad = 0;
      for (size_t k = 0; k < 3; ++k) quad = quad << 8 | (k < n ? static_cast<unsigned char>(in[i + k]) : 0);
      for (size_t k = 0; k < 4; ++k) out.push_back(k <= n ? alphabet[quad >> (18 - 6 * k) & 63] : '=');
    }
    return out;
  };
  for (int b = 0; b < 256; ++b)
    ranks += base64(std::string(1, static_cast<char>(b))) + " " + std::to_string(b) + "\n";
  ranks += base64("th") + " 256\n";
  spit(root_ / "tiny.tiktoken", ranks);
  PrepareOptions o = options("out");
  o.tokenizer = "tiktoken:" + (root_ / "tiny.tiktoken").string();
  prepare_corpus(o);
  const auto tok = make_tokenizer(o.tokenizer);
  const Manifest m = Manifest::load(o.out);
  EXPECT_EQ(m.tokenizer.spec, o.tokenizer);
  EXPECT_EQ(m.tokenizer.kind, TokenizerKind::Tiktoken);
  EXPECT_EQ(m.tokenizer.vocab_size, 513u);
  EXPECT_EQ(m.tokenizer.eos, 258u);
  EXPECT_EQ(m.tokenizer.fingerprint, tok->fingerprint());
  const TokenDataset ds(o.out, "train", 64, 513);
  const auto first = shard_tokens(o.out, m, m.shards[0]);
  const auto eos = std::find(first.begin(), first.end(), m.tokenizer.eos);
  EXPECT_EQ(tok->decode({first.begin(), eos}), texts_.at(m.shards[0].source)[0]);
  int64_t bytes_and_eos = 0;
  for (const auto& [source, texts] : texts_)
    for (const auto& t : texts) bytes_and_eos += static_cast<int64_t>(t.size()) + 1;
  EXPECT_LT(m.totals("train").tokens + m.totals("val").tokens, bytes_and_eos) << "the merge \"th\" is unused";
}

// Add-one unigram over the bytes vocabulary (V = 258). Source "a" holds two copies of "aa", so whichever is held
// out, train = val = {a, a, EOS}; source "b" has one document, "b", which stays in train. Train counts: a 2,
// b 1, EOS 2 (N = 5); p(a) = p(EOS) = 3 / (5 + 258), so the val perplexity is 263 / 3.
TEST(Unigram, BaselineMatchesHandComputation) {
  const fs::path dir = fs::temp_directory_path() / ("fedshard_test_unigram_" + std::to_string(getpid()));
  spit(dir / "in" / "a" / "1.txt", "aa");
  spit(dir / "in" / "a" / "2.txt", "aa");
  spit(dir / "in" / "b" / "1.txt", "b");
  PrepareOptions o;
  o.inputs = {(dir / "in").string()};
  o.out = (dir / "out").string();
  o.val_fraction = 0.1;
  const PrepareSummary s = prepare_corpus(o);
  ASSERT_TRUE(s.manifest.unigram_val_ppl.has_value());
  EXPECT_NEAR(*s.manifest.unigram_val_ppl, 263.0 / 3.0, 1e-9);
  EXPECT_EQ(s.manifest.totals("val").tokens, 3);
  EXPECT_EQ(s.manifest.totals("train").tokens, 5);
  fs::remove_all(dir);
}

TEST(Rng, SplitMix64MatchesReference) {
  // First outputs of Vigna's splitmix64.c from state 0: the sample order must not depend on the platform.
  fedshard::SplitMix64 rng(0);
  EXPECT_EQ(rng.next(), 0xe220a8397b1dcdafULL);
  EXPECT_EQ(rng.next(), 0x6e789e6aa1b965f4ULL);
  EXPECT_EQ(rng.next(), 0x06c45d188009454fULL);
}

std::vector<int64_t> pool_of(int64_t n, int64_t offset) {
  std::vector<int64_t> p(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) p[static_cast<size_t>(i)] = offset + 3 * i;  // ids need not be 0..n-1
  return p;
}

TEST(WindowSampler, DeterministicInSeedStreamStepReader) {
  const WindowSampler a(pool_of(50, 7), 2, 4, 11, 0);
  const WindowSampler b(pool_of(50, 7), 2, 4, 11, 0);
  const WindowSampler other_seed(pool_of(50, 7), 2, 4, 12, 0);
  const WindowSampler other_stream(pool_of(50, 7), 2, 4, 11, 1);
  // b is asked out of order (random access must not depend on the cache).
  for (int64_t step : {40, 3, 0, 17}) EXPECT_EQ(b.windows(step, 1), a.windows(step, 1));
  for (int64_t step = 0; step < 30; ++step)
    for (int q = 0; q < 2; ++q) EXPECT_EQ(a.windows(step, q), b.windows(step, q)) << step << " " << q;
  EXPECT_NE(a.windows(0, 0), other_seed.windows(0, 0));
  EXPECT_NE(a.windows(0, 0), other_stream.windows(0, 0));
  EXPECT_EQ(a.pool_size(), 50);
}

TEST(WindowSampler, EachEpochUsesEveryWindowOnceAcrossReaders) {
  constexpr int kReaders = 3, kBatch = 7;
  const std::vector<int64_t> pool = pool_of(100, 5);  // increasing, so it is its own sorted form
  const WindowSampler s(pool, kReaders, kBatch, 3, 2);
  // Laid out by j = (step*readers + reader)*batch + b, epoch e is j in [100e, 100e+100). Steps of 21 windows
  // put epoch boundaries inside single calls (step 4, reader 2 takes j = 98..104).
  std::vector<int64_t> stream;
  for (int64_t step = 0; step < 20; ++step)
    for (int q = 0; q < kReaders; ++q) {
      const auto w = s.windows(step, q);
      ASSERT_EQ(w.size(), static_cast<size_t>(kBatch));
      stream.insert(stream.end(), w.begin(), w.end());
    }
  std::vector<std::vector<int64_t>> epochs;
  for (int e = 0; e < 4; ++e) {
    epochs.emplace_back(stream.begin() + 100 * e, stream.begin() + 100 * (e + 1));
    std::vector<int64_t> sorted = epochs.back();
    std::sort(sorted.begin(), sorted.end());
    EXPECT_EQ(sorted, pool) << "epoch " << e << " does not use every window exactly once";
  }
  EXPECT_NE(epochs[0], epochs[1]) << "epochs must be reshuffled";
  std::set<int64_t> step0;
  for (int q = 0; q < kReaders; ++q)
    for (int64_t w : s.windows(0, q)) EXPECT_TRUE(step0.insert(w).second) << "readers overlap at step 0";
  // A pool smaller than one batch wraps several epochs inside a single call.
  const WindowSampler tiny(pool_of(3, 0), 1, 8, 1, 0);
  const auto w = tiny.windows(0, 0);
  std::vector<int64_t> first(w.begin(), w.begin() + 3), second(w.begin() + 3, w.begin() + 6);
  std::sort(first.begin(), first.end());
  std::sort(second.begin(), second.end());
  EXPECT_EQ(first, pool_of(3, 0));
  EXPECT_EQ(second, pool_of(3, 0));
}

TEST(WindowSampler, RejectsEmptyPool) {
  EXPECT_EQ(error_of([] { WindowSampler({}, 1, 1, 0, 0); }), "no windows to sample from");
  EXPECT_THROW(WindowSampler({1}, 0, 1, 0, 0), Error);
}

}  // namespace
