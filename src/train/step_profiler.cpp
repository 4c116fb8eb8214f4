#include "train/step_profiler.h"

#include <torch/csrc/autograd/profiler_kineto.h>
#include <torch/version.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <map>
#include <set>
#include <vector>

#ifdef FEDSHARD_CUDA
#include <cuda_runtime.h>
#endif

#include "util/error.h"
#include "util/posix_file.h"

namespace fedshard::train {

namespace profiler = torch::autograd::profiler;
namespace impl = torch::profiler::impl;

namespace {

constexpr size_t kRowsPerDevice = 25;

// The profiled window starts and ends with the device idle: kernels queued before it (or still running at
// its end) would otherwise land in the wrong window.
void sync_device(c10::Device device) {
#ifdef FEDSHARD_CUDA
  // cudaDeviceSynchronize waits for the thread's current device: make it this rank's, not GPU 0.
  if (device.is_cuda() && cudaSetDevice(device.index()) == cudaSuccess) cudaDeviceSynchronize();
#else
  (void)device;
#endif
}

struct Span {
  std::string name;
  bool on_gpu = false;
  uint64_t thread = 0;
  double start_us = 0;
  double duration_us = 0;
};

Span span_of(const profiler::KinetoEvent& e) {
  Span s;
  s.name = e.name();
  s.on_gpu = e.deviceType() != c10::DeviceType::CPU;
  s.thread = e.startThreadId();
#if TORCH_VERSION_MAJOR >= 2
  s.start_us = static_cast<double>(e.startNs()) / 1e3;
  s.duration_us = static_cast<double>(e.durationNs()) / 1e3;
#else
  s.start_us = static_cast<double>(e.startUs());
  s.duration_us = static_cast<double>(e.durationUs());
#endif
  return s;
}

struct OpTotal {
  int64_t calls = 0;
  double self_us = 0;
};

// Self time per op: a CPU op's duration less that of the ops it called on the same thread (ops nest: an op's
// children start after it and end before it); a GPU activity's whole duration (kernels do not nest).
std::map<std::pair<bool, std::string>, OpTotal> self_times(std::vector<Span> spans) {
  std::sort(spans.begin(), spans.end(), [](const Span& a, const Span& b) {
    if (a.on_gpu != b.on_gpu) return a.on_gpu < b.on_gpu;
    if (a.thread != b.thread) return a.thread < b.thread;
    if (a.start_us != b.start_us) return a.start_us < b.start_us;
    return a.duration_us > b.duration_us;  // a parent starting with its child comes first
  });
  std::vector<double> self(spans.size());
  std::vector<size_t> open;  // indices of the CPU ops enclosing the current one
  for (size_t i = 0; i < spans.size(); ++i) {
    const Span& s = spans[i];
    self[i] = s.duration_us;
    if (s.on_gpu) continue;
    if (i > 0 && (spans[i - 1].thread != s.thread || spans[i - 1].on_gpu)) open.clear();
    while (!open.empty() && spans[open.back()].start_us + spans[open.back()].duration_us <= s.start_us) open.pop_back();
    if (!open.empty()) self[open.back()] -= s.duration_us;
    open.push_back(i);
  }
  std::map<std::pair<bool, std::string>, OpTotal> totals;
  for (size_t i = 0; i < spans.size(); ++i) {
    auto& t = totals[{spans[i].on_gpu, spans[i].name}];
    ++t.calls;
    t.self_us += std::max(0.0, self[i]);
  }
  return totals;
}

std::string table(const std::vector<Span>& spans, int rank, StepRange range, int64_t steps, double wall_us) {
  const auto totals = self_times(spans);
  std::string out;
  char line[512];
  std::snprintf(line, sizeof line,
                "# fedshard profile: rank %d, steps %lld-%lld (%lld profiled), %.3f ms of wall time\n"
                "# self time: a CPU op's time less that of the ops it called; a GPU activity's whole time\n"
                "# share: self time / the profiled steps' wall time (CPU ops on other threads can add past 100%%)\n"
                "%-6s %8s %12s %7s  %s\n",
                rank, static_cast<long long>(range.first), static_cast<long long>(range.last),
                static_cast<long long>(steps), wall_us / 1e3, "device", "calls", "self_ms", "share", "op");
  out += line;
  for (const bool gpu : {true, false}) {
    std::vector<std::pair<std::string, OpTotal>> rows;
    for (const auto& [key, t] : totals)
      if (key.first == gpu) rows.emplace_back(key.second, t);
    if (rows.empty()) continue;
    std::sort(rows.begin(), rows.end(), [](const auto& a, const auto& b) { return a.second.self_us > b.second.self_us; });
    const char* device = gpu ? "gpu" : "cpu";
    OpTotal rest, all;
    for (size_t i = 0; i < rows.size(); ++i) {
      const auto& [name, t] = rows[i];
      all.calls += t.calls;
      all.self_us += t.self_us;
      if (i >= kRowsPerDevice) {
        rest.calls += t.calls;
        rest.self_us += t.self_us;
        continue;
      }
      std::snprintf(line, sizeof line, "%-6s %8lld %12.3f %6.1f%%  ", device, static_cast<long long>(t.calls),
                    t.self_us / 1e3, 100.0 * t.self_us / wall_us);
      out += line + name + "\n";
    }
    if (rest.calls > 0) {
      std::snprintf(line, sizeof line, "%-6s %8lld %12.3f %6.1f%%  (%zu other ops)\n", device,
                    static_cast<long long>(rest.calls), rest.self_us / 1e3, 100.0 * rest.self_us / wall_us,
                    rows.size() - kRowsPerDevice);
      out += line;
    }
    std::snprintf(line, sizeof line, "%-6s %8lld %12.3f %6.1f%%  (all)\n", device, static_cast<long long>(all.calls),
                  all.self_us / 1e3, 100.0 * all.self_us / wall_us);
    out += line;
  }
  return out;
}

}  // namespace

StepRange parse_profile_steps(const std::string& text) {
  if (text.empty()) return {};
  long long first = 0, last = 0;
  int used = 0;
  const bool ok = std::sscanf(text.c_str(), "%lld:%lld%n", &first, &last, &used) == 2 &&
                  used == static_cast<int>(text.size()) && first >= 1 && first <= last;
  FS_CHECK(ok, "train.profile_steps '", text, "': expected FIRST:LAST with 1 <= FIRST <= LAST, e.g. 6:8");
  return {first, last};
}

StepProfiler::StepProfiler(StepRange range, std::string out_dir, int rank, c10::Device device)
    : range_(range), out_dir_(std::move(out_dir)), rank_(rank), device_(device) {}

StepProfiler::~StepProfiler() {
  if (active_) profiler::disableProfiler();
}

void StepProfiler::before_step(int64_t step) {
  // A run resumed inside the range profiles the rest of it.
  if (active_ || tried_ || step < range_.first || step > range_.last) return;
  tried_ = true;  // one attempt per run: a profiler that cannot start is reported once
  const impl::ProfilerConfig config(impl::ProfilerState::KINETO);
  std::set<impl::ActivityType> activities{impl::ActivityType::CPU};
  if (device_.is_cuda()) activities.insert(impl::ActivityType::CUDA);
  try {
    profiler::prepareProfiler(config, activities);
    profiler::enableProfiler(config, activities);
  } catch (const c10::Error& e) {
    // A profiler that cannot run here (no CUPTI for the GPU's activities) costs the profile, not the run.
    std::fprintf(stderr, "fedshard: warning: rank %d: the profiler did not start (%s); steps %lld-%lld run unprofiled\n",
                 rank_, e.what_without_backtrace(), static_cast<long long>(range_.first),
                 static_cast<long long>(range_.last));
    return;
  }
  active_ = true;
  sync_device(device_);
  start_ = std::chrono::steady_clock::now();
}

bool StepProfiler::after_step(int64_t step) {
  if (!active_) return false;
  ++steps_;
  if (step == range_.last) stop();
  return true;
}

void StepProfiler::finish() {
  if (active_) stop();
}

void StepProfiler::stop() {
  sync_device(device_);
  const double wall_us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start_).count();
  const auto result = profiler::disableProfiler();
  active_ = false;
  std::vector<Span> spans;
  for (const auto& e : result->events()) spans.push_back(span_of(e));
  const std::string dir = out_dir_ + "/profile";
  std::filesystem::create_directories(dir);
  const std::string table_path = cat(dir, "/rank", rank_, ".txt");
  write_file_atomically(table_path, table(spans, rank_, range_, steps_, wall_us));
  const std::string trace_path = cat(dir, "/trace-rank", rank_, ".json");
  try {
    result->save(trace_path + ".tmp");  // renamed into place whole, as every file of a run
    rename_file(trace_path + ".tmp", trace_path);
  } catch (const c10::Error& e) {
    // Only a LibTorch built with Kineto writes traces (Debian's 1.13 is not); the table above stands alone.
    if (rank_ == 0)
      std::fprintf(stderr, "fedshard: note: no Chrome trace of the profiled steps (%s); the op table is %s\n",
                   e.what_without_backtrace(), table_path.c_str());
  }
}

}  // namespace fedshard::train
