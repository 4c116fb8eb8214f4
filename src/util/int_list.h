// Comma-separated lists of non-negative integers ("4,2,2"), for flags and configuration keys.
#pragma once

#include <algorithm>
#include <string>
#include <vector>

#include "util/error.h"

namespace fedshard {

// Throws fedshard::Error naming `what` on anything but non-negative integers separated by commas.
inline std::vector<int> parse_int_list(const std::string& text, const std::string& what) {
  std::vector<int> out;
  size_t begin = 0;
  while (begin <= text.size()) {
    const size_t end = std::min(text.find(',', begin), text.size());
    const std::string item = text.substr(begin, end - begin);
    size_t used = 0;
    int v = -1;
    try {
      v = std::stoi(item, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    FS_CHECK(!item.empty() && used == item.size() && v >= 0, what, " '", text,
             "': expected non-negative integers separated by commas, e.g. 4,2,2");
    out.push_back(v);
    begin = end + 1;
  }
  return out;
}

}  // namespace fedshard
