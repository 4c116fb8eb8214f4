#include "cli/model_source.h"

#include <filesystem>
#include <map>

#include "data/manifest.h"
#include "data/sentencepiece_tokenizer.h"
#include "data/tokenizer.h"
#include "model/hf_checkpoint.h"
#include "train/checkpoint.h"
#include "util/error.h"
#include "util/posix_file.h"

namespace fedshard::cli {

namespace fs = std::filesystem;

namespace {

ModelSource from_checkpoint(const std::string& dir) {
  ModelSource s;
  s.config = train::checkpoint_model(dir);
  const auto meta = train::load_checkpoint_meta(dir, s.config, /*verify_all_files=*/true, -1);
  s.description = cat("checkpoint ", dir, " (step ", meta.step, ")");
  auto params = std::make_shared<std::map<std::string, at::Tensor>>(train::consolidated_parameters(meta));
  s.init = [params](const model::ParamSlot& slot, int64_t begin, at::Tensor dst) {
    dst.copy_(params->at(slot.name).reshape({-1}).narrow(0, begin, dst.numel()));
  };
  const auto data = meta.config.at("data");
  s.trained_seq_len = data.at("seq_len").get<int64_t>();
  if (!meta.tokenizer.empty()) {
    s.tokenizer = meta.tokenizer;  // carried by the checkpoint, file paths absolute
    return s;
  }
  // Older checkpoints name only the data directory, as the run was given it (resolved since).
  const auto& resolved = meta.config.value("resolved", nlohmann::json::object());
  const auto data_dir = resolved.value("data_dir", data.at("dir").get<std::string>());
  if (fs::exists(fs::path(data_dir) / data::Manifest::kFileName)) {
    s.tokenizer = data::Manifest::load(data_dir).tokenizer.spec;
  } else {
    s.no_tokenizer_because = cat("its data directory ", data_dir,
                                 fs::path(data_dir).is_relative() ? " (relative to the run's start directory)" : "",
                                 " is not found");
  }
  return s;
}

ModelSource from_hf(const std::string& dir) {
  ModelSource s;
  auto hf = std::make_shared<model::HfCheckpoint>(dir);
  s.description = cat("Hugging Face directory ", dir);
  s.config = hf->config();
  s.ids = hf->token_ids();
  s.init = [hf](const model::ParamSlot& slot, int64_t begin, at::Tensor dst) { hf->read(slot.name, begin, dst); };
  const auto config = nlohmann::json::parse(read_file(hf->config_path()));
  if (config.contains("fedshard_tokenizer") && config["fedshard_tokenizer"].is_string()) {
    // Written by `fedshard export`: "bytes", "tiktoken:FILE" or "hf:FILE" with FILE relative to the directory.
    s.tokenizer = config["fedshard_tokenizer"].get<std::string>();
    for (const std::string kind : {"tiktoken:", "hf:", "sentencepiece:"})
      if (s.tokenizer.rfind(kind, 0) == 0) s.tokenizer = kind + (fs::path(dir) / s.tokenizer.substr(kind.size())).string();
  } else {
    // A SentencePiece tokenizer.model is the original of the Llama 2 family, whose tokenizer.json beside it is
    // a conversion this reader refuses; otherwise Hugging Face's own file first, and Meta's tiktoken file
    // (also named tokenizer.model) where a directory has only that.
    const auto model = fs::path(dir) / "tokenizer.model";
    if (fs::exists(model) && data::is_sentencepiece_model(model.string())) s.tokenizer = "sentencepiece:" + model.string();
    for (const auto& [kind, f] : {std::pair{"hf:", "tokenizer.json"}, std::pair{"tiktoken:", "tokenizer.model"},
                                  std::pair{"tiktoken:", "original/tokenizer.model"}})
      if (s.tokenizer.empty() && fs::exists(fs::path(dir) / f)) s.tokenizer = kind + (fs::path(dir) / f).string();
  }
  return s;
}

}  // namespace

void add_model_source_option(CLI::App& app, std::string& path) {
  app.add_option("source", path,
                 "checkpoint directory, run directory (its latest checkpoint) or Hugging Face Llama directory")
      ->required();
}

ModelSource open_model_source(const std::string& path) {
  FS_CHECK(fs::is_directory(path), path, " is not a directory (a checkpoint, a run directory or a Hugging Face ",
           "Llama directory)");
  if (fs::exists(fs::path(path) / "meta.json")) return from_checkpoint(path);
  if (fs::exists(fs::path(path) / "config.json") && !fs::exists(fs::path(path) / "checkpoints")) return from_hf(path);
  const auto latest = train::find_checkpoint("auto", path);
  FS_CHECK(latest.has_value(), path, " is neither a checkpoint, a run directory with checkpoints, nor a Hugging ",
           "Face Llama directory (config.json + model.safetensors)");
  return from_checkpoint(*latest);
}

std::string tokenizer_spec(const ModelSource& source, const std::string& flag) {
  if (!flag.empty()) return flag;
  FS_CHECK(!source.tokenizer.empty(), source.description, " does not say which tokenizer it uses",
           source.no_tokenizer_because.empty() ? "" : " and " + source.no_tokenizer_because,
           "; name it with --tokenizer (", data::kTokenizerSpecs, ")");
  return source.tokenizer;
}

}  // namespace fedshard::cli
