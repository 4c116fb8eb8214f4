// Checked POSIX file operations for writers that must not leave half-written files: each failure is a
// fedshard::Error naming the file and the OS reason.
#pragma once

#include <sys/types.h>

#include <functional>
#include <string>
#include <string_view>
#include <utility>

namespace fedshard {

// An open file descriptor, closed on destruction. close() is the checked way: a failed close can mean lost data.
class UniqueFd {
 public:
  UniqueFd(int fd, std::string path) : fd_(fd), path_(std::move(path)) {}
  UniqueFd(UniqueFd&& o) noexcept : fd_(o.fd_), path_(std::move(o.path_)) { o.fd_ = -1; }
  UniqueFd(const UniqueFd&) = delete;
  UniqueFd& operator=(const UniqueFd&) = delete;
  UniqueFd& operator=(UniqueFd&&) = delete;
  ~UniqueFd();

  int get() const { return fd_; }
  const std::string& path() const { return path_; }
  void close();

 private:
  int fd_;
  std::string path_;
};

UniqueFd open_file(const std::string& path, int flags, mode_t mode = 0644);
void write_all(const UniqueFd& f, const void* data, size_t bytes);
void write_all_at(const UniqueFd& f, const void* data, size_t bytes, off_t offset);
void sync_file(const UniqueFd& f);
void rename_file(const std::string& from, const std::string& to);
// Puts directory `from` where `to` is and removes the old `to`: swapped in one step (renameat2's
// RENAME_EXCHANGE), so a reader or a crash sees the old directory or the new one, never neither; where the file
// system cannot swap (some network file systems), the old one is first moved aside beside it.
void replace_dir(const std::string& from, const std::string& to);
std::string read_file(const std::string& path);

// Runs `write` on path.tmp, fsyncs it, renames it onto path and fsyncs the directory: readers see the old
// file or the whole new one, also after a power loss. On failure path.tmp is removed and path is untouched.
void write_file_atomically(const std::string& path, const std::function<void(const UniqueFd&)>& write);
void write_file_atomically(const std::string& path, std::string_view contents);
// fsyncs a directory so renames inside it are durable (best effort where directories cannot be opened).
void sync_dir(const std::string& dir);
// Creates dir (and parents) and checks that a file can be created in it.
void ensure_writable_dir(const std::string& dir);

}  // namespace fedshard
