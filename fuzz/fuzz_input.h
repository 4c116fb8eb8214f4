// What every fuzz target shares: the input written to a file where fedshard would read it (each target fuzzes
// the parser of a file a user hands in, through the same entry point the binary uses), and the contract the
// targets check: bad input ends in a fedshard::Error (the binary's one clear line); any other exception, or a
// crash, is a defect libFuzzer reports.
#pragma once

#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>

namespace fedshard::fuzz {

// A directory of this process's own (libFuzzer may run several jobs side by side), removed when the process
// exits normally (a crash leaves it, beside the input libFuzzer saves).
inline const std::filesystem::path& work_dir() {
  struct Dir {
    std::filesystem::path path = std::filesystem::temp_directory_path() / ("fedshard-fuzz-" + std::to_string(::getpid()));
    Dir() { std::filesystem::create_directories(path); }
    ~Dir() {
      std::error_code ec;
      std::filesystem::remove_all(path, ec);
    }
  };
  static const Dir dir;
  return dir.path;
}

// Writes the input to `name` in the work directory and returns its path.
inline std::string write_input(const std::string& name, const uint8_t* data, size_t size) {
  const auto path = work_dir() / name;
  std::ofstream(path, std::ios::binary | std::ios::trunc).write(reinterpret_cast<const char*>(data),
                                                                 static_cast<std::streamsize>(size));
  return path.string();
}

}  // namespace fedshard::fuzz
