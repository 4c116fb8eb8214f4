#include "train/tensorboard.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include "util/crc32c.h"
#include "util/error.h"

namespace fedshard::train {

namespace {

// Protobuf wire format: a key is (field << 3 | wire type); varint = 0, 64-bit = 1, length-delimited = 2,
// 32-bit = 5. Fixed-width values are little-endian, as on every machine fedshard builds for.
void varint(std::string& out, uint64_t v) {
  while (v >= 0x80) {
    out.push_back(static_cast<char>(v | 0x80));
    v >>= 7;
  }
  out.push_back(static_cast<char>(v));
}

void key(std::string& out, int field, int wire_type) { varint(out, static_cast<uint64_t>(field) << 3 | wire_type); }

template <typename T>
void fixed(std::string& out, int field, T v) {
  key(out, field, sizeof(T) == 8 ? 1 : 5);
  char b[sizeof(T)];
  std::memcpy(b, &v, sizeof(T));
  out.append(b, sizeof(T));
}

void bytes(std::string& out, int field, const std::string& v) {
  key(out, field, 2);
  varint(out, v.size());
  out += v;
}

// Event: wall_time = 1 (double), step = 2 (int64), file_version = 3, summary = 5, session_log = 7.
std::string event(int64_t step) {
  std::string e;
  fixed(e, 1, std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count());
  key(e, 2, 0);
  varint(e, static_cast<uint64_t>(step));
  return e;
}

// Summary.Value: tag = 1, simple_value = 2 (float).
void add_scalars(std::string& summary, const std::string& prefix, const nlohmann::json& j, bool top) {
  for (const auto& [name, v] : j.items()) {
    if (top && name == "step") continue;  // the event's step
    const std::string tag = prefix + "/" + name;
    if (v.is_object()) {
      add_scalars(summary, tag, v, false);
    } else if (v.is_number()) {
      std::string value;
      bytes(value, 1, tag);
      fixed(value, 2, v.get<float>());
      bytes(summary, 1, value);
    }
  }
}

}  // namespace

void TensorBoardLog::open(const std::string& dir, int64_t resumed_after) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  FS_CHECK(!ec, "train.tensorboard: cannot create ", dir, ": ", ec.message());
  char host[256] = "localhost";
  gethostname(host, sizeof host - 1);
  // TensorBoard reads a directory's event files in name order (a running one only those after the file it is
  // reading), and this file's SessionLog START drops what the files before it hold from its step on: its name
  // sorts after every events file already there, the time first. A second writer of one run (the first kept rank
  // after rank 0 was lost) may start within the first one's second, on another host or with a smaller pid.
  const std::string prefix = "events.out.tfevents.";
  int64_t stamp =
      std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
  for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind(prefix, 0) == 0)
      stamp = std::max<int64_t>(stamp, std::strtoll(name.c_str() + prefix.size(), nullptr, 10) + 1);
  }
  path_ = (std::filesystem::path(dir) / (prefix + std::to_string(stamp) + "." + host + "." + std::to_string(getpid())))
              .string();
  file_ = std::fopen(path_.c_str(), "wx");
  FS_CHECK(file_ != nullptr, "train.tensorboard: cannot create ", path_, ": ", std::strerror(errno));
  std::string first = event(0);
  bytes(first, 3, "brain.Event:2");
  record(first);
  // A session start at the first step this run logs. TensorBoard takes a run's first start as its beginning and
  // each later one (a resume, in a newer file) as a restart: what the files before hold from that step on goes.
  std::string start = event(resumed_after + 1), session_log;
  key(session_log, 1, 0);  // SessionLog.status = START (1)
  varint(session_log, 1);
  bytes(start, 7, session_log);
  record(start);
}

TensorBoardLog::~TensorBoardLog() {
  if (file_) std::fclose(file_);
}

void TensorBoardLog::write(const nlohmann::json& line) {
  if (!file_ || !line.contains("step") || !line["step"].is_number_integer()) return;
  const std::string type = line.value("type", "");
  std::string prefix;
  if (type == "step")
    prefix = "train";
  else if (type == "eval")
    prefix = "eval/" + line.value("model", "global");
  else
    return;
  std::string summary;
  add_scalars(summary, prefix, line, true);
  std::string e = event(line["step"].get<int64_t>());
  bytes(e, 5, summary);
  record(e);
}

void TensorBoardLog::record(const std::string& event) {
  std::string r;
  const uint64_t n = event.size();
  char len[8];
  std::memcpy(len, &n, 8);
  r.append(len, 8);
  const uint32_t len_crc = masked_crc32c(len, 8), data_crc = masked_crc32c(event.data(), event.size());
  r.append(reinterpret_cast<const char*>(&len_crc), 4);
  r += event;
  r.append(reinterpret_cast<const char*>(&data_crc), 4);
  // One record per write and a flush per line, as metrics.jsonl: a killed run keeps every finished record.
  FS_CHECK(std::fwrite(r.data(), 1, r.size(), file_) == r.size() && std::fflush(file_) == 0, "cannot write ", path_,
           ": ", std::strerror(errno));
}

}  // namespace fedshard::train
