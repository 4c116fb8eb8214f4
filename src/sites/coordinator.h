// Which sites a round takes, decided once for every shard (shard 0 decides; DESIGN.md "Sites"). Each shard reports
// the sites whose data over its elements has arrived; the round closes with the sites complete on every shard once
// there are enough of them (--quorum N, default every active site: one that said hello and has not left or been
// left out) or once the deadline has passed since the first was complete. Then two phases: every shard computes the round and writes it as prepared, and only when all have
// does the coordinator commit it, so a shard killed at any moment either finds its prepared round (and commits it
// when told) or has lost data no shard has committed, and the round is decided again (a new attempt) with the data
// the sites send again. A site left out of a round is no longer waited for until it submits again.
//
// Under a norm bound the coordinator sums each site's squared delta norm over the shards' reports when it closes a
// round: a site above the bound is clipped to it (its scale in the decision) or refused for the round (left out, and
// still waited for: it was complete).
#pragma once

#include <chrono>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "sites/wire.h"

namespace fedshard::sites {

// How shard 0 has every shard combine a round: `fedshard serve --aggregate A --norm-bound B --norm-action clip|refuse`.
struct RoundRules {
  std::string aggregate = "mean";  // sites/round_math.h's Aggregation
  double norm_bound = 0;           // 0: none
  bool refuse = false;             // above the bound: refused, not clipped
};

class Coordinator {
 public:
  using Clock = std::chrono::steady_clock;
  // `state_path`: where decisions persist (a restarted coordinator goes on with them); `first_round`: the round to
  // decide when there is no such file (the shard's last committed round + 1).
  Coordinator(int shards, int quorum, double deadline_seconds, std::string state_path, int64_t first_round,
              RoundRules rules = {});

  Decision report(const Report& r);
  void seen(const std::string& site);  // a site said hello or submitted: it counts for the quorum
  void left(const std::string& site);  // a site left cleanly

 private:
  Decision decide_locked(const Report& r);
  // The sites complete everywhere, each with its whole delta's norm, less those the norm bound refuses.
  std::vector<SiteTokens> bounded_locked(std::vector<SiteTokens> complete, std::set<std::string>& refused) const;
  void close_locked(std::vector<SiteTokens> participants, const std::set<std::string>& refused = {});
  void commit_locked();
  void abort_locked();
  void persist_locked() const;
  Decision verdict(Verdict v, std::vector<SiteTokens> participants = {}) const;

  const int shards_, quorum_;
  const double deadline_;
  const RoundRules rules_;
  const std::string state_path_;
  std::mutex mu_;
  int64_t round_ = 0;
  uint32_t attempt_ = 0;
  std::optional<std::vector<SiteTokens>> decided_;
  std::string decided_aggregate_;  // the decided round's, kept as decided across a restart with another --aggregate
  std::set<uint32_t> prepared_;
  std::map<uint32_t, Report> reports_;
  std::optional<Clock::time_point> opened_;
  // The last rounds committed, for a shard that reports one late: the attempt every shard prepared, the participants.
  std::map<int64_t, std::pair<uint32_t, std::vector<SiteTokens>>> committed_;
  std::set<std::string> active_;
};

}  // namespace fedshard::sites
