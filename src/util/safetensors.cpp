#include "util/safetensors.h"

#include <fcntl.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include <cstring>
#include <filesystem>

#include "util/error.h"
#include "util/fnv1a.h"
#include "util/posix_file.h"

namespace fedshard {

namespace {

struct DtypeInfo {
  const char* name;
  at::ScalarType type;
  int bytes;
};

const DtypeInfo kDtypes[] = {{"F64", at::kDouble, 8}, {"F32", at::kFloat, 4},  {"F16", at::kHalf, 2},
                             {"BF16", at::kBFloat16, 2}, {"I64", at::kLong, 8}, {"I32", at::kInt, 4},
                             {"I16", at::kShort, 2},  {"I8", at::kChar, 1},    {"U8", at::kByte, 1},
                             {"BOOL", at::kBool, 1}};

const DtypeInfo* by_name(const std::string& n) {
  for (const auto& d : kDtypes)
    if (n == d.name) return &d;
  return nullptr;
}

const DtypeInfo& by_type(at::ScalarType t) {
  for (const auto& d : kDtypes)
    if (d.type == t) return d;
  throw std::logic_error(cat("safetensors: no dtype for ", c10::toString(t)));
}

void read_exact(int fd, void* buf, size_t n, uint64_t offset, const std::string& path) {
  auto* p = static_cast<char*>(buf);
  while (n > 0) {
    const ssize_t r = ::pread(fd, p, n, static_cast<off_t>(offset));
    if (r < 0 && errno == EINTR) continue;
    FS_CHECK(r > 0, path, ": unexpected end of file");
    p += r;
    n -= static_cast<size_t>(r);
    offset += static_cast<uint64_t>(r);
  }
}

}  // namespace

uint64_t write_safetensors(const std::string& path, const std::vector<std::pair<std::string, at::Tensor>>& tensors,
                           const std::map<std::string, std::string>& metadata) {
  nlohmann::ordered_json header;
  if (!metadata.empty()) header["__metadata__"] = metadata;
  uint64_t offset = 0;
  for (const auto& [name, t] : tensors) {
    FS_ASSERT(t.is_contiguous() && t.device().is_cpu(), "safetensors: ", name, " must be a contiguous CPU tensor");
    const uint64_t bytes = t.nbytes();
    header[name] = {{"dtype", by_type(t.scalar_type()).name},
                    {"shape", t.sizes().vec()},
                    {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
  }
  std::string json = header.dump();
  json.append((8 - json.size() % 8) % 8, ' ');  // the buffer starts 8-byte aligned
  const uint64_t n = json.size();
  unsigned char size_le[8];
  for (int i = 0; i < 8; ++i) size_le[i] = static_cast<unsigned char>(n >> (8 * i));

  uint64_t checksum = kFnv1aOffset;
  write_file_atomically(path, [&](const UniqueFd& f) {
    write_all(f, size_le, 8);
    write_all(f, json.data(), json.size());
    checksum = fnv1a64(size_le, 8, checksum);
    checksum = fnv1a64(json.data(), json.size(), checksum);
    for (const auto& [name, t] : tensors) {
      write_all(f, t.data_ptr(), t.nbytes());
      checksum = fnv1a64(t.data_ptr(), t.nbytes(), checksum);
    }
  });
  return checksum;
}

SafetensorsFile::SafetensorsFile(const std::string& path) : path_(path) {
  UniqueFd f = open_file(path, O_RDONLY);
  const uint64_t file_size = std::filesystem::file_size(path);
  FS_CHECK(file_size >= 8, path, ": too short for a safetensors file (", file_size, " bytes)");
  unsigned char size_le[8];
  read_exact(f.get(), size_le, 8, 0, path);
  uint64_t n = 0;
  for (int i = 0; i < 8; ++i) n |= static_cast<uint64_t>(size_le[i]) << (8 * i);
  FS_CHECK(n <= file_size - 8 && n <= (100u << 20), path, ": header size ", n, " does not fit the file (", file_size,
           " bytes)");
  std::string json(n, '\0');
  read_exact(f.get(), json.data(), n, 8, path);
  data_start_ = 8 + n;
  nlohmann::json header;
  try {
    header = nlohmann::json::parse(json);
  } catch (const std::exception& e) {
    throw Error(cat(path, ": header is not valid JSON (", e.what(), ")"));
  }
  FS_CHECK(header.is_object(), path, ": header is not a JSON object");
  const uint64_t buffer = file_size - data_start_;
  std::vector<std::pair<uint64_t, uint64_t>> spans;
  for (const auto& [name, v] : header.items()) {
    if (name == "__metadata__") {
      FS_CHECK(v.is_object(), path, ": __metadata__ must be an object of strings");
      for (const auto& [k, mv] : v.items()) {
        FS_CHECK(mv.is_string(), path, ": __metadata__ value of '", k, "' is not a string");
        metadata_[k] = mv.get<std::string>();
      }
      continue;
    }
    try {
      SafetensorsEntry e;
      e.dtype = v.at("dtype").get<std::string>();
      e.shape = v.at("shape").get<std::vector<int64_t>>();
      const auto off = v.at("data_offsets").get<std::vector<uint64_t>>();
      FS_CHECK(off.size() == 2, "");
      e.begin = off[0];
      e.end = off[1];
      const auto* d = by_name(e.dtype);
      FS_CHECK(d != nullptr, path, ": tensor '", name, "' has unknown dtype '", e.dtype, "'");
      uint64_t numel = 1;
      for (int64_t s : e.shape) {
        FS_CHECK(s >= 0, path, ": tensor '", name, "' has a negative dimension");
        numel *= static_cast<uint64_t>(s);
      }
      FS_CHECK(e.begin <= e.end && e.end <= buffer, path, ": tensor '", name, "' lies outside the file (offsets [",
               e.begin, ", ", e.end, ") in a buffer of ", buffer, " bytes)");
      FS_CHECK(e.end - e.begin == numel * d->bytes, path, ": tensor '", name, "' has ", e.end - e.begin,
               " bytes for shape and dtype needing ", numel * d->bytes);
      spans.emplace_back(e.begin, e.end);
      entries_[name] = e;
    } catch (const Error&) {
      throw;
    } catch (const std::exception& ex) {
      throw Error(cat(path, ": malformed entry for tensor '", name, "' (", ex.what(), ")"));
    }
  }
  std::sort(spans.begin(), spans.end());
  for (size_t i = 1; i < spans.size(); ++i)
    FS_CHECK(spans[i].first >= spans[i - 1].second, path, ": tensors overlap in the buffer");
  f.close();
}

at::Tensor SafetensorsFile::tensor(const std::string& name) const {
  auto it = entries_.find(name);
  FS_CHECK(it != entries_.end(), path_, ": no tensor '", name, "'");
  const auto& e = it->second;
  auto t = at::empty(e.shape, at::TensorOptions().dtype(by_name(e.dtype)->type));
  UniqueFd f = open_file(path_, O_RDONLY);
  read_exact(f.get(), t.data_ptr(), e.end - e.begin, data_start_ + e.begin, path_);
  f.close();
  return t;
}

at::Tensor SafetensorsFile::read_range(const std::string& name, int64_t begin, int64_t count) const {
  auto it = entries_.find(name);
  FS_CHECK(it != entries_.end(), path_, ": no tensor '", name, "'");
  const auto& e = it->second;
  const auto* d = by_name(e.dtype);
  FS_ASSERT(begin >= 0 && count >= 0 && e.begin + static_cast<uint64_t>(begin + count) * d->bytes <= e.end,
            path_, ": range [", begin, ", ", begin + count, ") outside tensor '", name, "'");
  auto t = at::empty({count}, at::TensorOptions().dtype(d->type));
  UniqueFd f = open_file(path_, O_RDONLY);
  read_exact(f.get(), t.data_ptr(), static_cast<size_t>(count) * d->bytes,
             data_start_ + e.begin + static_cast<uint64_t>(begin) * d->bytes, path_);
  f.close();
  return t;
}

uint64_t file_checksum(const std::string& path) {
  UniqueFd f = open_file(path, O_RDONLY);
  uint64_t h = kFnv1aOffset;
  std::vector<char> buf(1 << 20);
  for (;;) {
    const ssize_t r = ::read(f.get(), buf.data(), buf.size());
    if (r < 0 && errno == EINTR) continue;
    FS_CHECK(r >= 0, "cannot read ", path, ": ", std::strerror(errno));
    if (r == 0) break;
    h = fnv1a64(buf.data(), static_cast<size_t>(r), h);
  }
  f.close();
  return h;
}

}  // namespace fedshard
