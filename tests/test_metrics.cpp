// The metrics writer's hand-over (train/metrics.h): a rank that becomes the writer after the old one was lost writes
// the lines its predecessor did not, each once, membership lines included (two changes may come at one step), also
// where its group stood at other steps than the lost writer's (time-based rounds).
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "train/metrics.h"

using fedshard::train::MetricsLog;

namespace {

std::vector<nlohmann::json> read_lines(const std::string& path) {
  std::vector<nlohmann::json> out;
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);) out.push_back(nlohmann::json::parse(line));
  return out;
}

nlohmann::json lost(int64_t step, std::vector<int> groups) {
  return {{"type", "group_lost"}, {"step", step}, {"lost_group_ids", groups}};
}

}  // namespace

TEST(MetricsLog, NewWriterWritesWhatTheLostOneDidNot) {
  const auto path = (std::filesystem::temp_directory_path() / "fedshard-test-metrics.jsonl").string();
  std::filesystem::remove(path);
  {
    // The old writer got as far as step 2 and the first loss at step 2, then was lost itself.
    MetricsLog old;
    old.open(path, /*append=*/false);
    old.write({{"type", "step"}, {"step", 1}});
    old.write({{"type", "step"}, {"step", 2}});
    old.write(lost(2, {3}));
  }
  MetricsLog next;
  next.hold_lines(4);
  next.write({{"type", "step"}, {"step", 2}});
  next.write(lost(2, {3}));
  next.write({{"type", "step"}, {"step", 3}});
  next.write(lost(3, {1}));  // the old writer's group lost a rank at step 3: the change it never wrote
  next.open(path, /*append=*/true);
  next.write_held();
  next.write(lost(3, {0}));  // the change that lost the old writer, written by the new one

  std::vector<std::string> seen;
  for (const auto& l : read_lines(path))
    seen.push_back(l["type"].get<std::string>() + " " + std::to_string(l["step"].get<int64_t>()) +
                   (l.contains("lost_group_ids") ? " " + l["lost_group_ids"].dump() : ""));
  const std::vector<std::string> expected = {"step 1", "step 2", "group_lost 2 [3]", "group_lost 3 [1]", "step 3",
                                             "group_lost 3 [0]"};
  EXPECT_EQ(seen, expected);
  std::filesystem::remove(path);
}

TEST(MetricsLog, UnderTimeBasedRoundsANewWriterAtOtherStepsWritesEachLineOnce) {
  const auto path = (std::filesystem::temp_directory_path() / "fedshard-test-metrics-timed.jsonl").string();
  std::filesystem::remove(path);
  const auto round = [](int64_t step, std::vector<int64_t> group_steps) {
    return nlohmann::json{{"type", "round"}, {"step", step}, {"group_steps", group_steps}};
  };
  const auto eval = [](int64_t step, int64_t tokens) {
    return nlohmann::json{{"type", "eval"}, {"step", step}, {"tokens", tokens}, {"model", "global"}};
  };
  nlohmann::json lost3 = lost(5, {3});
  lost3["group_ids"] = {0, 1};
  {
    // The writer's group (group 0) took 4 steps to group 1's 2 in the round, then lost group 3 at its step 5.
    MetricsLog old;
    old.open(path, /*append=*/false);
    for (int64_t s = 1; s <= 4; ++s) old.write({{"type", "step"}, {"step", s}});
    old.write(round(4, {4, 2}));
    old.write(eval(4, 100));
    old.write(lost3);
  }
  // Group 1's first rank held the same round, evaluation and change at its own steps 2 and 3.
  MetricsLog next;
  next.hold_lines(100);
  for (int64_t s = 1; s <= 2; ++s) next.write({{"type", "step"}, {"step", s}});
  next.write(round(2, {4, 2}));
  next.write(eval(2, 100));
  lost3["step"] = 3;
  next.write(lost3);
  next.write({{"type", "step"}, {"step", 3}});
  next.open(path, /*append=*/true);
  next.skip_steps_through(4);
  next.write(lost(4, {0}));
  next.write_held();
  next.write({{"type", "step"}, {"step", 4}});  // the lost writer's step 4 stands
  next.write({{"type", "step"}, {"step", 5}});

  std::vector<std::string> seen;
  for (const auto& l : read_lines(path))
    seen.push_back(l["type"].get<std::string>() + " " + std::to_string(l["step"].get<int64_t>()) +
                   (l.contains("lost_group_ids") ? " " + l["lost_group_ids"].dump() : ""));
  const std::vector<std::string> expected = {"step 1", "step 2", "step 3", "step 4", "round 4", "eval 4",
                                             "group_lost 5 [3]", "group_lost 4 [0]", "step 5"};
  EXPECT_EQ(seen, expected);
  std::filesystem::remove(path);
}
