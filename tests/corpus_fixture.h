// A small real-text corpus for tests that need one without the network: the license texts every Debian
// system ships in /usr/share/common-licenses, in two sources ("gnu" and "other"), prepared with the byte
// tokenizer.
#pragma once

#include <filesystem>
#include <string>

#include "data/prepare.h"

namespace fedshard::fixture {

inline std::string license_corpus(const std::filesystem::path& root, double val_fraction = 0.25) {
  namespace fs = std::filesystem;
  const fs::path raw = root / "raw";
  for (const auto& entry : fs::directory_iterator("/usr/share/common-licenses")) {
    if (!entry.is_regular_file() || entry.is_symlink()) continue;
    const std::string name = entry.path().filename().string();
    const bool gnu = name.rfind("GPL", 0) == 0 || name.rfind("LGPL", 0) == 0 || name.rfind("GFDL", 0) == 0;
    fs::create_directories(raw / (gnu ? "gnu" : "other"));
    fs::copy_file(entry.path(), raw / (gnu ? "gnu" : "other") / name, fs::copy_options::overwrite_existing);
  }
  data::PrepareOptions opts;
  opts.inputs = {raw.string()};
  opts.out = (root / "corpus").string();
  opts.val_fraction = val_fraction;
  data::prepare_corpus(opts);
  return opts.out;
}

}  // namespace fedshard::fixture
