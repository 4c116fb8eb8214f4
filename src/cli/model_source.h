// What `eval`, `generate` and `export` read a model from: a fedshard checkpoint, a run directory (its latest
// checkpoint) or a Hugging Face Llama directory, with the tokenizer that goes with it.
#pragma once

#include <CLI/CLI.hpp>

#include <memory>
#include <string>

#include "model/config.h"
#include "model/hf_adapter.h"
#include "parallel/flat_param.h"

namespace fedshard::cli {

struct ModelSource {
  std::string description;  // "checkpoint DIR (step N)" | "Hugging Face directory DIR"
  model::ModelConfig config;
  // Any element range of any parameter: a checkpoint's consolidated (FedAvg) model, or streamed from the HF files.
  parallel::SliceInit init;
  // make_tokenizer spec, "" when the source does not say: a checkpoint's own (older checkpoints: their data
  // directory's); an HF directory's "fedshard_tokenizer" (written by export) or tokenizer.model /
  // original/tokenizer.model (tiktoken format, as Meta ships Llama 3).
  std::string tokenizer;
  std::string no_tokenizer_because;  // why `tokenizer` is empty, when the source named one that is not found
  int64_t trained_seq_len = 0;  // the checkpoint's data.seq_len; 0 for an HF directory
  model::HfTokenIds ids;        // an HF directory's config.json ids; empty for a checkpoint
};

// The positional SOURCE argument of those commands.
void add_model_source_option(CLI::App& app, std::string& path);

// Throws fedshard::Error naming PATH when it is none of the three, or the first problem found in it.
ModelSource open_model_source(const std::string& path);

// The tokenizer spec to use: `flag` when given, else the source's; throws naming both when neither exists.
std::string tokenizer_spec(const ModelSource& source, const std::string& flag);

}  // namespace fedshard::cli
