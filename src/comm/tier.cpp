#include "comm/tier.h"

#include "util/error.h"

namespace fedshard::comm {

const char* tier_name(Tier t) {
  switch (t) {
    case Tier::Node: return "node";
    case Tier::InterNode: return "inter-node";
    case Tier::InterGroup: return "inter-group";
  }
  return "?";
}

const char* tier_metric_key(Tier t) {
  switch (t) {
    case Tier::Node: return "node";
    case Tier::InterNode: return "inter_node";
    case Tier::InterGroup: return "inter_group";
  }
  return "?";
}

Tier parse_tier(const std::string& name) {
  for (Tier t : kTiers)
    if (name == tier_name(t) || name == tier_metric_key(t)) return t;
  throw Error(cat("unknown network tier '", name, "' (expected node, inter-node or inter-group)"));
}

}  // namespace fedshard::comm
