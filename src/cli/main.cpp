// fedshard: one binary, one subcommand per task. Bad input ends with one "fedshard: error: ..." line and
// exit status 2; a failure inside a multi-rank job aborts every rank with the failing rank named.
#include <CLI/CLI.hpp>
#include <c10/util/Exception.h>

#include <cstdlib>
#include <iostream>
#include <memory>
#include <vector>

#include "cli/commands.h"
#include "cli/startup.h"
#include "comm/failure_watch.h"
#include "comm/mpi_runtime.h"
#include "comm/work.h"
#include "util/build_info.h"
#include "util/error.h"

namespace {

// LibTorch's errors carry a C++ backtrace of twenty-odd frames after the message: print the message alone,
// on one line.
std::string first_line(const std::exception& e) {
  const auto* torch_error = dynamic_cast<const c10::Error*>(&e);
  std::string msg = torch_error ? torch_error->what_without_backtrace() : e.what();
  msg = msg.substr(0, msg.find('\n'));
  return msg;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace fedshard;
  CLI::App app{"fedshard: sharded (FSDP/HSDP) and federated (FL+FSDP/FL+HSDP) training of Llama-style models"};
  app.require_subcommand(1, 1);
  app.set_help_all_flag("--help-all", "Describe every subcommand and flag");
  app.set_version_flag("--version", [] { return "fedshard: " + build_description(); },
                       "Print what this binary was built with (LibTorch, CUDA, NCCL) and the GPUs it sees");
  std::vector<cli::Command> commands = {cli::add_info(app), cli::add_prepare(app), cli::add_train(app), cli::add_plan(app), cli::add_report(app), cli::add_export(app), cli::add_eval(app), cli::add_generate(app), cli::add_options(app), cli::add_tokenize(app), cli::add_serve(app)};

  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    // One line naming the problem, and where to look, instead of CLI11's multi-line dump.
    std::cerr << "fedshard: error: " << e.what() << " (see fedshard --help)" << std::endl;
    return 2;
  }

  const cli::Command* cmd = nullptr;
  for (const auto& c : commands)
    if (c.app->parsed()) cmd = &c;

  std::unique_ptr<comm::MpiRuntime> mpi;
  // Read when reporting: a replacement for a lost rank takes that rank's number after start-up.
  const auto rank = [&mpi] { return mpi ? mpi->world_rank() : 0; };
  const auto world = [&mpi] { return mpi ? mpi->world_size() : 1; };
  try {
    if (cmd->needs_mpi) {
      if (cmd->precheck && comm::MpiRuntime::started_alone()) cmd->precheck();
      mpi = std::make_unique<comm::MpiRuntime>(&argc, &argv);
    }
    const int code = cmd->run();
    if (mpi && comm::MpiRuntime::peer_lost()) mpi->finish(code);
    return code;
  } catch (const cli::StartupFailed& e) {
    // Already reported once by the lowest failing rank. A replacement that could not join ends as the job's
    // ranks do after a loss (comm/mpi_runtime.h).
    if (mpi && comm::MpiRuntime::peer_lost()) mpi->finish(e.code);
    return e.code;
  } catch (const Error& e) {
    if (world() == 1) {
      std::cerr << "fedshard: error: " << e.what() << std::endl;
      return 2;
    }
    const std::string line = cat("fedshard: error on rank ", rank(), " of ", world(), ": ", e.what());
    if (e.everywhere()) {
      if (e.reporter()) std::cerr << line << std::endl;
      if (mpi && comm::MpiRuntime::peer_lost()) mpi->finish(2);  // MPI_Finalize may hang (comm/mpi_runtime.h)
      return 2;
    }
    // Found by some ranks mid-job: the others may be inside a collective, so end them all.
    comm::MpiRuntime::abort(2, e.reporter() ? line : "");
  } catch (const std::exception& e) {
    // The whole message, LibTorch's backtrace included, only when asked for.
    if (const char* debug = std::getenv("FEDSHARD_DEBUG"); debug && std::string(debug) == "1")
      std::cerr << "fedshard: rank " << rank() << " (FEDSHARD_DEBUG=1): " << e.what() << std::endl;
    // A peer lost mid-job (a collective failed on a dead rank, or on one a survivor revoked): say who, as the other
    // ranks' failure watch does, once the library's failure detector knows (a revoked collective may fail first).
    const bool peer = dynamic_cast<const comm::PeerLost*>(&e) != nullptr;
    const auto lost = peer ? comm::FailureWatch::lost_ranks_within(2.0) : std::string();
    const std::string line =
        !peer ? cat("fedshard: rank ", rank(), " of ", world(), ": ", first_line(e))
              : cat("fedshard: error on rank ", rank(), " of ", world(), ": lost rank(s) ", lost.empty() ? "?" : lost,
                    ": ", first_line(e));
    if (world() > 1) comm::MpiRuntime::abort(3, line);
    std::cerr << line << std::endl;
    return 3;
  }
}
