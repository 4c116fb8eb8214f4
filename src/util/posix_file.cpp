#include "util/posix_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "util/error.h"

namespace fedshard {

UniqueFd::~UniqueFd() {
  if (fd_ >= 0) ::close(fd_);  // error paths only; success paths call close() and check it
}

void UniqueFd::close() {
  const int fd = fd_;
  fd_ = -1;
  FS_CHECK(::close(fd) == 0, "cannot close ", path_, ": ", std::strerror(errno));
}

UniqueFd open_file(const std::string& path, int flags, mode_t mode) {
  int fd;
  do fd = ::open(path.c_str(), flags | O_CLOEXEC, mode);
  while (fd < 0 && errno == EINTR);
  FS_CHECK(fd >= 0, "cannot open ", path, ": ", std::strerror(errno));
  return UniqueFd(fd, path);
}

void write_all(const UniqueFd& f, const void* data, size_t bytes) {
  const char* p = static_cast<const char*>(data);
  while (bytes > 0) {
    const ssize_t n = ::write(f.get(), p, bytes);
    if (n < 0 && errno == EINTR) continue;
    FS_CHECK(n > 0, "cannot write ", f.path(), ": ", n < 0 ? std::strerror(errno) : "no progress");
    p += n;
    bytes -= static_cast<size_t>(n);
  }
}

void write_all_at(const UniqueFd& f, const void* data, size_t bytes, off_t offset) {
  const char* p = static_cast<const char*>(data);
  while (bytes > 0) {
    const ssize_t n = ::pwrite(f.get(), p, bytes, offset);
    if (n < 0 && errno == EINTR) continue;
    FS_CHECK(n > 0, "cannot write ", f.path(), ": ", n < 0 ? std::strerror(errno) : "no progress");
    p += n;
    offset += n;
    bytes -= static_cast<size_t>(n);
  }
}

void sync_file(const UniqueFd& f) {
  FS_CHECK(::fsync(f.get()) == 0, "cannot sync ", f.path(), " to disk: ", std::strerror(errno));
}

void rename_file(const std::string& from, const std::string& to) {
  FS_CHECK(std::rename(from.c_str(), to.c_str()) == 0, "cannot rename ", from, " to ", to, ": ",
           std::strerror(errno));
}

void replace_dir(const std::string& from, const std::string& to) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!fs::exists(to)) return rename_file(from, to);
  if (::renameat2(AT_FDCWD, from.c_str(), AT_FDCWD, to.c_str(), RENAME_EXCHANGE) == 0) {
    fs::remove_all(from, ec);  // the old one, now
    return;
  }
  const fs::path target(to);
  const fs::path aside = target.parent_path() / ("." + target.filename().string() + ".replaced");
  fs::remove_all(aside, ec);
  rename_file(to, aside.string());
  rename_file(from, to);
  fs::remove_all(aside, ec);
}

std::string read_file(const std::string& path) {
  UniqueFd f = open_file(path, O_RDONLY);
  struct stat st;
  FS_CHECK(::fstat(f.get(), &st) == 0, "cannot stat ", path, ": ", std::strerror(errno));
  std::string data;
  data.reserve(static_cast<size_t>(st.st_size));
  char buf[1 << 16];
  for (;;) {
    const ssize_t n = ::read(f.get(), buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    FS_CHECK(n >= 0, "cannot read ", path, ": ", std::strerror(errno));
    if (n == 0) break;
    data.append(buf, static_cast<size_t>(n));
  }
  f.close();
  return data;
}

void write_file_atomically(const std::string& path, const std::function<void(const UniqueFd&)>& write) {
  const std::string tmp = path + ".tmp";
  try {
    UniqueFd f = open_file(tmp, O_WRONLY | O_CREAT | O_TRUNC);
    write(f);
    sync_file(f);
    f.close();
    rename_file(tmp, path);
  } catch (const Error&) {
    ::unlink(tmp.c_str());
    throw;
  }
  const auto parent = std::filesystem::path(path).parent_path();
  sync_dir(parent.empty() ? "." : parent.string());
}

void write_file_atomically(const std::string& path, std::string_view contents) {
  write_file_atomically(path, [&](const UniqueFd& f) { write_all(f, contents.data(), contents.size()); });
}

void sync_dir(const std::string& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return;
  ::fsync(fd);
  ::close(fd);
}

void ensure_writable_dir(const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  FS_CHECK(!ec, "cannot create directory ", dir, ": ", ec.message());
  const std::string probe = (std::filesystem::path(dir) / (".write-test." + std::to_string(::getpid()))).string();
  UniqueFd f = open_file(probe, O_WRONLY | O_CREAT | O_TRUNC);
  f.close();
  ::unlink(probe.c_str());
}

}  // namespace fedshard
