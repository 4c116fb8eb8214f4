// Network tiers that communication is accounted to.
#pragma once

#include <array>
#include <string>

namespace fedshard::comm {

enum class Tier { Node = 0, InterNode = 1, InterGroup = 2 };
constexpr int kNumTiers = 3;
constexpr std::array<Tier, kNumTiers> kTiers{Tier::Node, Tier::InterNode, Tier::InterGroup};

// "node", "inter-node", "inter-group" (the CLI's --link names); metrics use inter_node/inter_group keys.
const char* tier_name(Tier t);
const char* tier_metric_key(Tier t);
// Parses a CLI tier name; throws fedshard::Error on an unknown one.
Tier parse_tier(const std::string& name);

// Data: parameters and gradients (what DESIGN's cost formulas count). Control: scalars for logging, clipping
// and sync bookkeeping, counted separately so both can be checked exactly.
enum class Traffic { Data = 0, Control = 1 };

// Which comm thread runs a communicator's collectives. Inter-group averaging runs on its own lane so that a
// round left in flight across steps (federation.overlap) does not hold up the group's per-step collectives
// queued behind it. Each lane keeps its own order; no communicator is used from two lanes.
enum class Lane { Inner = 0, Federation = 1 };

}  // namespace fedshard::comm
