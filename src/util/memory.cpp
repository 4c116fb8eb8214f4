#include "util/memory.h"

#include <sys/statvfs.h>

#include <fstream>
#include <sstream>
#include <string>

#ifdef FEDSHARD_CUDA
#include <c10/cuda/CUDACachingAllocator.h>
#include <cuda_runtime.h>
#endif

namespace fedshard {

namespace {

// The value of KEY (in kB) in a /proc file of "Key: value kB" lines, in bytes.
double proc_kb(const char* path, const std::string& key) {
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    if (line.compare(0, key.size(), key) != 0) continue;
    std::istringstream fields(line.substr(key.size()));
    double kb = 0;
    return fields >> kb ? kb * 1024.0 : 0.0;
  }
  return 0;
}

}  // namespace

double available_memory_bytes() { return proc_kb("/proc/meminfo", "MemAvailable:"); }

double resident_bytes() { return proc_kb("/proc/self/status", "VmRSS:"); }

double device_free_bytes(int device) {
#ifdef FEDSHARD_CUDA
  // cudaMemGetInfo reads the current device; callers pass their own (train/setup.cpp chose it at start-up).
  size_t free = 0, total = 0;
  if (cudaSetDevice(device) != cudaSuccess || cudaMemGetInfo(&free, &total) != cudaSuccess) return 0;
  return static_cast<double>(free);
#else
  (void)device;
  return 0;
#endif
}

double device_peak_allocated_bytes(int device) {
#ifdef FEDSHARD_CUDA
  const auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(static_cast<c10::DeviceIndex>(device));
  return static_cast<double>(stats.allocated_bytes[static_cast<size_t>(c10::CachingAllocator::StatType::AGGREGATE)].peak);
#else
  (void)device;
  return 0;
#endif
}

double free_disk_bytes(const std::string& path) {
  struct statvfs s {};
  if (statvfs(path.c_str(), &s) != 0) return 0;
  return static_cast<double>(s.f_bavail) * static_cast<double>(s.f_frsize);
}

}  // namespace fedshard
