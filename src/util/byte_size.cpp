#include "util/byte_size.h"

#include <cctype>
#include <map>

#include "util/error.h"

namespace fedshard {

int64_t parse_byte_size(const std::string& text) {
  size_t digits = 0;
  while (digits < text.size() && (std::isdigit(static_cast<unsigned char>(text[digits])) || text[digits] == '.'))
    ++digits;
  const std::string unit = text.substr(digits);
  static const std::map<std::string, double> units = {{"", 1},          {"B", 1},          {"KB", 1e3},
                                                      {"MB", 1e6},      {"GB", 1e9},       {"TB", 1e12},
                                                      {"KiB", 1024.0},  {"MiB", 1048576.0}, {"GiB", 1073741824.0}};
  double value = -1;
  if (digits > 0) {
    try {
      value = std::stod(text.substr(0, digits));
    } catch (const std::exception&) {
      value = -1;
    }
  }
  FS_CHECK(value > 0 && units.count(unit), "size '", text, "' is not a positive number of bytes (e.g. 5GB, 500MB, 2GiB)");
  // Beyond an exabyte no memory is sized, and the cast below would overflow.
  FS_CHECK(value * units.at(unit) < 1e18, "size '", text, "' is larger than any memory (at most 1e18 bytes)");
  return static_cast<int64_t>(value * units.at(unit));
}

}  // namespace fedshard
