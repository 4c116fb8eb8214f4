// Each `fedshard` subcommand registers itself on the app and returns what main needs to run it.
#pragma once

#include <CLI/CLI.hpp>

#include <functional>

namespace fedshard::cli {

struct Command {
  CLI::App* app = nullptr;
  bool needs_mpi = false;     // train/eval run under mpirun; the others are single-process tools
  std::function<int()> run;   // returns the exit status; throws fedshard::Error on bad input
};

Command add_info(CLI::App& app);
Command add_prepare(CLI::App& app);
Command add_train(CLI::App& app);
Command add_plan(CLI::App& app);
Command add_report(CLI::App& app);
Command add_export(CLI::App& app);
Command add_eval(CLI::App& app);
Command add_generate(CLI::App& app);
Command add_options(CLI::App& app);
Command add_tokenize(CLI::App& app);

}  // namespace fedshard::cli
