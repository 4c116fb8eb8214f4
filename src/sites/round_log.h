// What a round server shard measured of each round it committed, one JSON line per round in STATE/rounds.jsonl
// (docs/sites.md): each site's payload bytes and when its first and last byte of the round arrived (wall clock, so
// the shards of one host can be read together: a site's uplink goodput is its bytes over all shards divided by
// the span from its first byte to its last), the committed slice's checksum (its float32 bits summed as int32, as
// a site's federation.audit sums its own: over the shards, equal to the sum over a site's ranks that holds that
// round), and the process's CPU seconds and peak memory so far. A log, not state: a shard started again appends to
// it.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "sites/wire.h"

namespace fedshard::sites {

struct Arrival {
  int64_t bytes = 0;
  double first_s = 0, last_s = 0;  // seconds since the epoch
};

// Seconds since the epoch, now.
double wall_seconds();

void append_round_log(const std::string& state_dir, int64_t round, uint32_t attempt,
                      const std::vector<SiteTokens>& participants, const std::map<std::string, Arrival>& arrivals,
                      int64_t checksum);

}  // namespace fedshard::sites
