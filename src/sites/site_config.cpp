#include "sites/site_config.h"

#include "util/error.h"

namespace fedshard::sites {

namespace {

bool is_number(const std::string& s, size_t max_digits) {
  return !s.empty() && s.size() <= max_digits && s.find_first_not_of("0123456789") == std::string::npos;
}

}  // namespace

std::vector<std::string> server_list(const std::string& spec) {
  std::vector<std::string> out;
  size_t begin = 0;
  while (begin <= spec.size()) {
    const size_t end = std::min(spec.find(',', begin), spec.size());
    const std::string address = spec.substr(begin, end - begin);
    const auto colon = address.rfind(':');
    const std::string port = colon == std::string::npos ? "" : address.substr(colon + 1);
    FS_CHECK(colon != std::string::npos && colon > 0 && is_number(port, 5) && std::stoi(port) > 0 &&
                 std::stoi(port) < 65536,
             "sites.server: '", address, "' is not HOST:PORT");
    out.push_back(address);
    begin = end + 1;
  }
  return out;
}

std::pair<int, int> data_slot(const std::string& spec) {
  const auto slash = spec.find('/');
  const std::string i = spec.substr(0, slash), n = slash == std::string::npos ? "" : spec.substr(slash + 1);
  FS_CHECK(is_number(i, 6) && is_number(n, 6) && std::stoi(i) < std::stoi(n), "sites.data must be I/N with 0 <= I < N, got '",
           spec, "'");
  return {std::stoi(i), std::stoi(n)};
}

}  // namespace fedshard::sites
