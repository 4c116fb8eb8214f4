#include "data/partial_corpus.h"

#include <fcntl.h>
#include <stdlib.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "util/error.h"
#include "util/posix_file.h"

namespace fedshard::data {
namespace {

namespace fs = std::filesystem;
using Json = nlohmann::json;

constexpr const char* kProgress = "progress.json";

// The path of the first key where two option sets differ, for the refusal.
std::string first_difference(const Json& a, const Json& b, const std::string& at = "") {
  if (a.type() != b.type() || !a.is_object()) return at.empty() ? "the options" : at;
  for (const auto& [key, value] : a.items())
    if (!b.contains(key) || b[key] != value) return first_difference(value, b.value(key, Json()), at + "/" + key);
  for (const auto& [key, value] : b.items())
    if (!a.contains(key)) return at + "/" + key;
  return "the options";
}

}  // namespace

PartialCorpus::PartialCorpus(const std::string& out, bool resume, const std::string& options)
    : out_(out), path_(out + ".partial"), options_(options) {
  const fs::path parent = fs::path(out).parent_path();
  std::error_code ec;
  if (!parent.empty()) fs::create_directories(parent, ec);
  FS_CHECK(!ec, "cannot create ", parent.string(), ": ", ec.message());
  if (::mkdir(path_.c_str(), 0755) != 0)
    FS_CHECK(errno == EEXIST && fs::is_directory(path_, ec), "cannot create ", path_, ": ", std::strerror(errno));
  lock_ = ::open(path_.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  FS_CHECK(lock_ >= 0, "cannot open ", path_, ": ", std::strerror(errno));
  if (::flock(lock_, LOCK_EX | LOCK_NB) != 0) {
    ::close(lock_);
    lock_ = -1;
    path_.clear();  // another prepare's: not ours to remove
    throw Error(cat("another prepare is writing ", out, " (", out, ".partial is locked)"));
  }

  const auto progress_file = fs::path(path_) / kProgress;
  if (resume && fs::exists(progress_file)) {
    Json saved;
    try {
      saved = Json::parse(read_file(progress_file.string()));
    } catch (const Json::exception& e) {
      throw Error(cat(progress_file.string(), ": not valid JSON (", e.what(), ")"));
    }
    const Json want = Json::parse(options_);
    FS_CHECK(saved.contains("options") && saved["options"] == want, out, ".partial was made with other options (",
             first_difference(saved.value("options", Json()), want),
             " differs): run prepare without --resume to start over");
    try {
      for (const auto& s : saved.at("sequences")) {
        SequenceProgress p;
        p.documents = s.at("documents").get<int64_t>();
        p.carry = s.at("carry").get<uint64_t>();
        for (const auto& e : s.at("finished"))
          p.finished.push_back({e.at("file").get<std::string>(), s.at("split").get<std::string>(),
                                s.at("source").get<std::string>(), e.at("tokens").get<int64_t>(),
                                e.at("documents").get<int64_t>(), e.at("checksum").get<uint64_t>()});
        resumed_[{s.at("split").get<std::string>(), s.at("source").get<std::string>()}] = std::move(p);
      }
    } catch (const Json::exception& e) {
      throw Error(cat(progress_file.string(), ": ", e.what()));
    }
  }
  // Whatever the finished shards of the progress do not name goes: a fresh start, or a shard of a killed run
  // finished after its last save (it is written again, the same).
  std::map<std::string, bool> keep = {{kProgress, resume}};
  for (const auto& [key, p] : resumed_)
    for (const auto& e : p.finished) keep[e.file] = true;
  for (const auto& entry : fs::directory_iterator(path_)) {
    const auto name = entry.path().filename().string();
    if (!keep[name]) fs::remove_all(entry.path());
  }
}

PartialCorpus::~PartialCorpus() {
  if (lock_ >= 0) ::close(lock_);
  std::error_code ec;
  if (!path_.empty()) fs::remove_all(path_, ec);  // best effort on an error path
}

SequenceProgress PartialCorpus::resumed(const std::string& split, const std::string& source) const {
  const auto it = resumed_.find({split, source});
  return it == resumed_.end() ? SequenceProgress{} : it->second;
}

int64_t PartialCorpus::resumed_shards() const {
  int64_t n = 0;
  for (const auto& [key, p] : resumed_) n += static_cast<int64_t>(p.finished.size());
  return n;
}

void PartialCorpus::save(const std::map<std::pair<std::string, std::string>, const SequenceProgress*>& sequences) const {
  Json j;
  j["options"] = Json::parse(options_);
  j["sequences"] = Json::array();
  for (const auto& [key, p] : sequences) {
    Json finished = Json::array();
    for (const auto& e : p->finished)
      finished.push_back({{"file", e.file}, {"tokens", e.tokens}, {"documents", e.documents}, {"checksum", e.checksum}});
    j["sequences"].push_back({{"split", key.first}, {"source", key.second}, {"documents", p->documents},
                              {"carry", p->carry}, {"finished", finished}});
  }
  write_file_atomically((fs::path(path_) / kProgress).string(), j.dump() + "\n");
}

void PartialCorpus::install() {
  fs::remove(fs::path(path_) / kProgress);
  std::error_code ec;
  if (!fs::exists(out_, ec)) {
    rename_file(path_, out_);
  } else {
    // The old corpus moves aside first and is deleted only after the swap.
    std::string aside = out_ + ".old-XXXXXX";
    FS_CHECK(::mkdtemp(aside.data()) != nullptr, "cannot create a directory next to ", out_, ": ",
             std::strerror(errno));
    const std::string previous = (fs::path(aside) / "previous").string();
    rename_file(out_, previous);
    try {
      rename_file(path_, out_);
    } catch (const Error&) {
      // Put the old corpus back; if even that fails, leave it where it is rather than delete it.
      if (std::rename(previous.c_str(), out_.c_str()) == 0) fs::remove_all(aside, ec);
      throw;
    }
    fs::remove_all(aside, ec);
  }
  path_.clear();
  ::close(lock_);
  lock_ = -1;
}

}  // namespace fedshard::data
