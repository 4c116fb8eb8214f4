#include "sites/coordinator.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>

#include <nlohmann/json.hpp>

#include "util/error.h"
#include "util/posix_file.h"

namespace fedshard::sites {

namespace {

constexpr size_t kHistory = 8;  // committed rounds kept for a shard that reports one late

nlohmann::json to_json(const std::vector<SiteTokens>& sites) {
  auto j = nlohmann::json::array();
  for (const auto& s : sites) j.push_back({{"site", s.site}, {"tokens", s.tokens}, {"norm2", s.norm2}, {"scale", s.scale}});
  return j;
}

std::vector<SiteTokens> from_json(const nlohmann::json& j) {
  std::vector<SiteTokens> out;
  for (const auto& s : j)
    out.push_back({s.at("site").get<std::string>(), s.at("tokens").get<double>(), s.value("norm2", 0.0),
                   s.value("scale", 1.0)});
  return out;
}

}  // namespace

Coordinator::Coordinator(int shards, int quorum, double deadline_seconds, std::string state_path, int64_t first_round,
                         RoundRules rules)
    : shards_(shards), quorum_(quorum), deadline_(deadline_seconds), rules_(std::move(rules)),
      state_path_(std::move(state_path)), round_(first_round) {
  if (!std::filesystem::exists(state_path_)) return;
  try {
    const auto j = nlohmann::json::parse(read_file(state_path_));
    round_ = j.at("round");
    attempt_ = j.at("attempt");
    if (!j.at("decided").is_null()) {
      decided_ = from_json(j.at("decided"));
      decided_aggregate_ = j.value("aggregate", std::string("mean"));
    }
    for (const auto& [round, c] : j.at("committed").items())
      committed_[std::stoll(round)] = {c.at("attempt").get<uint32_t>(), from_json(c.at("participants"))};
    for (const auto& site : j.at("active")) active_.insert(site.get<std::string>());
  } catch (const std::exception& e) {
    throw Error(cat(state_path_, ": not the coordinator's decisions (", e.what(), ")"));
  }
}

void Coordinator::persist_locked() const {
  nlohmann::json committed = nlohmann::json::object();
  for (const auto& [round, c] : committed_)
    committed[std::to_string(round)] = {{"attempt", c.first}, {"participants", to_json(c.second)}};
  const nlohmann::json j = {{"round", round_},
                            {"attempt", attempt_},
                            {"decided", decided_ ? to_json(*decided_) : nlohmann::json(nullptr)},
                            {"aggregate", decided_aggregate_},
                            {"committed", committed},
                            {"active", active_}};
  write_file_atomically(state_path_, j.dump(1) + "\n");
}

void Coordinator::seen(const std::string& site) {
  std::lock_guard<std::mutex> lock(mu_);
  if (active_.insert(site).second) persist_locked();
}

void Coordinator::left(const std::string& site) {
  std::lock_guard<std::mutex> lock(mu_);
  if (active_.erase(site) > 0) persist_locked();
}

Decision Coordinator::verdict(Verdict v, std::vector<SiteTokens> participants) const {
  Decision d;
  d.round = round_;
  d.attempt = attempt_;
  d.verdict = v;
  d.participants = std::move(participants);
  d.aggregate = decided_ ? decided_aggregate_ : rules_.aggregate;
  return d;
}

Decision Coordinator::report(const Report& r) {
  std::lock_guard<std::mutex> lock(mu_);
  return decide_locked(r);
}

Decision Coordinator::decide_locked(const Report& r) {
  if (r.round < round_) {
    // A round every shard prepared: the shard that reports it late commits it too.
    const auto it = committed_.find(r.round);
    if (it == committed_.end()) return verdict(Verdict::Wait);  // older than the history: nothing to say
    Decision d = verdict(Verdict::Commit, it->second.second);
    d.round = r.round;
    d.attempt = it->second.first;
    return d;
  }
  if (r.round > round_) return verdict(Verdict::Wait);
  if (r.attempt != attempt_) return verdict(Verdict::Abort);
  reports_[r.shard] = r;
  if (decided_) {
    if (r.state == ShardState::Missing) {
      abort_locked();
      return verdict(Verdict::Abort);
    }
    if (r.state == ShardState::Prepared) prepared_.insert(r.shard);
    if (static_cast<int>(prepared_.size()) < shards_) return verdict(Verdict::Prepare, *decided_);
    const auto participants = *decided_;
    commit_locked();
    Decision d = verdict(Verdict::Commit, participants);
    d.round = round_ - 1;
    d.attempt = r.attempt;
    return d;
  }
  if (!r.complete.empty() && !opened_) opened_ = Clock::now();
  if (static_cast<int>(reports_.size()) < shards_) return verdict(Verdict::Wait);
  // The sites complete on every shard, with shard 0's record of their tokens.
  std::vector<SiteTokens> everywhere;
  for (const auto& s : reports_.begin()->second.complete) {
    const bool all = std::all_of(reports_.begin(), reports_.end(), [&](const auto& kv) {
      const auto& c = kv.second.complete;
      return std::any_of(c.begin(), c.end(), [&](const SiteTokens& t) { return t.site == s.site; });
    });
    if (all) everywhere.push_back(s);
  }
  std::sort(everywhere.begin(), everywhere.end(), [](const auto& a, const auto& b) { return a.site < b.site; });
  if (everywhere.empty()) return verdict(Verdict::Wait);
  if (round_ == 0) {
    // The first round takes one site's initial model.
    close_locked({everywhere.front()});
    return verdict(Verdict::Prepare, *decided_);
  }
  const int need = std::max(1, quorum_ > 0 ? quorum_ : static_cast<int>(active_.size()));
  const bool late = opened_ && std::chrono::duration<double>(Clock::now() - *opened_).count() >= deadline_;
  if (static_cast<int>(everywhere.size()) < need && !late) return verdict(Verdict::Wait);
  std::set<std::string> refused;
  auto participants = bounded_locked(std::move(everywhere), refused);
  close_locked(std::move(participants), refused);
  return verdict(Verdict::Prepare, *decided_);
}

std::vector<SiteTokens> Coordinator::bounded_locked(std::vector<SiteTokens> complete,
                                                    std::set<std::string>& refused) const {
  std::vector<SiteTokens> out;
  for (auto& s : complete) {
    s.norm2 = 0;
    for (const auto& [shard, r] : reports_)
      for (const auto& t : r.complete)
        if (t.site == s.site) s.norm2 += t.norm2;
    const double norm = std::sqrt(s.norm2);
    if (rules_.norm_bound > 0 && norm > rules_.norm_bound) {
      if (rules_.refuse) {
        std::fprintf(stderr, "fedshard serve: round %lld: site %s's delta has norm %.6g, above the bound %.6g: "
                     "refused; the round goes on without it\n", static_cast<long long>(round_), s.site.c_str(), norm,
                     rules_.norm_bound);
        refused.insert(s.site);
        continue;
      }
      s.scale = rules_.norm_bound / norm;
      std::fprintf(stderr, "fedshard serve: round %lld: site %s's delta has norm %.6g, above the bound %.6g: clipped "
                   "to it (x%.6g)\n", static_cast<long long>(round_), s.site.c_str(), norm, rules_.norm_bound, s.scale);
    }
    out.push_back(s);
  }
  return out;
}

void Coordinator::close_locked(std::vector<SiteTokens> participants, const std::set<std::string>& refused) {
  // A site left out is no longer waited for (until it submits or says hello again); one refused was on time.
  for (auto it = active_.begin(); it != active_.end();) {
    const bool in = refused.count(*it) > 0 ||
                    std::any_of(participants.begin(), participants.end(), [&](const auto& s) { return s.site == *it; });
    if (!in && round_ > 0) {
      std::fprintf(stderr, "fedshard serve: round %lld closes without site %s (not complete on every shard by the "
                   "deadline); it is no longer waited for\n", static_cast<long long>(round_), it->c_str());
      it = active_.erase(it);
    } else {
      ++it;
    }
  }
  decided_ = std::move(participants);
  decided_aggregate_ = rules_.aggregate;
  prepared_.clear();
  persist_locked();
}

void Coordinator::commit_locked() {
  committed_[round_] = {attempt_, *decided_};
  while (committed_.size() > kHistory) committed_.erase(committed_.begin());
  ++round_;
  attempt_ = 0;
  decided_.reset();
  prepared_.clear();
  reports_.clear();
  opened_.reset();
  persist_locked();
}

void Coordinator::abort_locked() {
  ++attempt_;
  decided_.reset();
  prepared_.clear();
  reports_.clear();
  opened_ = Clock::now();
  persist_locked();
}

}  // namespace fedshard::sites
