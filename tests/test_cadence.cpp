// The cadence's rules (train/cadence.h), one table: when a step ends the job, when the global model is evaluated
// and when a checkpoint is written, under step rounds and time-based ones, with a fast or a slow group 0,
// between and at rounds, fresh and resumed.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "train/cadence.h"

using namespace fedshard::train;

namespace {

TrainConfig config(const std::string& strategy, const std::string& round, int64_t eval_every, int64_t checkpoint_every,
                   bool eval_after_sync) {
  TrainConfig c;
  c.strategy = strategy;
  c.round = round;
  c.steps = 12;
  c.sync_every = 4;
  c.eval_every = eval_every;
  c.checkpoint_every = checkpoint_every;
  c.eval_after_sync = eval_after_sync;
  return c;
}

struct Row {
  std::string what;
  TrainConfig cfg;
  bool checkpoints;  // false: an emulated layout, which keeps none
  StepOutcome step;
  Carried carried;
  bool last, evaluate, checkpoint;
  Carried next;
};

}  // namespace

TEST(Cadence, DecidesTheEndEvaluationsAndCheckpoints) {
  const auto rounds = config("fl-fsdp", "steps", 4, 6, true);
  const auto odd_eval = config("fl-fsdp", "steps", 5, 0, false);
  const auto fsdp = config("fsdp", "steps", 5, 0, false);
  const auto timed = config("fl-fsdp", "seconds:0.5", 3, 5, true);
  const auto timed_quiet = config("fl-fsdp", "seconds:0.5", 0, 0, false);
  auto outcome = [](int64_t step, bool aggregated, bool stop = false, bool last = false, bool evaluate = false,
                    bool checkpoint = false) { return StepOutcome{step, aggregated, stop, last, evaluate, checkpoint}; };
  const Carried none, waiting{true, false, false}, wanted{false, true, true}, eval_wanted{false, true, false};
  const std::vector<Row> rows = {
      {"between rounds, nothing due", rounds, true, outcome(3, false), none, false, false, false, none},
      {"a round on eval.every", rounds, true, outcome(4, true), none, false, true, false, none},
      {"checkpoint.every between rounds", rounds, true, outcome(6, false), none, false, false, true, none},
      {"emulated layouts keep no checkpoint", rounds, false, outcome(6, false), none, false, false, false, none},
      {"eval.every off a round waits for it", odd_eval, true, outcome(5, false), none, false, false, false, waiting},
      {"the waiting evaluation at the next round", odd_eval, true, outcome(8, true), waiting, false, true, false, none},
      {"a round without eval_after_sync", odd_eval, true, outcome(4, true), none, false, false, false, none},
      {"the last step: evaluation and checkpoint", rounds, true, outcome(12, true), none, true, true, true, none},
      {"a stop between rounds checkpoints", rounds, true, outcome(7, false, true), none, false, false, true, none},
      {"without federation eval.every evaluates", fsdp, true, outcome(5, false), none, false, true, false, none},
      {"without federation the last step", fsdp, true, outcome(12, false), none, true, true, true, none},
      {"timed: a group's eval.every carried to the round", timed, true, outcome(3, false), none, false, false, false,
       eval_wanted},
      {"timed: and its checkpoint.every too", timed, true, outcome(5, false), eval_wanted, false, false, false, wanted},
      {"timed: the round's agreed evaluation", timed, true, outcome(7, true, false, false, true), wanted, false, true,
       false, Carried{false, false, true}},
      {"timed: the round's agreed checkpoint", timed_quiet, true, outcome(7, true, false, false, false, true), wanted,
       false, false, true, Carried{false, true, false}},
      // Group 0 fast: its step 12 is the last (its vote); group 0 slow: another group's vote ends the job at
      // group 0's step 9.
      {"timed: the last round, group 0 fast", timed_quiet, true, outcome(12, true, false, true), none, true, true, true,
       none},
      {"timed: the last round, group 0 slow", timed_quiet, true, outcome(9, true, false, true), none, true, true, true,
       none},
      {"timed: step 12 is nothing without a round", timed_quiet, true, outcome(12, false), none, false, false, false,
       none},
      {"timed: a stop between rounds", timed, true, outcome(4, false, true), eval_wanted, false, false, true,
       eval_wanted},
  };
  for (const auto& r : rows) {
    const Cadence cadence(r.cfg, r.cfg.strategy.rfind("fl-", 0) == 0, r.checkpoints);
    const auto d = cadence.decide(r.step, r.carried);
    EXPECT_EQ(d.last, r.last) << r.what;
    EXPECT_EQ(d.evaluate, r.evaluate) << r.what;
    EXPECT_EQ(d.checkpoint, r.checkpoint) << r.what;
    EXPECT_TRUE(d.carried == r.next) << r.what << ": carried " << d.carried.evaluation << d.carried.evaluation_wanted
                                     << d.carried.checkpoint_wanted;
  }
}

// A group's votes at a round, and a resume's question: does this checkpoint end the run?
TEST(Cadence, VotesAndWhetherACheckpointEndsTheRun) {
  const Cadence steps(config("fl-fsdp", "steps", 4, 6, true), true, true);
  const Cadence timed(config("fl-fsdp", "seconds:0.5", 3, 0, true), true, true);
  EXPECT_TRUE(steps.last_step(12));
  EXPECT_FALSE(steps.last_step(11));
  EXPECT_TRUE(steps.wants_evaluation(8, {}));
  EXPECT_FALSE(steps.wants_checkpoint(8, {}));
  EXPECT_TRUE(timed.wants_checkpoint(4, Carried{false, false, true}));
  EXPECT_TRUE(Cadence::timed_rounds(config("fl-fsdp", "seconds:0.5", 0, 0, true)));
  EXPECT_FALSE(Cadence::timed_rounds(config("fl-fsdp", "steps:4", 0, 0, true)));
  EXPECT_FALSE(steps.timed());
  EXPECT_TRUE(timed.timed());
  // Fresh or resumed at one step: finished at train.steps.
  EXPECT_TRUE(steps.finished(12, {}, {}));
  EXPECT_FALSE(steps.finished(11, {}, {}));
  // Groups at different steps: step rounds wait for the slowest group, time-based ones end with the fastest.
  EXPECT_FALSE(steps.finished(10, {10, 12}, {false, false}));
  EXPECT_TRUE(timed.finished(10, {10, 12}, {false, false}));
  EXPECT_FALSE(timed.finished(9, {9, 11}, {false, false}));
  // A round some group stopped at without holding it is still to come.
  EXPECT_FALSE(steps.finished(12, {12, 12}, {false, true}));
}
