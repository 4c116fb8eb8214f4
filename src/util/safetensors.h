// The safetensors format (https://github.com/huggingface/safetensors): an 8-byte little-endian header size N,
// N bytes of JSON {"NAME": {"dtype", "shape", "data_offsets": [begin, end]}, ..., "__metadata__": {...}}
// (offsets relative to the byte buffer after the header), then the buffer. Used for Hugging Face exports and
// for fedshard's own checkpoint shards.
#pragma once

#include <ATen/ATen.h>

#include <map>
#include <string>
#include <vector>

namespace fedshard {

struct SafetensorsEntry {
  std::string dtype;  // F32, F64, BF16, F16, I64, I32, U8, ...
  std::vector<int64_t> shape;
  uint64_t begin = 0, end = 0;  // byte offsets into the buffer
};

// Writes `tensors` (contiguous CPU tensors) atomically (temp name, fsync, rename). Returns the file's
// FNV-1a 64 checksum.
uint64_t write_safetensors(const std::string& path, const std::vector<std::pair<std::string, at::Tensor>>& tensors,
                           const std::map<std::string, std::string>& metadata = {});

class SafetensorsFile {
 public:
  // Reads and validates the header (sizes, offsets inside the file, no overlaps, known dtypes). Throws
  // fedshard::Error naming the file and the problem.
  explicit SafetensorsFile(const std::string& path);

  const std::map<std::string, SafetensorsEntry>& entries() const { return entries_; }
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  bool contains(const std::string& name) const { return entries_.count(name) > 0; }
  // Reads one tensor (a copy). Throws fedshard::Error if absent.
  at::Tensor tensor(const std::string& name) const;
  // Elements [begin, begin + count) of the flattened tensor, in its own dtype: reads only those bytes, so a
  // rank that keeps a slice of a parameter never holds the whole of it.
  at::Tensor read_range(const std::string& name, int64_t begin, int64_t count) const;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  uint64_t data_start_ = 0;
  std::map<std::string, SafetensorsEntry> entries_;
  std::map<std::string, std::string> metadata_;
};

// FNV-1a 64 of a whole file (checkpoint integrity).
uint64_t file_checksum(const std::string& path);

}  // namespace fedshard
