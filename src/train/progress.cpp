#include "train/progress.h"

#include <unistd.h>

#include <cstdio>

namespace fedshard::train {

namespace {

std::string format_duration(double s) {
  char buf[32];
  const long t = static_cast<long>(s + 0.5);
  if (t >= 3600)
    std::snprintf(buf, sizeof buf, "%ldh%02ldm", t / 3600, (t / 60) % 60);
  else
    std::snprintf(buf, sizeof buf, "%ldm%02lds", t / 60, t % 60);
  return buf;
}

}  // namespace

Progress::Progress(int64_t total_steps)
    : total_(total_steps), tty_(::isatty(STDERR_FILENO) != 0), start_(std::chrono::steady_clock::now()) {}

void Progress::update(int64_t step, double loss, double lr, double tok_per_s, const std::string& extra) {
  const auto now = std::chrono::steady_clock::now();
  if (first_step_ < 0) {
    first_step_ = step;
    first_time_ = now;
  }
  const int64_t every = std::max<int64_t>(1, total_ / 20);
  if (!tty_ && step % every != 0 && step != total_) return;
  // ETA from the steps after the first (which includes start-up work).
  std::string eta = "?";
  if (step > first_step_) {
    const double per_step = std::chrono::duration<double>(now - first_time_).count() / double(step - first_step_);
    eta = format_duration(per_step * double(total_ - step));
  }
  char line[256];
  std::snprintf(line, sizeof line, "step %lld/%lld | loss %.4f | lr %.2e | %.0f tok/s | ETA %s%s%s",
                static_cast<long long>(step), static_cast<long long>(total_), loss, lr, tok_per_s, eta.c_str(),
                extra.empty() ? "" : " | ", extra.c_str());
  if (tty_)
    std::fprintf(stderr, "\r\033[K%s", line);
  else
    std::fprintf(stderr, "%s\n", line);
  std::fflush(stderr);
}

void Progress::finish() {
  if (tty_) std::fprintf(stderr, "\n");
}

}  // namespace fedshard::train
