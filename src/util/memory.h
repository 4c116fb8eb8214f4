// What this machine can give a process.
#pragma once

namespace fedshard {

// MemAvailable of /proc/meminfo in bytes; 0 where it cannot be read (then callers skip memory checks).
double available_memory_bytes();

}  // namespace fedshard
