#include "cli/startup.h"

#include <mpi.h>

#include <climits>
#include <iostream>
#include <string>

#include "util/error.h"

namespace fedshard::cli {

void run_startup_phase(const std::function<void()>& body) {
  std::string message;
  try {
    body();
  } catch (const Error& e) {
    message = e.what();
  }
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  int first_failed = message.empty() ? INT_MAX : rank;
  MPI_Allreduce(MPI_IN_PLACE, &first_failed, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  if (first_failed == INT_MAX) return;
  if (rank == first_failed) std::cerr << "fedshard: error: " << message << std::endl;
  throw StartupFailed{2};
}

}  // namespace fedshard::cli
