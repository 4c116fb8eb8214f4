// Byte and time accounting of every collective, per tier and traffic kind. Communicators record into the
// process-wide ledger; the trainer takes snapshots around a step and reports the difference.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>

#include "comm/tier.h"

namespace fedshard::comm {

struct Tally {
  double sent_bytes = 0;     // bytes this rank handed to MPI's sends, counted at the calls (NCCL: the formula's)
  double formula_bytes = 0;  // what the ring formula says one rank sends (ring_bus_bytes), for comparison
  double payload_bytes = 0;  // size of the buffer the collective was called on
  int64_t calls = 0;
  double seconds = 0;        // time the collective took on the comm thread (real)
  double emulated_seconds = 0;  // extra hold added by link emulation

  Tally& operator+=(const Tally& o);
  Tally operator-(const Tally& o) const;
};

struct LedgerSnapshot {
  std::array<std::array<Tally, 2>, kNumTiers> by_tier{};  // [tier][traffic]
  std::map<std::string, Tally> by_comm;                   // by communicator name ("shard", "segment", ...)
  // Sent bytes by lane and tier: the federation lane's collectives complete whenever they do, also between two
  // steps, so a step's account chains them from the previous step's (train/trainer.cpp).
  std::array<std::array<double, kNumTiers>, 2> lane_sent{};
  double exposed_wait_seconds = 0;  // time the training thread spent blocked in wait()

  const Tally& at(Tier t, Traffic k) const { return by_tier[static_cast<int>(t)][static_cast<int>(k)]; }
  double sent_bytes(Tier t) const;  // data + control
  double sent_bytes(Traffic k) const;  // all tiers
  double formula_bytes(Tier t) const;  // data + control
  LedgerSnapshot operator-(const LedgerSnapshot& o) const;
};

class Ledger {
 public:
  static Ledger& instance();
  void record(const std::string& comm, Tier tier, Lane lane, Traffic traffic, const Tally& t);
  void add_exposed_wait(double seconds);
  LedgerSnapshot snapshot() const;

 private:
  mutable std::mutex mu_;
  LedgerSnapshot totals_;
};

}  // namespace fedshard::comm
