#include "train/preemption.h"

#include <csignal>

namespace fedshard::train {

namespace {

volatile std::sig_atomic_t received = 0;

void on_signal(int sig) { received = sig; }

}  // namespace

void install_preemption_handlers() {
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;  // blocking calls (file writes, MPI progress) carry on
  sigaction(SIGTERM, &sa, nullptr);
  sigaction(SIGUSR1, &sa, nullptr);
}

int preemption_signal() { return received; }

}  // namespace fedshard::train
