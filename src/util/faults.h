// Failure injection for the robustness tests, behind one interface handed in at start-up: production code calls
// it at its fault points, and without a plan (Faults::none(), every run but a test's) it does nothing there. The
// plan a test sets in the environment is read in one place only, train/fault_injection.cpp.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <functional>

namespace fedshard {

// Where a planned fault may strike: after a step's backward (Step), in the middle of writing that step's
// checkpoint (Checkpoint), before that step's evaluation of the global model (Eval), in the rejoin after that step
// (Join), in the end-of-run summary (Summary), in a recovery after the engine was rebuilt over the kept groups
// (Recovery), when prepare has finished that many token shards (Shard), and in a round server shard when that
// round's data has arrived and it is about to prepare the round (RoundPrepare) or has prepared it and is about to
// commit it (RoundCommit).
enum class FaultPoint { Step, Checkpoint, Eval, Join, Summary, Recovery, Shard, RoundPrepare, RoundCommit };

class Faults {
 public:
  virtual ~Faults() = default;
  // Throws, kills this process or stalls it where the plan says so for (point, step); a stall also ends once
  // `released` says so (polled).
  virtual void at(FaultPoint point, int64_t step, const std::function<bool()>& released = {}) const;
  // The loss this rank reports for `step` (a planned NaN replaces it).
  virtual void corrupt_loss(int64_t step, at::Tensor loss) const;
  // After the optimizer of `step`: a planned infinity goes into this rank's master weights (what a federation
  // round must refuse to send).
  virtual void corrupt_weights(int64_t step, at::Tensor master) const;
  // What a site sends at its round `round` where an attack is planned: `values` - `from` is its change from the
  // global model (`from` undefined: `values` is the change); the result holds the change scaled or replaced. Without
  // a plan, `values` itself.
  virtual at::Tensor corrupt_change(int64_t round, const at::Tensor& values, const at::Tensor& from) const;

  // The plan of a run that injects nothing.
  static const Faults& none();
};

}  // namespace fedshard
