// `fedshard prepare`: tokenizes text directories and JSONL files into token shards with a manifest (see data/prepare.h).
#include <cstdio>
#include <memory>

#include "cli/commands.h"
#include "data/prepare.h"
#include "train/fault_injection.h"

namespace fedshard::cli {
namespace {

// CLI11 would wrap "-1" around to 2^64-1 for an unsigned option, and its range messages print DBL_MAX.
const CLI::Validator kDigits(
    [](std::string& s) -> std::string {
      const bool digits = !s.empty() && s.find_first_not_of("0123456789") == std::string::npos;
      return digits ? "" : "must be a non-negative integer, got " + s;
    },
    "");

const CLI::Validator kFraction(
    [](std::string& s) -> std::string {
      double f = 0;
      if (!CLI::detail::lexical_cast(s, f) || !(f >= 0 && f < 1)) return "must be in [0, 1), got " + s;
      return "";
    },
    "in [0, 1)");

}  // namespace

Command add_prepare(CLI::App& app) {
  auto opts = std::make_shared<data::PrepareOptions>();
  CLI::App* sub = app.add_subcommand(
      "prepare",
      "Tokenize text into token shards plus manifest.json, holding out a validation split per source. Each "
      "--input DIR with subdirectories gives one source per subdirectory (e.g. a Brown genre); otherwise DIR "
      "itself is one source. Files are documents, except *.jsonl, *.jsonl.gz and *.jsonl.zst: one document "
      "per line (--text-key), and *.parquet: one document per row (--text-column).");
  sub->add_option("--input", opts->inputs,
                  "Input directory, JSONL or Parquet file, or glob pattern (repeatable); files given directly form one source "
                  "per parent directory")
      ->required()
      ->take_all();
  sub->add_option("--text-key,--text-column", opts->text_key, "JSONL: the key of each record's text; Parquet: the column")
      ->capture_default_str();
  sub->add_option("--source-key,--source-column", opts->source_key,
                  "JSONL: the key of each record's source label (for --partition by-source), Parquet: the column; "
                  "default: directories");
  sub->add_option("--out", opts->out, "Output directory; an existing prepared corpus there is replaced")
      ->required();
  sub->add_option("--tokenizer", opts->tokenizer, data::kTokenizerSpecs)
      ->capture_default_str();
  sub->add_option("--val-fraction", opts->val_fraction, "Fraction of each source's documents held out, in [0, 1)")
      ->capture_default_str()
      ->check(kFraction);
  sub->add_option("--seed", opts->seed, "Seed of the train/val split")->capture_default_str()->check(kDigits);
  sub->add_option("--max-shard-tokens", opts->max_shard_tokens, "Largest shard, in tokens")
      ->capture_default_str()
      ->check(kDigits);
  sub->add_flag("--resume", opts->resume,
               "Go on from OUT.partial, the finished shards a killed prepare left, if it ran with these options");
  sub->add_option("--workers", opts->workers,
                  "Threads encoding documents (0: the cores); the output is byte-identical for any number")
      ->capture_default_str()
      ->check(kDigits);

  Command cmd;
  cmd.app = sub;
  cmd.needs_mpi = false;
  cmd.run = [opts]() {
    const auto faults = train::prepare_faults_from_environment();
    opts->faults = faults.get();
    const data::PrepareSummary s = data::prepare_corpus(*opts);
    const data::Manifest& m = s.manifest;
    const data::SplitTotals train = m.totals("train"), val = m.totals("val");
    std::printf("prepare: %lld docs from %zu sources -> %s (tokenizer %s, vocab %u)\n",
                static_cast<long long>(train.documents + val.documents), m.sources.size(), opts->out.c_str(),
                m.tokenizer.spec.c_str(), m.tokenizer.vocab_size);
    std::printf("  train: %lld docs, %lld tokens in %lld shards\n", static_cast<long long>(train.documents),
                static_cast<long long>(train.tokens), static_cast<long long>(train.shards));
    std::printf("  val:   %lld docs, %lld tokens in %lld shards\n", static_cast<long long>(val.documents),
                static_cast<long long>(val.tokens), static_cast<long long>(val.shards));
    for (const auto& source : m.sources) {
      int64_t documents = 0, tokens = 0;
      for (const auto& e : m.shards)
        if (e.source == source) documents += e.documents, tokens += e.tokens;
      const auto bytes = s.text_bytes.count(source) ? s.text_bytes.at(source) : 0;
      std::printf("  source %s: %lld docs, %lld tokens, %.3f bytes of text per token\n", source.c_str(),
                  static_cast<long long>(documents), static_cast<long long>(tokens),
                  tokens > 0 ? static_cast<double>(bytes) / static_cast<double>(tokens) : 0.0);
    }
    if (m.unigram_val_ppl) std::printf("  unigram val perplexity (add-one, from train): %.3f\n", *m.unigram_val_ppl);
    if (s.resumed_shards > 0) std::printf("  resumed: %lld finished shards kept\n", static_cast<long long>(s.resumed_shards));
    std::printf("  %.2f s on %d worker%s\n", s.seconds, s.workers, s.workers == 1 ? "" : "s");
    return 0;
  };
  return cmd;
}

}  // namespace fedshard::cli
