// The model as the round server sees it (DESIGN.md "Sites"): every unit's parameters, unpadded, one unit after
// the other, N elements in all. Shard i of M owns [i N / M, (i + 1) N / M): FedAvg is element-wise, so M shards
// give the bits of one. A site rank's aggregation slice of a unit (a range of the unit's padded flat, as the site's
// layout cuts it) is a range of these global elements, whatever the site's layout; its padding travels nowhere.
#pragma once

#include <cstdint>
#include <vector>

namespace fedshard::sites {

struct Range {
  int64_t begin = 0, end = 0;
  int64_t size() const { return end > begin ? end - begin : 0; }
  bool operator==(const Range& o) const { return begin == o.begin && end == o.end; }
};

inline Range intersect(Range a, Range b) { return {a.begin > b.begin ? a.begin : b.begin, a.end < b.end ? a.end : b.end}; }

class ModelRanges {
 public:
  explicit ModelRanges(std::vector<int64_t> unit_numel) : numel_(std::move(unit_numel)) {
    for (int64_t n : numel_) {
      offset_.push_back(total_);
      total_ += n;
    }
  }
  int64_t total() const { return total_; }
  size_t units() const { return numel_.size(); }
  int64_t unit_offset(size_t u) const { return offset_[u]; }
  // Shard i of m's elements.
  Range shard(int i, int m) const { return {total_ * i / m, total_ * (i + 1) / m}; }
  // Elements [a, b) of unit u's padded flat, the padding left out.
  Range of_unit(size_t u, int64_t a, int64_t b) const {
    const int64_t n = numel_[u];
    return {offset_[u] + (a < n ? a : n), offset_[u] + (b < n ? b : n)};
  }

 private:
  std::vector<int64_t> numel_, offset_;
  int64_t total_ = 0;
};

}  // namespace fedshard::sites
