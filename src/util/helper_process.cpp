#include "util/helper_process.h"

#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "util/error.h"

extern char** environ;

namespace fedshard {
namespace {

namespace fs = std::filesystem;

// Beside the running program (an installed or copied fedshard), else where the build put it (the tests).
std::string locate(const std::string& program) {
  std::error_code ec;
  const auto beside = fs::read_symlink("/proc/self/exe", ec).parent_path() / program;
  if (!ec && fs::exists(beside)) return beside.string();
  const auto built = fs::path(FEDSHARD_HELPER_DIR) / program;
  return fs::exists(built) ? built.string() : "";
}

}  // namespace

bool HelperProcess::available(const std::string& program) { return !locate(program).empty(); }

HelperProcess::HelperProcess(const std::string& program, const std::vector<std::string>& args, std::string library,
                             std::string what)
    : library_(std::move(library)), what_(std::move(what)) {
  const std::string path = locate(program);
  FS_CHECK(!path.empty(), what_, ": the helper program ", program, " is neither beside this program nor in ",
           FEDSHARD_HELPER_DIR, " (make build builds it)");
  int ends[2];
  FS_CHECK(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, ends) == 0, program, ": socketpair: ",
           std::strerror(errno));
  // The socket is the helper's fd 3 and its stdout is our stderr: a library that prints cannot corrupt the stream.
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  const bool wired = posix_spawn_file_actions_adddup2(&actions, ends[1], kSocketFd) == 0 &&
                     posix_spawn_file_actions_adddup2(&actions, 2, 1) == 0;
  std::vector<char*> argv = {const_cast<char*>(path.c_str())};
  for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  pid_t pid = -1;
  const int spawned = wired ? ::posix_spawn(&pid, path.c_str(), &actions, nullptr, argv.data(), environ) : ENOMEM;
  posix_spawn_file_actions_destroy(&actions);
  ::close(ends[1]);
  if (spawned != 0) {
    ::close(ends[0]);
    throw Error(cat(what_, ": cannot start ", path, ": ", std::strerror(spawned)));
  }
  socket_ = ends[0];
  pid_ = pid;
}

HelperProcess::~HelperProcess() {
  if (socket_ >= 0) ::close(socket_);
  if (pid_ > 0) {
    // It holds nothing worth finishing, and may be busy in its library when an error of ours ends the work.
    ::kill(pid_, SIGKILL);
    while (::waitpid(pid_, nullptr, 0) < 0 && errno == EINTR) {
    }
  }
}

void HelperProcess::send(const void* data, size_t bytes, const char* doing) {
  const auto* p = static_cast<const char*>(data);
  while (bytes > 0) {
    const ssize_t put = ::send(socket_, p, bytes, MSG_NOSIGNAL);  // a helper that died is an error, not a SIGPIPE
    if (put < 0 && errno == EINTR) continue;
    if (put <= 0) lost(doing);
    p += put;
    bytes -= static_cast<size_t>(put);
  }
}

void HelperProcess::recv(void* data, size_t bytes, const char* doing) {
  auto* p = static_cast<char*>(data);
  while (bytes > 0) {
    const ssize_t got = ::recv(socket_, p, bytes, 0);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) lost(doing);
    p += got;
    bytes -= static_cast<size_t>(got);
  }
}

void HelperProcess::lost(const char* doing) {
  int status = 0;
  std::string how = "ended";
  pid_t waited = -1;
  while (pid_ > 0 && (waited = ::waitpid(pid_, &status, 0)) < 0 && errno == EINTR) {
  }
  if (pid_ > 0 && waited == pid_) {
    if (WIFSIGNALED(status)) how = cat("was killed by signal ", WTERMSIG(status));
    if (WIFEXITED(status)) how = cat("exited with status ", WEXITSTATUS(status));
  }
  pid_ = -1;
  throw Error(cat(what_, ": ", library_, " ", how, " while ", doing, " (in its helper process)"));
}

}  // namespace fedshard
