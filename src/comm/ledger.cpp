#include "comm/ledger.h"

namespace fedshard::comm {

Tally& Tally::operator+=(const Tally& o) {
  sent_bytes += o.sent_bytes;
  formula_bytes += o.formula_bytes;
  payload_bytes += o.payload_bytes;
  calls += o.calls;
  seconds += o.seconds;
  emulated_seconds += o.emulated_seconds;
  return *this;
}

Tally Tally::operator-(const Tally& o) const {
  Tally d;
  d.sent_bytes = sent_bytes - o.sent_bytes;
  d.formula_bytes = formula_bytes - o.formula_bytes;
  d.payload_bytes = payload_bytes - o.payload_bytes;
  d.calls = calls - o.calls;
  d.seconds = seconds - o.seconds;
  d.emulated_seconds = emulated_seconds - o.emulated_seconds;
  return d;
}

double LedgerSnapshot::sent_bytes(Tier t) const {
  return at(t, Traffic::Data).sent_bytes + at(t, Traffic::Control).sent_bytes;
}

double LedgerSnapshot::sent_bytes(Traffic k) const {
  double s = 0;
  for (Tier t : kTiers) s += at(t, k).sent_bytes;
  return s;
}

double LedgerSnapshot::formula_bytes(Tier t) const {
  return at(t, Traffic::Data).formula_bytes + at(t, Traffic::Control).formula_bytes;
}

LedgerSnapshot LedgerSnapshot::operator-(const LedgerSnapshot& o) const {
  LedgerSnapshot d;
  for (int t = 0; t < kNumTiers; ++t)
    for (int k = 0; k < 2; ++k) d.by_tier[t][k] = by_tier[t][k] - o.by_tier[t][k];
  for (const auto& [name, tally] : by_comm) {
    auto it = o.by_comm.find(name);
    d.by_comm[name] = it == o.by_comm.end() ? tally : tally - it->second;
  }
  for (int l = 0; l < 2; ++l)
    for (int t = 0; t < kNumTiers; ++t) d.lane_sent[l][t] = lane_sent[l][t] - o.lane_sent[l][t];
  d.exposed_wait_seconds = exposed_wait_seconds - o.exposed_wait_seconds;
  return d;
}

Ledger& Ledger::instance() {
  static Ledger ledger;
  return ledger;
}

void Ledger::record(const std::string& comm, Tier tier, Lane lane, Traffic traffic, const Tally& t) {
  std::lock_guard<std::mutex> lock(mu_);
  totals_.by_tier[static_cast<int>(tier)][static_cast<int>(traffic)] += t;
  totals_.by_comm[comm] += t;
  totals_.lane_sent[static_cast<int>(lane)][static_cast<int>(tier)] += t.sent_bytes;
}

void Ledger::add_exposed_wait(double seconds) {
  std::lock_guard<std::mutex> lock(mu_);
  totals_.exposed_wait_seconds += seconds;
}

LedgerSnapshot Ledger::snapshot() const {
  std::lock_guard<std::mutex> lock(mu_);
  return totals_;
}

}  // namespace fedshard::comm
