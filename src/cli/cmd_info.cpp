// `fedshard info --model NAME`: architecture and exact parameter count from the config arithmetic alone
// (no tensors are built, so the 70B preset prints instantly).
#include <iostream>
#include <memory>

#include "cli/commands.h"
#include "model/config.h"
#include "util/build_info.h"

namespace fedshard::cli {

Command add_info(CLI::App& app) {
  struct Args {
    std::string model = "small";
    int64_t vocab = 0;
  };
  auto args = std::make_shared<Args>();
  Command c;
  c.app = app.add_subcommand("info", "Print a model preset's architecture and exact parameter count");
  c.app->add_option("--model", args->model, "preset: tiny, small, llama3.2-1b, llama3.1-8b, llama3.1-70b")
      ->capture_default_str();
  c.app->add_option("--vocab-size", args->vocab,
                    "vocabulary size for presets that take it from the data (tiny, small); default: the byte "
                    "tokenizer's 258");
  c.run = [args] {
    auto cfg = model::preset(args->model);
    const bool from_data = cfg.vocab_size == 0;
    if (args->vocab > 0) cfg.vocab_size = args->vocab;
    if (cfg.vocab_size == 0) cfg.vocab_size = 258;
    cfg.validate();
    std::cout << model::describe(cfg);
    if (from_data && args->vocab == 0)
      std::cout << "  (vocab follows the data's tokenizer; shown for the byte tokenizer, 258)\n";
    std::cout << "build: " << build_description() << "\n";
    return 0;
  };
  return c;
}

}  // namespace fedshard::cli
