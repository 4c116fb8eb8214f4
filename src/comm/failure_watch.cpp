#include "comm/failure_watch.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <set>
#include <thread>

#include <execinfo.h>
#include <unistd.h>

#ifdef FEDSHARD_MPI_ULFM
#include <mpi-ext.h>
#endif

#include "comm/mpi_runtime.h"
#include "comm/survivors.h"
#include "util/error.h"

namespace fedshard::comm {

namespace {

using Clock = std::chrono::steady_clock;

struct Watch {
  std::mutex mu;
  std::condition_variable wake;
  std::thread thread;
  bool stopping = false;
  MPI_Comm comm = MPI_COMM_NULL;  // the watch's own duplicate
  std::vector<int> launch_ranks;
  bool recovers = false;
  double stall_seconds = 20;
  Clock::time_point last_progress = Clock::now();
  std::vector<int> known;  // launch ranks known lost on `comm`
  Clock::time_point known_since;
  std::set<int> ever_lost;  // launch ranks seen lost in this job (the watched communicator changes after a loss)
};

Watch& state() {
  static Watch w;
  return w;
}

std::atomic<bool> g_ending{false};

std::string list(const std::vector<int>& v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
  return s + "]";
}

// The launch ranks of comm's members that the library knows failed. Caller holds the lock.
std::vector<int> failed_now(Watch& w) {
  std::vector<int> out;
#ifdef FEDSHARD_MPI_ULFM
  if (w.comm == MPI_COMM_NULL) return out;
  // The probe lets the library progress, which not while an agreement or a shrink runs (they hold the lock, and
  // progress the library themselves): then only the local query, so a watch still sees a loss during one that
  // never ends.
  std::unique_lock<std::mutex> progress(progress_mutex(), std::try_to_lock);
  if (progress.owns_lock()) {
    int flag = 0;
    MPI_Iprobe(MPI_ANY_SOURCE, 0, w.comm, &flag, MPI_STATUS_IGNORE);
  }
  MPI_Group failed = MPI_GROUP_NULL, all = MPI_GROUP_NULL;
  if (MPIX_Comm_get_failed(w.comm, &failed) != MPI_SUCCESS) return out;
  int n = 0;
  MPI_Group_size(failed, &n);
  if (n > 0) {
    MPI_Comm_group(w.comm, &all);
    std::vector<int> in(static_cast<size_t>(n)), ranks(static_cast<size_t>(n));
    for (int i = 0; i < n; ++i) in[static_cast<size_t>(i)] = i;
    MPI_Group_translate_ranks(failed, n, in.data(), all, ranks.data());
    for (int r : ranks)
      if (r >= 0 && r < static_cast<int>(w.launch_ranks.size())) out.push_back(w.launch_ranks[static_cast<size_t>(r)]);
    MPI_Group_free(&all);
  }
  MPI_Group_free(&failed);
  std::sort(out.begin(), out.end());
#else
  (void)w;
#endif
  return out;
}

#ifdef FEDSHARD_MPI_ULFM
void run_watch() {
  auto& w = state();
  std::unique_lock<std::mutex> lock(w.mu);
  while (!w.stopping) {
    w.wake.wait_for(lock, std::chrono::milliseconds(100));
    if (w.stopping) break;
    const auto failed = failed_now(w);
    if (!failed.empty() && failed != w.known) {
      w.known = failed;
      w.known_since = Clock::now();
      w.ever_lost.insert(failed.begin(), failed.end());
    }
    if (w.ever_lost.empty() && !MpiRuntime::peer_lost_seen()) continue;
    const std::string me = cat(MpiRuntime::get().world_rank(), " of ", MpiRuntime::get().world_size());
    const std::vector<int> lost(w.ever_lost.begin(), w.ever_lost.end());
    if (!w.recovers && !failed.empty()) {
      lock.unlock();
      FailureWatch::end(1, cat("fedshard: error on rank ", me, ": lost rank(s) ", list(failed), "; this job does not ",
                               "recover from a lost rank in the job (docs/robustness.md: in-job recovery), so it ",
                               "ends; resume from the last checkpoint"));
    }
    // After a loss, recovered or not yet: a job that stops making progress ends, whatever holds it.
    const auto since = std::max(w.known_since, w.last_progress);
    const double idle = std::chrono::duration<double>(Clock::now() - since).count();
    if (idle > w.stall_seconds) {
      lock.unlock();
      FailureWatch::end(1, cat("fedshard: error on rank ", me, ": lost rank(s) ", list(lost), " and no progress for ",
                               static_cast<int>(idle), " s since: the recovery did not complete, so the job ends; ",
                               "resume from the last checkpoint"));
    }
  }
}
#endif

#ifdef FEDSHARD_MPI_ULFM
// A process that crashes ends as one the watch ends, with an error line and a non-zero exit: under ULFM the runtime
// tolerates a process that dies of a signal, and a job whose ranks all crashed exited 0 (seen: Open MPI 5.0.11's
// ompi_comm_revoke_local crashing when a second rank dies while MPIX_Comm_shrink builds its communicator).
char g_crash_line[96];

void on_crash(int signal) {
  // Only async-signal-safe calls: write, backtrace_symbols_fd (its library loaded by handle_crashes), _exit.
  const char* name = signal == SIGSEGV ? "SIGSEGV" : signal == SIGBUS ? "SIGBUS" : signal == SIGFPE ? "SIGFPE"
                                                   : signal == SIGILL ? "SIGILL" : "SIGABRT";
  ssize_t ignored = write(STDERR_FILENO, g_crash_line, std::strlen(g_crash_line));
  ignored = write(STDERR_FILENO, name, std::strlen(name));
  ignored = write(STDERR_FILENO, "); the job ends\n", 16);
  (void)ignored;
  void* frames[48];
  backtrace_symbols_fd(frames, backtrace(frames, 48), STDERR_FILENO);
  _exit(1);
}

void handle_crashes(int rank) {
  std::snprintf(g_crash_line, sizeof g_crash_line, "fedshard: error on rank %d: crashed (", rank);
  void* frame = nullptr;
  backtrace(&frame, 1);
  struct sigaction action {};
  action.sa_handler = on_crash;
  action.sa_flags = SA_RESETHAND;
  for (int signal : {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT}) sigaction(signal, &action, nullptr);
}
#endif

}  // namespace

void FailureWatch::watch(MPI_Comm comm, const std::vector<int>& launch_ranks) {
#ifdef FEDSHARD_MPI_ULFM
  MPI_Comm dup = MPI_COMM_NULL;
  if (MPI_Comm_dup(comm, &dup) != MPI_SUCCESS) return;  // a loss during the dup: the watched one stays
  MPI_Comm_set_errhandler(dup, MPI_ERRORS_RETURN);
  auto& w = state();
  std::lock_guard<std::mutex> lock(w.mu);
  if (w.comm != MPI_COMM_NULL) MPI_Comm_free(&w.comm);
  w.comm = dup;
  w.launch_ranks = launch_ranks;
  w.known.clear();
  w.last_progress = Clock::now();
  if (!w.thread.joinable()) {
    int rank = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    handle_crashes(rank);
    w.thread = std::thread(run_watch);
  }
#else
  (void)comm;
  (void)launch_ranks;
#endif
}

void FailureWatch::expect_recovery(bool recovers, double stall_seconds) {
  auto& w = state();
  std::lock_guard<std::mutex> lock(w.mu);
  w.recovers = recovers;
  w.stall_seconds = stall_seconds;
}

void FailureWatch::progress() {
  auto& w = state();
  std::lock_guard<std::mutex> lock(w.mu);
  w.last_progress = Clock::now();
}

void FailureWatch::stop() {
  auto& w = state();
  {
    std::lock_guard<std::mutex> lock(w.mu);
    w.stopping = true;
  }
  w.wake.notify_all();
  if (w.thread.joinable()) w.thread.join();
#ifdef FEDSHARD_MPI_ULFM
  // Freed before MPI_Finalize: a communicator left spanning a replacement's job and the spawning one is
  // disconnected by the finalize, an exchange with peers that may have exited already (Open MPI 5.0.11 crashed in
  // it, and its mpirun then stayed after every rank had ended).
  if (w.comm != MPI_COMM_NULL) MPI_Comm_free(&w.comm);
#endif
}

std::string FailureWatch::lost_ranks() {
  auto& w = state();
  std::lock_guard<std::mutex> lock(w.mu);
  const auto failed = failed_now(w);
  return failed.empty() ? "" : list(failed);
}

std::string FailureWatch::lost_ranks_within(double seconds) {
  const auto until = Clock::now() + std::chrono::duration<double>(seconds);
  for (;;) {
    auto lost = lost_ranks();
    if (!lost.empty() || Clock::now() >= until) return lost;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

void FailureWatch::end(int code, const std::string& line) {
  if (g_ending.exchange(true)) {
    // The other one is ending this process: wait for it.
    for (;;) std::this_thread::sleep_for(std::chrono::seconds(1));
  }
  MpiRuntime::note_peer_lost();
  if (!line.empty()) std::fprintf(stderr, "%s\n", line.c_str());
  std::fflush(nullptr);
  revoke_mpi_comm(MPI_COMM_WORLD);
  // The runtime may end the others once one exits with an error: a moment for their watches to say why first.
  std::this_thread::sleep_for(std::chrono::seconds(1));
  std::_Exit(code);
}

}  // namespace fedshard::comm
