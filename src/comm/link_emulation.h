// Link emulation: a multi-tier network on one box. Each collective still runs for real; its completion is held
// back until the alpha-beta time of its ring algorithm on its tier has elapsed (steps * latency +
// bus bytes / bandwidth). Collectives leave one rank in submission order per lane (one comm thread, like one
// NCCL stream), so an emulated collective starts when the real one starts or when the previous emulated one of
// its lane is released, whichever is later. The hold is on the async handle: compute overlaps it as it would a slow link.
#pragma once

#include <array>
#include <chrono>
#include <mutex>
#include <optional>
#include <string>

#include "comm/communicator.h"
#include "comm/tier.h"

namespace fedshard::comm {

struct LinkSpec {
  double bandwidth_bytes_per_s = 0;
  double latency_s = 0;
  // ",shared": the bandwidth is a node's uplink, split among the node's rings that cross it at once (priced by
  // fedshard plan; the emulation holds each rank's collectives on their own and refuses it).
  bool shared = false;
  // alpha-beta time of collective c of full_bytes over p ranks on this link.
  double seconds(Collective c, double full_bytes, int p) const;
};

// "1Gbit/s,500us", "10GB/s,2us", "50Mbit/s,1ms,shared": bandwidth in bit/s, Kbit/s, Mbit/s, Gbit/s, B/s, KB/s,
// MB/s, GB/s (decimal) or KiB/s, MiB/s, GiB/s; latency in ns, us, ms or s. Throws fedshard::Error naming what is
// wrong.
LinkSpec parse_link_spec(const std::string& spec);
std::string describe(const LinkSpec& l);

class LinkEmulator {
 public:
  using Clock = std::chrono::steady_clock;
  static LinkEmulator& instance();

  void set(Tier tier, const LinkSpec& spec);
  void clear();  // back to the real network on every tier
  bool active() const;
  std::optional<LinkSpec> link(Tier tier) const;

  // For a collective that really ran [start, end): when its handle may complete. Serializes emulated time.
  Clock::time_point release_time(Tier tier, Lane lane, Collective c, double full_bytes, int p, Clock::time_point start,
                                 Clock::time_point end);

 private:
  mutable std::mutex mu_;
  std::array<std::optional<LinkSpec>, kNumTiers> links_{};
  std::array<Clock::time_point, 2> free_at_{};  // per lane
};

}  // namespace fedshard::comm
