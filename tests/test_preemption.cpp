// The preemption flag: a signal lands on whichever thread the kernel picks (a comm thread busy in a
// collective too); the handler records it and the training thread reads it at its next step. Run under
// ThreadSanitizer by `make test-tsan`, which checks that this hand-over is race-free.
#include <gtest/gtest.h>

#include <csignal>
#include <future>

#include "comm/comm_thread.h"
#include "train/preemption.h"

namespace fedshard::train {
namespace {

TEST(Preemption, ASignalOnTheCommThreadReachesTheTrainingThreadAndEndsNothing) {
  install_preemption_handlers();
  ASSERT_EQ(preemption_signal(), 0);
  std::promise<void> raised;
  {
    comm::CommThread comm;
    comm.submit([&] {
      std::raise(SIGUSR1);  // delivered to this (the comm) thread; without the handler it ends the process
      raised.set_value();
    });
    raised.get_future().wait();
    EXPECT_EQ(preemption_signal(), SIGUSR1);
    comm.submit([] { std::raise(SIGTERM); });
  }  // the comm thread drains its queue before it is joined
  EXPECT_EQ(preemption_signal(), SIGTERM);
}

}  // namespace
}  // namespace fedshard::train
