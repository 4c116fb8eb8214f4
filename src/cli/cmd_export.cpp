// `fedshard export SOURCE --out DIR`: a checkpoint's (global) model, or any model source, as a Hugging Face Llama
// directory: config.json with the tokenizer's bos/eos ids, generation_config.json, and the weights in shards of
// at most --max-shard-size with model.safetensors.index.json (save_pretrained's layout).
#include <filesystem>
#include <iostream>
#include <memory>

#include "cli/commands.h"
#include "cli/model_source.h"
#include "data/tokenizer.h"
#include "model/hf_checkpoint.h"
#include "model/llama.h"
#include "util/byte_size.h"
#include "util/error.h"
#include "util/posix_file.h"

namespace fedshard::cli {

Command add_export(CLI::App& app) {
  struct Args {
    std::string source;
    std::string out;
    std::string format = "safetensors";
    std::string dtype = "float32";
    std::string max_shard_size = "5GB";
    std::string tokenizer;
  };
  auto a = std::make_shared<Args>();
  Command c;
  c.app = app.add_subcommand("export", "Write a model as a Hugging Face Llama directory");
  add_model_source_option(*c.app, a->source);
  c.app->add_option("--out", a->out, "output directory")->required();
  c.app->add_option("--format", a->format, "safetensors")->check(CLI::IsMember({"safetensors"}))->capture_default_str();
  c.app->add_option("--dtype", a->dtype, "weights on disk: float32 | bfloat16 | float16")
      ->check(CLI::IsMember({"float32", "bfloat16", "float16"}))
      ->capture_default_str();
  c.app->add_option("--max-shard-size", a->max_shard_size,
                    "largest weight file (GB = 1e9 bytes, as transformers); more weights are sharded with an index")
      ->capture_default_str();
  c.app->add_option("--tokenizer", a->tokenizer,
                    std::string(data::kTokenizerSpecs) + " (default: the tokenizer of the checkpoint's data directory)");
  c.run = [a] {
    namespace fs = std::filesystem;
    const int64_t max_shard = parse_byte_size(a->max_shard_size);
    const auto source = open_model_source(a->source);
    const auto& cfg = source.config;
    // bos/eos come from the tokenizer, so transformers' generate() starts and stops where training did.
    model::HfTokenIds ids = source.ids;
    std::string tokenizer_note;
    if (!a->tokenizer.empty() || !source.tokenizer.empty() || ids.eos.empty()) {
      const auto spec = tokenizer_spec(source, a->tokenizer);
      const auto tok = data::make_tokenizer(spec);
      FS_CHECK(tok->vocab_size() <= cfg.vocab_size, "tokenizer ", spec, " has ", tok->vocab_size(),
               " tokens but the model's vocabulary is ", cfg.vocab_size);
      ids = {{tok->bos_id()}, {tok->eos_id()}};
      tokenizer_note = spec;
    }
    ensure_writable_dir(a->out);
    auto config = model::hf_config(cfg, a->dtype, ids);
    // Lets `fedshard eval/generate` find the tokenizer again; transformers keeps unknown keys as attributes.
    if (tokenizer_note.rfind("tiktoken:", 0) == 0) {
      write_file_atomically((fs::path(a->out) / "tokenizer.model").string(), read_file(tokenizer_note.substr(9)));
      config["fedshard_tokenizer"] = "tiktoken:tokenizer.model";
    } else if (tokenizer_note.rfind("hf:", 0) == 0) {
      // The same file transformers' AutoTokenizer reads.
      write_file_atomically((fs::path(a->out) / "tokenizer.json").string(), read_file(tokenizer_note.substr(3)));
      config["fedshard_tokenizer"] = "hf:tokenizer.json";
    } else if (tokenizer_note.rfind("sentencepiece:", 0) == 0) {
      write_file_atomically((fs::path(a->out) / "tokenizer.model").string(), read_file(tokenizer_note.substr(14)));
      config["fedshard_tokenizer"] = "sentencepiece:tokenizer.model";
    } else if (!tokenizer_note.empty()) {
      config["fedshard_tokenizer"] = tokenizer_note;
    }
    model::Llama shapes(cfg, at::kFloat, /*materialize=*/false);
    std::map<std::string, std::vector<int64_t>> shape_of;
    for (const auto& p : shapes.named_parameters()) shape_of[p.name] = p.shape;
    const auto fetch = [&](const std::string& name) {
      at::Tensor full;
      const model::ParamSlot slot{name, &full, shape_of.at(name)};
      full = at::empty(slot.shape, at::kFloat);
      source.init(slot, 0, full.view({-1}));
      return full;
    };
    const auto files = model::write_hf_checkpoint(a->out, cfg, fetch, a->dtype, max_shard, config,
                                                  model::hf_generation_config(ids));
    std::cout << "exported " << source.description << " (model " << cfg.name << ", "
              << model::with_commas(cfg.param_count()) << " parameters, " << a->dtype << ") to " << a->out << " ("
              << files.size() << (files.size() == 1 ? " weight file" : " weight files and an index") << ")\n";
    return 0;
  };
  return c;
}

}  // namespace fedshard::cli
