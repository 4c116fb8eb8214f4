#include "comm/rejoin.h"

#include <cstdint>
#include <filesystem>

#include "comm/survivors.h"
#include "util/error.h"

namespace fedshard::comm {

Grown spawn_replacements(MPI_Comm kept, int count, const std::vector<std::string>& argv) {
  Grown out;
  // argv[0] may be relative to a directory the runtime's daemons do not share, or name another build on PATH.
  const std::string program = std::filesystem::read_symlink("/proc/self/exe").string();
  std::vector<char*> args;
  for (size_t i = 1; i < argv.size(); ++i) args.push_back(const_cast<char*>(argv[i].c_str()));
  args.push_back(nullptr);
  MPI_Info info;
  MPI_Info_create(&info);
  const std::string dir = std::filesystem::current_path().string();
  MPI_Info_set(info, "wdir", dir.c_str());
  MPI_Comm inter = MPI_COMM_NULL;
  const int rc = MPI_Comm_spawn(program.c_str(), args.data(), count, info, 0, kept, &inter, MPI_ERRCODES_IGNORE);
  MPI_Info_free(&info);
  if (rc != MPI_SUCCESS) {
    out.error = cat("MPI_Comm_spawn of ", count, " process(es) failed: ", mpi_error_string(rc));
    return out;
  }
  MPI_Comm_set_errhandler(inter, MPI_ERRORS_RETURN);
  const int merged = MPI_Intercomm_merge(inter, /*high=*/0, &out.comm);
  MPI_Comm_free(&inter);
  if (merged != MPI_SUCCESS) {
    out.comm = MPI_COMM_NULL;
    out.error = cat("MPI_Intercomm_merge with the replacements failed: ", mpi_error_string(merged));
    return out;
  }
  MPI_Comm_set_errhandler(out.comm, MPI_ERRORS_RETURN);
  return out;
}

MPI_Comm join_spawning_job() {
  MPI_Comm parent = MPI_COMM_NULL;
  MPI_Comm_get_parent(&parent);
  if (parent == MPI_COMM_NULL) return MPI_COMM_NULL;
  MPI_Comm_set_errhandler(parent, MPI_ERRORS_RETURN);
  MPI_Comm merged = MPI_COMM_NULL;
  FS_CHECK(MPI_Intercomm_merge(parent, /*high=*/1, &merged) == MPI_SUCCESS,
           "MPI_Intercomm_merge with the job that started this replacement failed");
  MPI_Comm_free(&parent);  // as the spawners free theirs: none left for MPI_Finalize to disconnect (FailureWatch::stop)
  MPI_Comm_set_errhandler(merged, MPI_ERRORS_RETURN);
  return merged;
}

std::string broadcast_text(const std::string& text, int root, MPI_Comm comm) {
  int64_t n = static_cast<int64_t>(text.size());
  FS_CHECK(MPI_Bcast(&n, 1, MPI_INT64_T, root, comm) == MPI_SUCCESS, "MPI_Bcast of a text's length failed");
  std::string out = text;
  out.resize(static_cast<size_t>(n));
  FS_CHECK(n < INT32_MAX, "broadcast_text: ", n, " bytes");
  FS_CHECK(MPI_Bcast(out.data(), static_cast<int>(n), MPI_CHAR, root, comm) == MPI_SUCCESS,
           "MPI_Bcast of a text failed");
  return out;
}

}  // namespace fedshard::comm
