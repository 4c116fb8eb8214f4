#include "train/preemption.h"

#include <atomic>
#include <csignal>
#include <cstdlib>

namespace fedshard::train {

namespace {

// Written by the handler on whichever thread the signal lands (a comm thread too), read by the training
// thread: only a lock-free atomic is both async-signal-safe and free of a data race.
std::atomic<int> received{0};
static_assert(std::atomic<int>::is_always_lock_free, "the preemption flag must be lock-free");

void on_signal(int sig) { received.store(sig, std::memory_order_relaxed); }

}  // namespace

void install_preemption_handlers() {
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;  // blocking calls (file writes, MPI progress) carry on
  sigaction(SIGTERM, &sa, nullptr);
  sigaction(SIGUSR1, &sa, nullptr);
  // Set by scripts/fedshard-elastic.sh when a notice came before an earlier launch's ranks could take it.
  const char* standing = std::getenv("FEDSHARD_PREEMPTED");
  if (standing && *standing) received.store(SIGUSR1, std::memory_order_relaxed);
}

int preemption_signal() { return received.load(std::memory_order_relaxed); }

}  // namespace fedshard::train
