// `fedshard options [--json | --markdown]`: the declared option space (train/option_space.h): the options that
// shape training state, their values, the refused combinations and why, and what a resume may change. The
// tables of docs/federation.md are its --markdown output; the pairwise harness (tests/pairwise.py) reads --json.
#include <iostream>
#include <memory>

#include "cli/commands.h"
#include "train/option_space.h"

namespace fedshard::cli {

Command add_options(CLI::App& app) {
  struct Args {
    bool json = false, markdown = false;
  };
  auto args = std::make_shared<Args>();
  Command c;
  c.app = app.add_subcommand("options", "Print the options that shape training state, the refused combinations and "
                                        "what a resume may change");
  auto* json = c.app->add_flag("--json", args->json, "as JSON (what tests/pairwise.py reads)");
  c.app->add_flag("--markdown", args->markdown, "as the Markdown tables of docs/federation.md")->excludes(json);
  c.run = [args] {
    if (args->json) {
      std::cout << train::option_space_json().dump(1) << "\n";
      return 0;
    }
    if (args->markdown) {
      std::cout << train::option_space_markdown();
      return 0;
    }
    for (const auto& o : train::declared_options()) std::cout << o.key << ": " << o.values << "\n";
    std::cout << "\n" << train::option_space_markdown();
    return 0;
  };
  return c;
}

}  // namespace fedshard::cli
