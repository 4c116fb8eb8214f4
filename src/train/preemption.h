// Preemption: Slurm sends SIGTERM (or the signal of `--signal`, typically SIGUSR1) before a time limit or a
// preemption. The handler only records it; the trainer finishes the step, the ranks agree to stop at the
// same step, write a checkpoint and exit with kPreemptedExit, which scripts/fedshard-elastic.sh treats as
// "requeue", not as a failure.
#pragma once

namespace fedshard::train {

constexpr int kPreemptedExit = 75;  // EX_TEMPFAIL (sysexits.h): try again later

// SIGTERM and SIGUSR1 stop training at the next agreed step instead of killing the process; so does a
// non-empty FEDSHARD_PREEMPTED in the environment (a notice that came before this launch could take it).
void install_preemption_handlers();
// The signal received, 0 if none.
int preemption_signal();

}  // namespace fedshard::train
