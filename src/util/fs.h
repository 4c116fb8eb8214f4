// Files that are never half-written: write to a temporary name in the same directory, fsync, rename.
#pragma once

#include <string>

namespace fedshard {

// Atomically replaces `path` with `content`; throws fedshard::Error naming the path on failure.
void atomic_write(const std::string& path, const std::string& content);
// fsyncs a directory so a rename inside it is durable.
void fsync_dir(const std::string& dir);
// Creates `dir` (and parents) and checks that a file can be created in it; throws fedshard::Error.
void ensure_writable_dir(const std::string& dir);
std::string read_file(const std::string& path);

}  // namespace fedshard
