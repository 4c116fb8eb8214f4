// A helper program of fedshard's (fedshard-sentencepiece, fedshard-parquet) run as a child process and spoken to
// over a socket. Third-party libraries whose bundled dependencies collide with LibTorch's in one process live
// there, and a crash of theirs becomes an error line of ours.
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

namespace fedshard {

class HelperProcess {
 public:
  // Starts `program` (found beside the running executable, else in the build directory) with `args`; the
  // socket is its file descriptor 3 (kSocketFd), its stdout and stderr are our stderr. Messages name `library` (what runs there) and `what`
  // (the file it works on).
  HelperProcess(const std::string& program, const std::vector<std::string>& args, std::string library,
                std::string what);
  ~HelperProcess();  // closes the socket, kills the helper and waits for it
  HelperProcess(const HelperProcess&) = delete;
  HelperProcess& operator=(const HelperProcess&) = delete;

  // Both throw "WHAT: LIBRARY was killed by signal N while DOING (in its helper process)" when it has gone.
  void send(const void* data, size_t bytes, const char* doing);
  void recv(void* data, size_t bytes, const char* doing);
  template <typename T>
  T recv_value(const char* doing) {
    T v{};
    recv(&v, sizeof v, doing);
    return v;
  }

  // True when `program` is beside the running executable or in the build directory.
  static bool available(const std::string& program);

  static constexpr int kSocketFd = 3;  // the helper's end

 private:
  // Throws fedshard::Error: "WHAT: LIBRARY was killed by signal N while DOING (in its helper process)".
  [[noreturn]] void lost(const char* doing);

  std::string library_, what_;
  int socket_ = -1;
  pid_t pid_ = -1;
};

}  // namespace fedshard
