// The byte-pair merge both BPE readers run (tiktoken ranks files and Hugging Face tokenizer.json): a piece of
// pre-tokenized text starts as one token per byte, and the adjacent pair whose merge has the lowest priority
// merges first, leftmost on ties, until no adjacent pair has a merge. tiktoken's priority is the rank of the
// merged bytes, the tokenizers library's the merge's place in the merges list; both are a table lookup of
// (left id, right id) here.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace fedshard::data {

struct PairMerge {
  uint32_t priority;  // lower merges first
  uint32_t id;        // the merged token
};

// (left id, right id) -> merge, by open addressing: the lookup is the inner loop of encoding.
class MergeTable {
 public:
  void set(uint32_t left, uint32_t right, PairMerge merge);  // a pair set again keeps the later merge
  const PairMerge* find(uint32_t left, uint32_t right) const;
  size_t size() const { return size_; }

 private:
  struct Slot {
    uint64_t key;
    PairMerge merge;
  };
  size_t slot_of(uint64_t key) const;
  void grow();

  std::vector<Slot> slots_;  // capacity a power of two, at most half full
  size_t size_ = 0;
};

// The merge of one piece, with buffers reused from piece to piece and the ids of pieces already seen (natural
// text repeats its words; the tokenizers library keeps such a cache too). Not safe to share between threads.
class BpeMerger {
 public:
  // Appends the ids of piece to out. byte_id: each byte's token (every byte has one).
  void merge(std::string_view piece, const std::array<uint32_t, 256>& byte_id, const MergeTable& table,
             std::vector<uint32_t>& out);

  // The cached ids of piece appended to out; false (out untouched) if piece is not cached.
  bool cached(std::string_view piece, std::vector<uint32_t>& out) const;
  // Remembers ids as piece's; forgets everything first once the cache is full, so memory stays bounded.
  void remember(std::string_view piece, const uint32_t* ids, size_t count);

 private:
  struct Candidate {
    uint32_t priority;
    size_t start;
  };
  std::vector<uint32_t> id_, pair_priority_;
  std::vector<size_t> next_, prev_;
  std::vector<Candidate> heap_;

  // The cache: open addressing over (hash, piece, ids), the pieces' bytes and ids kept in two flat arrays.
  struct CacheSlot {
    uint64_t hash;
    uint32_t text_at, ids_at;
    uint16_t text_size, ids_size;  // text_size 0: an empty slot (an empty piece is never cached)
  };
  size_t slot_of(std::string_view piece, uint64_t hash) const;
  std::vector<CacheSlot> slots_;
  size_t cached_ = 0;
  std::string cached_text_;
  std::vector<uint32_t> cached_ids_;
};

}  // namespace fedshard::data
