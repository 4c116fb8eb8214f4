#include "util/memory.h"

#include <fstream>
#include <string>

namespace fedshard {

double available_memory_bytes() {
  std::ifstream in("/proc/meminfo");
  std::string key, unit;
  double kb = 0;
  while (in >> key >> kb) {
    std::getline(in, unit);
    if (key == "MemAvailable:") return kb * 1024.0;
  }
  return 0;
}

}  // namespace fedshard
