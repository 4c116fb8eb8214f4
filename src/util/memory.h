// What this machine can give a process, and what the process holds.
#pragma once

#include <string>

namespace fedshard {

// MemAvailable of /proc/meminfo in bytes; 0 where it cannot be read (then callers skip memory checks).
double available_memory_bytes();

// This process's resident set now (VmRSS), in bytes; 0 where it cannot be read.
double resident_bytes();

// Free memory of CUDA device `device` (cudaMemGetInfo), in bytes; 0 in a build without CUDA.
double device_free_bytes(int device);

// Peak bytes LibTorch's caching allocator has handed out on CUDA device `device` since the process started
// (what torch.cuda.max_memory_allocated reports, so fedshard and a PyTorch peer compare like for like);
// 0 in a build without CUDA.
double device_peak_allocated_bytes(int device);

// Free bytes of the file system holding `path` (statvfs, for an unprivileged user); 0 where it cannot be read.
double free_disk_bytes(const std::string& path);

}  // namespace fedshard
