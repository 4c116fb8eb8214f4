// Failure injection for the robustness tests: FEDSHARD_FAULT=ACTION:RANK:STEP[:POINT][,...] makes launch rank
// RANK (its rank in MPI_COMM_WORLD: its number stays when the job goes on without a lost group) fail at
// optimizer step STEP (each item of the list). ACTION: throw (an exception, as a bug would), kill (SIGKILL, as
// the OOM killer would), nan (the loss becomes NaN), inf (a master weight becomes infinite), stall (the rank
// sleeps 60 s, as a hung node would, or until a preemption signal or a stop notice reaches it: a test's kill or
// signal from outside then lands at a known step), alloc (LibTorch is asked for 2^50 bytes: its own
// out-of-memory error). POINT: step (default, after backward), checkpoint (in the middle of writing that step's
// checkpoint), eval (before that step's evaluation of the global model) or join (in the rejoin after step STEP,
// federation.rejoin_after: a replacement for launch rank RANK as it starts up, a kept rank RANK before it sends
// the replacements their state). Unset in normal runs; a malformed
// value is an error, not ignored.
#pragma once

#include <cstdint>
#include <functional>

namespace fedshard::train {

enum class FaultPoint { Step, Checkpoint, Eval, Join };

// Parses FEDSHARD_FAULT now, so a malformed value is reported at start-up.
void validate_fault_plan();
// Throws or kills this process if the plan says so for (point, step); a stall also ends once `released` says so
// (polled).
void maybe_inject_fault(FaultPoint point, int64_t step, const std::function<bool()>& released = {});
// True when this rank's loss at `step` should be replaced by NaN.
bool inject_nan(int64_t step);
// True when this rank's master weights should take an infinity after the optimizer of `step` (the first
// element of its shard of unit 1): what a federation round must refuse to send.
bool inject_inf(int64_t step);

}  // namespace fedshard::train
