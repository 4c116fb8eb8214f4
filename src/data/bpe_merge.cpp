#include "data/bpe_merge.h"

#include <algorithm>
#include <cstring>
#include <functional>
#include <limits>

namespace fedshard::data {
namespace {

constexpr uint64_t kEmpty = std::numeric_limits<uint64_t>::max();  // no pair of two ids below 2^32 - 1
constexpr uint32_t kNoMerge = std::numeric_limits<uint32_t>::max();
constexpr size_t kNoLink = std::numeric_limits<size_t>::max();
// Longer pieces are rare and would make the cache's memory depend on the text.
constexpr size_t kMaxCachedBytes = 64;
constexpr size_t kMaxCachedPieces = size_t{1} << 16;

uint64_t key_of(uint32_t left, uint32_t right) { return uint64_t{left} << 32 | right; }

// Eight bytes at a time, each mixed by a multiply: pieces are short and this is hashed once per piece.
uint64_t hash_of(std::string_view bytes) {
  uint64_t h = 0x9E3779B97F4A7C15ULL ^ bytes.size();
  size_t i = 0;
  for (; i + 8 <= bytes.size(); i += 8) {
    uint64_t word;
    std::memcpy(&word, bytes.data() + i, 8);
    h = (h ^ word) * 0xBF58476D1CE4E5B9ULL;
    h ^= h >> 31;
  }
  uint64_t tail = 0;
  std::memcpy(&tail, bytes.data() + i, bytes.size() - i);
  h = (h ^ tail) * 0x94D049BB133111EBULL;
  return h ^ h >> 29;
}

}  // namespace

size_t MergeTable::slot_of(uint64_t key) const {
  // Fibonacci hashing: the multiply spreads ids that differ in low bits over the high bits kept.
  const size_t mask = slots_.size() - 1;
  size_t i = static_cast<size_t>((key * 0x9E3779B97F4A7C15ULL) >> 32) & mask;
  while (slots_[i].key != kEmpty && slots_[i].key != key) i = (i + 1) & mask;
  return i;
}

void MergeTable::grow() {
  std::vector<Slot> old = std::move(slots_);
  slots_.assign(old.empty() ? 1024 : old.size() * 2, Slot{kEmpty, {}});
  for (const Slot& s : old) {
    if (s.key != kEmpty) slots_[slot_of(s.key)] = s;
  }
}

void MergeTable::set(uint32_t left, uint32_t right, PairMerge merge) {
  if (2 * (size_ + 1) > slots_.size()) grow();
  const uint64_t key = key_of(left, right);
  Slot& slot = slots_[slot_of(key)];
  if (slot.key == kEmpty) ++size_;
  slot = Slot{key, merge};
}

const PairMerge* MergeTable::find(uint32_t left, uint32_t right) const {
  if (slots_.empty()) return nullptr;
  const Slot& slot = slots_[slot_of(key_of(left, right))];
  return slot.key == kEmpty ? nullptr : &slot.merge;
}

// A heap of (priority, start) keeps long pieces O(n log n) (tiktoken's linear scan for the minimum is
// quadratic); an entry is stale once its start no longer begins that pair.
void BpeMerger::merge(std::string_view piece, const std::array<uint32_t, 256>& byte_id, const MergeTable& table,
                      std::vector<uint32_t>& out) {
  const size_t n = piece.size();
  id_.resize(n);
  pair_priority_.resize(n);
  next_.resize(n);
  prev_.resize(n);
  heap_.clear();
  for (size_t i = 0; i < n; ++i) {
    id_[i] = byte_id[static_cast<unsigned char>(piece[i])];
    next_[i] = i + 1;
    prev_[i] = i == 0 ? kNoLink : i - 1;
  }
  const auto greater = [](const Candidate& a, const Candidate& b) {
    return a.priority != b.priority ? a.priority > b.priority : a.start > b.start;
  };
  const auto push = [&](size_t i) {
    const PairMerge* m = next_[i] < n ? table.find(id_[i], id_[next_[i]]) : nullptr;
    pair_priority_[i] = m ? m->priority : kNoMerge;
    if (!m) return;
    heap_.push_back({m->priority, i});
    std::push_heap(heap_.begin(), heap_.end(), greater);
  };
  for (size_t i = 0; i < n; ++i) push(i);
  while (!heap_.empty()) {
    std::pop_heap(heap_.begin(), heap_.end(), greater);
    const Candidate c = heap_.back();
    heap_.pop_back();
    if (pair_priority_[c.start] != c.priority) continue;  // stale: a neighbour merged since this was pushed
    const size_t i = c.start, j = next_[i];
    id_[i] = table.find(id_[i], id_[j])->id;
    next_[i] = next_[j];
    if (next_[j] < n) prev_[next_[j]] = i;
    pair_priority_[j] = kNoMerge;
    push(i);
    if (prev_[i] != kNoLink) push(prev_[i]);
  }
  for (size_t i = 0; i < n; i = next_[i]) out.push_back(id_[i]);
}

size_t BpeMerger::slot_of(std::string_view piece, uint64_t hash) const {
  const size_t mask = slots_.size() - 1;
  for (size_t i = hash & mask;; i = (i + 1) & mask) {
    const CacheSlot& s = slots_[i];
    if (s.text_size == 0) return i;
    if (s.hash == hash && std::string_view(cached_text_).substr(s.text_at, s.text_size) == piece) return i;
  }
}

bool BpeMerger::cached(std::string_view piece, std::vector<uint32_t>& out) const {
  if (slots_.empty() || piece.empty() || piece.size() > kMaxCachedBytes) return false;
  const CacheSlot& s = slots_[slot_of(piece, hash_of(piece))];
  if (s.text_size == 0) return false;
  out.insert(out.end(), cached_ids_.begin() + s.ids_at, cached_ids_.begin() + s.ids_at + s.ids_size);
  return true;
}

void BpeMerger::remember(std::string_view piece, const uint32_t* ids, size_t count) {
  if (piece.empty() || piece.size() > kMaxCachedBytes) return;
  if (slots_.empty() || cached_ == kMaxCachedPieces) {
    slots_.assign(2 * kMaxCachedPieces, CacheSlot{});
    cached_ = 0;
    cached_text_.clear();
    cached_ids_.clear();
  }
  const uint64_t hash = hash_of(piece);
  CacheSlot& s = slots_[slot_of(piece, hash)];
  if (s.text_size != 0) return;
  s = CacheSlot{hash, static_cast<uint32_t>(cached_text_.size()), static_cast<uint32_t>(cached_ids_.size()),
                static_cast<uint16_t>(piece.size()), static_cast<uint16_t>(count)};
  cached_text_.append(piece);
  cached_ids_.insert(cached_ids_.end(), ids, ids + count);
  ++cached_;
}

}  // namespace fedshard::data
