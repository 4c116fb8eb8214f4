// User-facing failures. An Error is a problem with the input or the environment (bad flag, missing file,
// corrupt shard, impossible topology): main prints its message as one line and exits non-zero.
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>

namespace fedshard {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
  // For an error that several ranks detect identically (a NaN loss seen by a whole group): only the rank
  // marked as reporter prints it, so the job ends with one message instead of one per rank.
  Error& reported_by(bool this_rank) {
    reporter_ = this_rank;
    return *this;
  }
  bool reporter() const { return reporter_; }
  // Every rank of the job throws this error at the same point, so they can all exit normally; otherwise
  // the ranks that did not see it may be inside a collective and the job must be aborted.
  Error& everywhere(bool all_ranks) {
    everywhere_ = all_ranks;
    return *this;
  }
  bool everywhere() const { return everywhere_; }

 private:
  bool reporter_ = true;
  bool everywhere_ = false;
};

template <class... Args>
std::string cat(Args&&... args) {
  std::ostringstream os;
  (os << ... << args);
  return os.str();
}

}  // namespace fedshard

// FS_CHECK(cond, "what", value, "more") throws fedshard::Error with the concatenated message.
#define FS_CHECK(cond, ...)                                 \
  do {                                                      \
    if (!(cond)) throw ::fedshard::Error(::fedshard::cat(__VA_ARGS__)); \
  } while (0)

// FS_ASSERT guards internal invariants (a bug, not bad input): std::logic_error with file and line.
#define FS_ASSERT(cond, ...)                                                                          \
  do {                                                                                                \
    if (!(cond))                                                                                      \
      throw std::logic_error(::fedshard::cat(__FILE__, ":", __LINE__, ": ", #cond, " ", ##__VA_ARGS__)); \
  } while (0)
