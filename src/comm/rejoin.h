// Growing a job back after a lost group (comm/survivors.h): the kept ranks start replacements for the lost
// ranks with MPI_Comm_spawn (the same program and command line, placed by the MPI runtime in the job's
// allocation), and both sides merge into one communicator, the kept ranks first in their order, then the
// replacements in spawn order. A build without ULFM never loses a rank, so never grows back either.
#pragma once

#include <mpi.h>

#include <string>
#include <vector>

namespace fedshard::comm {

struct Grown {
  MPI_Comm comm = MPI_COMM_NULL;  // errors return; MPI_COMM_NULL when the replacements could not be started
  std::string error;              // why not, in words
};
// Collective over `kept`: starts `count` processes running `argv` (argv[0] the program; this process's
// executable is started whatever argv[0] says) in the current directory.
Grown spawn_replacements(MPI_Comm kept, int count, const std::vector<std::string>& argv);

// In a process started by spawn_replacements: the merged communicator (errors return); elsewhere MPI_COMM_NULL.
MPI_Comm join_spawning_job();

// `text` of `root` on every member of comm.
std::string broadcast_text(const std::string& text, int root, MPI_Comm comm);

}  // namespace fedshard::comm
