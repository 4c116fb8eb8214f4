#include "data/prepare.h"

#include <glob.h>
#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <numeric>
#include <thread>
#include <utility>

#include "data/encode_pool.h"
#include "data/jsonl.h"
#include "data/line_reader.h"
#include "data/parquet_records.h"
#include "data/partial_corpus.h"
#include "data/shard_file.h"
#include "data/shard_sequence.h"
#include "util/error.h"
#include "util/fnv1a.h"
#include "util/posix_file.h"
#include "util/rng.h"

namespace fedshard::data {
namespace {

namespace fs = std::filesystem;

struct Source {
  std::string label;
  std::string dir;
  std::vector<std::string> documents;  // sorted paths
};

bool hidden(const fs::path& p) { return p.filename().string().rfind('.', 0) == 0; }

bool has_suffix(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

bool is_jsonl(const std::string& path) {
  return has_suffix(path, ".jsonl") || has_suffix(path, ".jsonl.gz") || has_suffix(path, ".jsonl.zst");
}

bool is_parquet(const std::string& path) { return has_suffix(path, ".parquet"); }

// A file of records (many documents each), not one text document.
bool is_records(const std::string& path) { return is_jsonl(path) || is_parquet(path); }

void check_readable_kind(const std::string& path) {
  FS_CHECK(!is_parquet(path) || ParquetRecords::available(), path, ": Parquet input needs the helper ",
           "fedshard-parquet, which the build makes when the project venv has pyarrow: bash scripts/setup-hf.sh, ",
           "then make build");
  FS_CHECK(is_jsonl(path) || !is_compressed(path), path,
           ": a compressed file is read only as JSONL (*.jsonl.gz, *.jsonl.zst)");
}

// Inputs with glob characters that name no existing path are expanded (sorted); a pattern must match.
std::vector<std::string> expand_inputs(const std::vector<std::string>& inputs) {
  std::vector<std::string> out;
  for (const auto& input : inputs) {
    std::error_code ec;
    if (fs::exists(input, ec) || input.find_first_of("*?[") == std::string::npos) {
      out.push_back(input);
      continue;
    }
    glob_t g{};
    const int rc = ::glob(input.c_str(), 0, nullptr, &g);
    std::vector<std::string> matches(g.gl_pathv, g.gl_pathv + (rc == 0 ? g.gl_pathc : 0));
    globfree(&g);
    FS_CHECK(!matches.empty(), "input pattern ", input, " matches nothing");
    out.insert(out.end(), matches.begin(), matches.end());
  }
  return out;
}

std::vector<fs::directory_entry> list_dir(const fs::path& dir) {
  std::error_code ec;
  std::vector<fs::directory_entry> entries;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec))
    if (!hidden(it->path())) entries.push_back(*it);
  FS_CHECK(!ec, "cannot list ", dir.string(), ": ", ec.message());
  std::sort(entries.begin(), entries.end());
  return entries;
}

// Regular files below dir, sorted, skipping hidden files and everything under hidden directories.
std::vector<std::string> documents_under(const fs::path& dir) {
  std::error_code ec;
  std::vector<std::string> files;
  for (fs::recursive_directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    if (hidden(it->path())) {
      it.disable_recursion_pending();
      continue;
    }
    if (it->is_regular_file()) files.push_back(it->path().string());
  }
  FS_CHECK(!ec, "cannot list ", dir.string(), ": ", ec.message());
  std::sort(files.begin(), files.end());
  return files;
}

// labels_named: two inputs must not give one label (false when records name their sources).
std::vector<Source> find_sources(const std::vector<std::string>& inputs, bool labels_named) {
  std::vector<Source> sources;
  std::map<std::string, Source> by_parent;  // files given as inputs, by their directory
  for (const auto& input : inputs) {
    std::error_code ec;
    FS_CHECK(fs::exists(input, ec), "input ", input, " does not exist");
    if (fs::is_regular_file(input, ec)) {
      FS_CHECK(is_records(input), "input ", input, " is a file: give a directory of text documents, or *.jsonl, ",
               "*.jsonl.gz, *.jsonl.zst, *.parquet files");
      const fs::path parent = fs::path(input).parent_path().empty() ? fs::path(".") : fs::path(input).parent_path();
      auto& s = by_parent[fs::weakly_canonical(parent).string()];
      s.label = fs::weakly_canonical(parent).filename().string();
      s.dir = parent.string();
      s.documents.push_back(input);
      continue;
    }
    FS_CHECK(fs::is_directory(input, ec), "input ", input, " is not a directory or a regular file");
    const auto entries = list_dir(input);
    FS_CHECK(!entries.empty(), "input directory ", input, " is empty");
    std::vector<fs::path> subdirs, files;
    for (const auto& e : entries) (e.is_directory() ? subdirs : files).push_back(e.path());
    if (subdirs.empty()) {
      // The label of "corpus/" or "." is the name of the directory itself.
      sources.push_back({fs::weakly_canonical(input).filename().string(), input, documents_under(input)});
    } else {
      FS_CHECK(files.empty(), "input directory ", input, " holds both source subdirectories and files (",
               files.front().string(), "): move the files into a subdirectory");
      for (const auto& d : subdirs) sources.push_back({d.filename().string(), d.string(), documents_under(d)});
    }
  }
  for (auto& [parent, s] : by_parent) {
    std::sort(s.documents.begin(), s.documents.end());
    s.documents.erase(std::unique(s.documents.begin(), s.documents.end()), s.documents.end());
    sources.push_back(std::move(s));
  }
  for (const auto& s : sources)
    for (const auto& d : s.documents) check_readable_kind(d);
  for (const auto& s : sources) FS_CHECK(!s.documents.empty(), "source directory ", s.dir, " has no documents");
  std::sort(sources.begin(), sources.end(), [](const Source& a, const Source& b) { return a.label < b.label; });
  for (size_t i = 1; i < sources.size() && labels_named; ++i)
    FS_CHECK(sources[i - 1].label != sources[i].label, "source label \"", sources[i].label, "\" is given twice: ",
             sources[i - 1].dir, " and ", sources[i].dir);
  return sources;
}

// Which documents of a source are held out: round(f*n), at least one if f > 0, and never all of them (a source
// with one document stays in train). Seeded by the label so other sources do not shift this one's split.
std::vector<bool> val_documents(size_t n, double val_fraction, uint64_t seed, const std::string& label) {
  std::vector<bool> val(n, false);
  if (n < 2 || val_fraction <= 0) return val;
  const auto k = std::clamp<size_t>(static_cast<size_t>(std::llround(val_fraction * static_cast<double>(n))), 1, n - 1);
  std::vector<size_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  SplitMix64 rng(derive_seed({seed, fnv1a64(label.data(), label.size())}));
  shuffle(order, rng);
  for (size_t i = 0; i < k; ++i) val[order[i]] = true;
  return val;
}

// Whether one JSONL record is held out: a draw seeded by its source, its file's path within the source's
// directory and its line, so that it depends on nothing else (other files, other sources, the number of workers).
bool val_record(double val_fraction, uint64_t seed, const std::string& label, const std::string& file, int64_t line) {
  if (val_fraction <= 0) return false;
  SplitMix64 rng(derive_seed({seed, fnv1a64(label.data(), label.size()), fnv1a64(file.data(), file.size()),
                              static_cast<uint64_t>(line)}));
  return static_cast<double>(rng.next() >> 11) * 0x1.0p-53 < val_fraction;
}

// A source label from a record names shard files: keep it a plain file-name part.
void check_label(const std::string& label) {
  FS_CHECK(!label.empty() && label.size() <= 128 && label[0] != '.' && label.find('/') == std::string::npos &&
               std::none_of(label.begin(), label.end(), [](char c) { return static_cast<unsigned char>(c) < 0x20; }),
           "source \"", label, "\" cannot name a shard file (empty, over 128 bytes, a leading '.', a '/' or a control "
           "character)");
}

// exp of the mean negative log-likelihood of the val tokens under p(t) = (train(t) + 1) / (N_train + V).
double unigram_perplexity(const std::vector<uint64_t>& train, const std::vector<uint64_t>& val) {
  const double n_train = static_cast<double>(std::accumulate(train.begin(), train.end(), uint64_t{0}));
  const double log_denominator = std::log(n_train + static_cast<double>(train.size()));
  double nll = 0, n_val = 0;
  for (size_t t = 0; t < val.size(); ++t) {
    if (val[t] == 0) continue;
    nll += static_cast<double>(val[t]) * (log_denominator - std::log(static_cast<double>(train[t]) + 1));
    n_val += static_cast<double>(val[t]);
  }
  return std::exp(nll / n_val);
}

bool is_within(const fs::path& inner, const fs::path& outer) {
  const auto [o, i] = std::mismatch(outer.begin(), outer.end(), inner.begin(), inner.end());
  return o == outer.end();
}

// An existing OUT that is not a prepared corpus is probably a mistake in --out: never delete it.
void check_output_location(const std::string& out, const std::vector<std::string>& inputs) {
  std::error_code ec;
  if (fs::exists(out, ec)) {
    FS_CHECK(fs::is_regular_file(fs::path(out) / Manifest::kFileName, ec), "output directory ", out,
             " exists and is not a prepared corpus (no ", Manifest::kFileName, "): refusing to replace it");
  }
  const fs::path out_path = fs::weakly_canonical(out);
  for (const auto& input : inputs) {
    const fs::path in_path = fs::weakly_canonical(input);
    FS_CHECK(!is_within(out_path, in_path) && !is_within(in_path, out_path), "output directory ", out,
             " overlaps input directory ", input);
  }
}

// What the output depends on, for --resume to refuse a partial corpus made otherwise: the inputs (each
// document file's size and modification time), the keys, the tokenizer's vocabulary, the split, the shard size.
std::string options_of(const PrepareOptions& opts, const std::vector<Source>& sources, const Tokenizer& tok) {
  nlohmann::json files = nlohmann::json::array();
  for (const auto& source : sources)
    for (const auto& d : source.documents) {
      std::error_code ec;
      const auto size = fs::file_size(d, ec);
      const auto mtime = fs::last_write_time(d, ec).time_since_epoch().count();
      files.push_back({d, ec ? 0 : size, ec ? 0 : mtime});
    }
  nlohmann::json j = {{"inputs", files},
                      {"text_key", opts.text_key},
                      {"source_key", opts.source_key},
                      {"tokenizer", {tokenizer_kind_name(tok.kind()), tok.vocab_size(), tok.fingerprint()}},
                      {"val_fraction", opts.val_fraction},
                      {"seed", opts.seed},
                      {"max_shard_tokens", opts.max_shard_tokens}};
  return j.dump();
}

// A line on a terminal's stderr, redrawn at most once a second: documents, input read, its rate and the time
// left at that rate. Input is counted by file: the files done plus the text of the current one (capped at its
// size, so a compressed file's share is approximate).
class ProgressLine {
 public:
  ProgressLine(const std::vector<Source>& sources) : shown_(::isatty(2) == 1) {
    for (const auto& s : sources)
      for (const auto& d : s.documents) {
        std::error_code ec;
        total_ += static_cast<double>(fs::file_size(d, ec));
      }
  }
  void file_done(const std::string& path) {
    std::error_code ec;
    done_ += static_cast<double>(fs::file_size(path, ec));
    current_ = 0;
  }
  void document(const std::string& path, size_t text_bytes) {
    ++documents_;
    current_ += static_cast<double>(text_bytes);
    if (!shown_) return;
    const auto now = std::chrono::steady_clock::now();
    if (now - last_ < std::chrono::seconds(1)) return;
    last_ = now;
    std::error_code ec;
    const double read = done_ + std::min(current_, static_cast<double>(fs::file_size(path, ec)));
    const double seconds = std::chrono::duration<double>(now - start_).count();
    const double rate = read / std::max(seconds, 1e-9);
    std::fprintf(stderr, "\rprepare: %lld docs, %.1f of %.1f MB read, %.1f MB/s, ETA %.0f s   ",
                 static_cast<long long>(documents_), read / 1e6, total_ / 1e6, rate / 1e6,
                 rate > 0 ? std::max(0.0, total_ - read) / rate : 0.0);
    drawn_ = true;
  }
  ~ProgressLine() {
    if (drawn_) std::fprintf(stderr, "\n");
  }

 private:
  bool shown_, drawn_ = false;
  double total_ = 0, done_ = 0, current_ = 0;
  int64_t documents_ = 0;
  std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now(), last_ = start_;
};

void check_prepare_options(const PrepareOptions& opts) {
  FS_CHECK(!opts.inputs.empty(), "no inputs given");
  FS_CHECK(!opts.text_key.empty(), "the text key must not be empty");
  FS_CHECK(!opts.out.empty(), "no output directory given");
  FS_CHECK(opts.val_fraction >= 0 && opts.val_fraction < 1, "val fraction must be in [0, 1), got ",
           opts.val_fraction);
  FS_CHECK(opts.max_shard_tokens >= 1, "max shard tokens must be positive, got ", opts.max_shard_tokens);
  FS_CHECK(opts.workers >= 0, "workers must be 0 (the cores) or more, got ", opts.workers);
}

// The corpus as it is written: each source's train and val shard sequences in OUT.partial, the token counts of
// both splits (the unigram baseline) and the text read per source. Documents are encoded by the pool and
// counted and written here, in the order of the documents, whatever the workers; a document that a resumed
// sequence's finished shards hold is neither encoded nor written again.
class CorpusWriter {
 public:
  CorpusWriter(const PrepareOptions& opts, EncodePool& pool, PartialCorpus& partial, const std::vector<Source>& sources)
      : opts_(opts), pool_(pool), tok_(pool.tokenizer()), partial_(partial), train_counts_(tok_.vocab_size()),
        val_counts_(tok_.vocab_size()), progress_(sources) {}

  // Every document of a source: text files (split by val_documents), JSONL lines and Parquet rows (by val_record).
  void read(const Source& source);
  Manifest finish();
  std::map<std::string, uint64_t> text_bytes() const { return text_bytes_; }

 private:
  struct SourceShards {
    std::unique_ptr<ShardSequence> train, val;
  };
  void save_progress();
  std::unique_ptr<ShardSequence> sequence(const std::string& split, const std::string& label);
  SourceShards& shards_of(const std::string& label);
  void add(const std::string& label, bool val, std::string text, const std::string& where);
  // A record: line `index` of a JSONL file or row `index` of a Parquet file, `within` the source directory.
  void take(const Source& source, JsonlRecord& record, const std::string& within, int64_t index,
            const std::string& where);
  void read_jsonl(const Source& source, const std::string& path, const std::string& within);

  const PrepareOptions& opts_;
  EncodePool& pool_;
  const Tokenizer& tok_;
  PartialCorpus& partial_;
  std::vector<uint64_t> train_counts_, val_counts_;
  std::map<std::string, SourceShards> shards_;  // by label: the manifest's order
  std::map<std::string, uint64_t> text_bytes_;  // by source: for the summary's bytes per token
  ProgressLine progress_;
  const std::string* current_file_ = nullptr;
  int64_t finished_shards_ = 0;
  int64_t documents_ = 0;  // of the source being read
};

void CorpusWriter::save_progress() {
  std::map<std::pair<std::string, std::string>, const SequenceProgress*> all;
  for (const auto& [label, s] : shards_) {
    all[{"train", label}] = &s.train->progress();
    all[{"val", label}] = &s.val->progress();
  }
  partial_.save(all);
}

std::unique_ptr<ShardSequence> CorpusWriter::sequence(const std::string& split, const std::string& label) {
  SequenceProgress resumed = partial_.resumed(split, label);
  auto& counts = split == "val" ? val_counts_ : train_counts_;
  // A resumed sequence's finished shards count towards the baseline as if they had just been written.
  for (const auto& e : resumed.finished) {
    const ShardFile f((fs::path(partial_.path()) / e.file).string(),
                      {tok_.kind(), tok_.vocab_size(), tok_.fingerprint(), static_cast<uint64_t>(e.tokens), e.checksum, 0});
    for (uint64_t i = 0; i < f.header().tokens; ++i) ++counts[f.tokens()[i]];
  }
  // A shard is finished before progress.json says so: a fault there is the worst moment for --resume.
  return std::make_unique<ShardSequence>(partial_.path(), split, label, tok_, opts_.max_shard_tokens,
                                         std::move(resumed), [this] {
                                           opts_.faults->at(FaultPoint::Shard, ++finished_shards_);
                                           save_progress();
                                         });
}

CorpusWriter::SourceShards& CorpusWriter::shards_of(const std::string& label) {
  auto& s = shards_[label];
  if (!s.train) s = {sequence("train", label), sequence("val", label)};
  return s;
}

void CorpusWriter::add(const std::string& label, bool val, std::string text, const std::string& where) {
  SourceShards& to = shards_of(label);
  ShardSequence& seq = val ? *to.val : *to.train;
  text_bytes_[label] += text.size();
  progress_.document(*current_file_, text.size());
  ++documents_;
  if (seq.skip_document()) return;
  pool_.submit(std::move(text), where, [this, val, seq = &seq](std::vector<uint32_t>& tokens) {
    tokens.push_back(tok_.eos_id());
    seq->add_document(tokens);
    auto& counts = val ? val_counts_ : train_counts_;
    for (uint32_t t : tokens) ++counts[t];
  });
}

void CorpusWriter::take(const Source& source, JsonlRecord& record, const std::string& within, int64_t index,
                        const std::string& where) {
  const std::string& label = opts_.source_key.empty() ? source.label : record.source;
  if (!opts_.source_key.empty()) {
    try {
      check_label(label);
    } catch (const Error& e) {
      throw Error(cat(where, ": ", e.what()));
    }
  }
  add(label, val_record(opts_.val_fraction, opts_.seed, label, within, index), std::move(record.text), where);
}

void CorpusWriter::read_jsonl(const Source& source, const std::string& path, const std::string& within) {
  JsonlParser parser(opts_.text_key, opts_.source_key);
  JsonlRecord record;
  std::string line;
  LineReader lines(path);
  while (lines.next(line)) {
    if (line.find_first_not_of(" \t") == std::string::npos) continue;
    const std::string where = cat(path, ":", lines.line_number());
    try {
      parser.parse(line, record);
    } catch (const Error& e) {
      throw Error(cat(where, ": ", e.what()));
    }
    take(source, record, within, lines.line_number(), where);
  }
}

void CorpusWriter::read(const Source& source) {
  std::vector<std::string> text_files;
  for (const auto& d : source.documents)
    if (!is_records(d)) text_files.push_back(d);
  FS_CHECK(opts_.source_key.empty() || text_files.empty(), "--source-key names a key of JSONL or Parquet records, ",
           "but ", text_files.empty() ? "" : text_files.front(), " is a text document");
  const auto val = val_documents(text_files.size(), opts_.val_fraction, opts_.seed, source.label);
  size_t text_index = 0;
  documents_ = 0;
  for (const auto& path : source.documents) {
    current_file_ = &path;
    const std::string within = fs::path(path).lexically_relative(source.dir).string();
    if (is_parquet(path)) {
      ParquetRecords rows(path, opts_.text_key, opts_.source_key);
      JsonlRecord record;
      while (rows.next(record)) take(source, record, within, rows.row(), cat(path, ": row ", rows.row()));
    } else if (is_jsonl(path)) {
      read_jsonl(source, path, within);
    } else {
      add(source.label, val[text_index++], read_file(path), path);
    }
    progress_.file_done(path);
  }
  FS_CHECK(documents_ > 0, "source ", source.dir, " has no documents (its JSONL or Parquet files hold no records)");
}

Manifest CorpusWriter::finish() {
  pool_.finish();
  std::vector<ShardEntry> train_shards, val_shards;
  for (auto& [label, s] : shards_) {
    for (auto& e : s.train->finish()) train_shards.push_back(std::move(e));
    for (auto& e : s.val->finish()) val_shards.push_back(std::move(e));
  }
  Manifest m;
  m.tokenizer = {tok_.spec(), tok_.kind(), tok_.vocab_size(), tok_.bos_id(), tok_.eos_id(), tok_.fingerprint()};
  m.seed = opts_.seed;
  m.val_fraction = opts_.val_fraction;
  for (const auto& [label, s] : shards_) m.sources.push_back(label);
  m.shards = std::move(train_shards);
  m.shards.insert(m.shards.end(), val_shards.begin(), val_shards.end());
  if (!val_shards.empty()) m.unigram_val_ppl = unigram_perplexity(train_counts_, val_counts_);
  return m;
}

}  // namespace

PrepareSummary prepare_corpus(const PrepareOptions& opts) {
  const auto start = std::chrono::steady_clock::now();
  check_prepare_options(opts);
  const int workers = opts.workers > 0 ? opts.workers : std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
  EncodePool pool(opts.tokenizer, workers, static_cast<size_t>(workers) * (8 << 20));
  const auto inputs = expand_inputs(opts.inputs);
  const std::vector<Source> sources = find_sources(inputs, opts.source_key.empty());
  check_output_location(opts.out, inputs);
  PartialCorpus partial(opts.out, opts.resume, options_of(opts, sources, pool.tokenizer()));
  CorpusWriter writer(opts, pool, partial, sources);
  for (const auto& source : sources) writer.read(source);
  Manifest m = writer.finish();
  m.save(partial.path());
  const int64_t resumed_shards = partial.resumed_shards();
  partial.install();
  const std::chrono::duration<double> elapsed = std::chrono::steady_clock::now() - start;
  return {std::move(m), elapsed.count(), pool.workers(), resumed_shards, writer.text_bytes()};
}

}  // namespace fedshard::data
