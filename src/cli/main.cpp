#include <CLI/CLI.hpp>

int main(int argc, char** argv) {
  CLI::App app{"fedshard: sharded and federated training of Llama-style models"};
  app.require_subcommand(1);
  CLI11_PARSE(app, argc, argv);
  return 0;
}
