// Each `fedshard` subcommand registers itself on the app and returns what main needs to run it.
#pragma once

#include <CLI/CLI.hpp>

#include <functional>

namespace fedshard::cli {

struct Command {
  CLI::App* app = nullptr;
  bool needs_mpi = false;     // train/eval run under mpirun; the others are single-process tools
  std::function<int()> run;   // returns the exit status; throws fedshard::Error on bad input
  // Checks what needs no MPI (flags, the config); main runs it before MPI_Init where the process was started
  // alone, so that a bad flag costs no MPI start-up. Under a launcher every rank would report it: run() does.
  std::function<void()> precheck;
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
Command add_serve(CLI::App& app);  // src/sites/no_sites.cpp where the build has no sites

}  // namespace fedshard::cli
