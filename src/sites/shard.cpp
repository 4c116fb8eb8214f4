#include "sites/shard.h"

#include <ATen/core/grad_mode.h>
#include <grpcpp/support/status_code_enum.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "sites/round_log.h"
#include "util/error.h"

namespace fedshard::sites {

namespace {

constexpr int64_t kChunkElements = 1 << 20;  // elements per fetched chunk, at most

int64_t round_up(int64_t n, int64_t to) { return (n + to - 1) / to * to; }

[[noreturn]] void refuse(grpc::StatusCode code, const std::string& message) { throw Refusal{code, message}; }

// Ranges sorted and merged.
std::vector<Range> merged(std::vector<Range> v) {
  std::sort(v.begin(), v.end(), [](const Range& a, const Range& b) { return a.begin < b.begin; });
  std::vector<Range> out;
  for (const auto& r : v) {
    if (!out.empty() && r.begin <= out.back().end)
      out.back().end = std::max(out.back().end, r.end);
    else
      out.push_back(r);
  }
  return out;
}

std::string names(const std::vector<SiteTokens>& sites) {
  std::string out;
  for (const auto& s : sites) out += (out.empty() ? "" : ", ") + s.site;
  return "[" + out + "]";
}

}  // namespace

struct Shard::Submission {
  Payload payload = Payload::Model;
  double tokens = 0;
  at::Tensor values;  // over the shard's elements
  std::vector<Range> covered;
  Arrival arrival;
  std::optional<double> norm2;  // of its delta over the shard's elements, once complete
  bool complete(Range r) const { return covered.size() == 1 && covered.front() == r; }
};

Shard::Shard(ServeOptions opts, std::function<Decision(const Report&)> report, const Faults& faults)
    : opts_(std::move(opts)), report_(std::move(report)), faults_(faults),
      store_(opts_.state_dir, opts_.shard, opts_.shards), sessions_(cat("shard ", opts_.shard, "/", opts_.shards)) {
  identity_ = store_.identity();
  if (identity_) {
    ranges_.emplace(std::vector<int64_t>{identity_->total});
    if (identity_->codec != "none") codec_.emplace(identity_->make_codec());
  }
  if (const auto c = store_.committed()) {
    FS_CHECK(identity_.has_value(), store_.dir(), ": a committed round without identity.json");
    adopt(*c);
  }
  // A round this shard prepared before it stopped: committed when the coordinator says so, or dropped.
  if (const auto p = store_.prepared(); p && p->round == committed_ + 1) {
    ShardModel m;
    m.global = p->global;
    m.outer = federation::make_outer_optimizer(opts_.outer, {p->global});
    for (auto& [name, t] : m.outer->state()[0]) t.copy_(p->outer.at(name));
    m.down_residual = p->down_residual;
    m.down_delta = p->down_delta;
    prepared_ = std::move(m);
    prepared_attempt_ = p->attempt;
    attempt_ = p->attempt;
  }
}

Shard::~Shard() { stop(); }

Range Shard::range() const { return ranges_->shard(opts_.shard, opts_.shards); }

void Shard::adopt(const ShardSnapshot& s) {
  committed_ = s.round;
  participants_ = s.participants;
  model_.global = s.global;
  model_.outer = federation::make_outer_optimizer(opts_.outer, {s.global});
  for (auto& [name, t] : model_.outer->state()[0]) {
    FS_CHECK(s.outer.count(name), store_.dir(), ": the committed round has no outer state '", name,
             "' (another --outer than the one it was written with?)");
    t.copy_(s.outer.at(name));
  }
  model_.down_residual = s.down_residual;
  model_.down_delta = s.down_delta;
}

HelloReply Shard::hello(const Hello& h, const std::string& site) {
  if (h.version != kProtocolVersion)
    refuse(grpc::FAILED_PRECONDITION, cat("protocol version ", h.version, "; this server speaks ", kProtocolVersion));
  if (h.site != site)
    refuse(grpc::PERMISSION_DENIED, cat("the site calls itself '", h.site, "' but its certificate names '", site, "'"));
  const SiteSessions::Call call(sessions_, site, h.session);
  Identity theirs;
  try {
    theirs = Identity::from_json(nlohmann::json::parse(h.identity));
    if (theirs.codec != "none") theirs.make_codec();  // a codec this server cannot make is never pinned
  } catch (const std::exception& e) {
    refuse(grpc::INVALID_ARGUMENT, cat("a malformed federation identity (", e.what(), ")"));
  }
  std::lock_guard<std::mutex> lock(mu_);
  if (!identity_) {
    store_.pin(theirs);
    identity_ = theirs;
    ranges_.emplace(std::vector<int64_t>{theirs.total});
    if (theirs.codec != "none") codec_.emplace(theirs.make_codec());
    std::fprintf(stderr, "fedshard serve: shard %d/%d: federation pinned by site %s: %s, tokenizer %s, deltas as %s; "
                 "elements [%lld, %lld) of %lld\n", opts_.shard, opts_.shards, site.c_str(), theirs.model.c_str(),
                 theirs.tokenizer.c_str(), theirs.codec.c_str(), static_cast<long long>(range().begin),
                 static_cast<long long>(range().end), static_cast<long long>(theirs.total));
  } else if (const auto why = identity_->differs(theirs); !why.empty()) {
    refuse(grpc::FAILED_PRECONDITION, "another federation: " + why);
  }
  if (on_site) on_site(site, false);
  HelloReply r;
  r.shard = static_cast<uint32_t>(opts_.shard);
  r.shards = static_cast<uint32_t>(opts_.shards);
  r.begin = range().begin;
  r.end = range().end;
  r.total = identity_->total;
  r.committed = committed_;
  r.codec = identity_->codec;
  return r;
}

void Shard::store_chunk(const Chunk& c, const SubmitHeader& h, at::Tensor& values, std::vector<Range>& covered) const {
  try {
    check_chunk(c);
  } catch (const WireError& e) {
    refuse(grpc::DATA_LOSS, e.what());
  }
  if (c.offset < h.begin || c.offset + c.count > h.end)
    refuse(grpc::INVALID_ARGUMENT, cat("a chunk of elements [", c.offset, ", ", c.offset + c.count,
                                       ") outside the submission's [", h.begin, ", ", h.end, ")"));
  // Straight into the stream's buffer: a chunk is up to 4 MiB, and a shard takes many streams at once.
  auto dst = values.narrow(0, c.offset - h.begin, c.count);
  if (h.payload == Payload::Model) {
    if (static_cast<int64_t>(c.payload.size()) != c.count * 4)
      refuse(grpc::INVALID_ARGUMENT, cat("a chunk of ", c.count, " float32 values in ", c.payload.size(), " bytes"));
    std::memcpy(dst.data_ptr(), c.payload.data(), c.payload.size());
  } else {
    if (static_cast<int64_t>(c.payload.size()) != encoded_size(*codec_, c.count))
      refuse(grpc::INVALID_ARGUMENT, cat("a chunk of ", c.count, " elements encoded as ", identity_->codec, " in ",
                                         c.payload.size(), " bytes, not ", encoded_size(*codec_, c.count)));
    const auto bytes = at::from_blob(const_cast<char*>(c.payload.data()), {static_cast<int64_t>(c.payload.size())},
                                     at::kByte);
    dst.copy_(decode_blocks(*codec_, bytes, c.count));
  }
  if (!at::isfinite(dst).all().item<bool>())
    refuse(grpc::INVALID_ARGUMENT, cat("a chunk at element ", c.offset, " holds a NaN or an infinity"));
  covered.push_back({c.offset, c.offset + c.count});
}

SubmitReply Shard::submit(const SubmitHeader& h, const std::string& site, const std::function<bool(Chunk&)>& next) {
  at::NoGradGuard no_grad;
  if (h.site != site)
    refuse(grpc::PERMISSION_DENIED, cat("a submission for site '", h.site, "' from site '", site, "'"));
  const SiteSessions::Call call(sessions_, site, h.session);
  int64_t open = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!identity_) refuse(grpc::FAILED_PRECONDITION, "a submission before the site's hello");
    open = committed_ + 1;
    // A site submitting the open round, or a closed one late, is waited for from now on: left out once for being
    // late, it would otherwise stay out for as long as the others finish a round before its submission starts (a
    // slow link: tests/sites_chaos.py).
    if (h.round <= open && on_site) on_site(site, false);
    // A shard started again may be a round behind the others until the coordinator tells it to commit: try again.
    if (h.round == open + 1)
      refuse(grpc::UNAVAILABLE, cat("this shard is at round ", open, ", catching up with round ", h.round));
    if (h.round != open)
      refuse(grpc::ABORTED, h.round < open ? cat("round ", h.round, " is closed (this shard committed round ",
                                                 committed_, "); take its global model")
                                           : cat("round ", h.round, " is not open (this shard is at round ", open, ")"));
    const bool delta = h.round > 0 && codec_.has_value();
    if ((h.payload == Payload::Delta) != delta)
      refuse(grpc::INVALID_ARGUMENT, cat("round ", h.round, " takes ", delta ? "deltas encoded as " + identity_->codec
                                                                               : std::string("float32 models")));
    const auto mine = range();
    if (h.begin < mine.begin || h.end > mine.end || h.end <= h.begin)
      refuse(grpc::INVALID_ARGUMENT, cat("elements [", h.begin, ", ", h.end, ") are not within this shard's [",
                                         mine.begin, ", ", mine.end, ")"));
  }
  // The stream is read outside the lock: a slow link holds no other site up.
  const double arrived = wall_seconds();
  int64_t bytes = 0;
  at::Tensor values = at::zeros({h.end - h.begin}, at::kFloat);
  std::vector<Range> covered;
  Chunk c;
  while (next(c)) {
    store_chunk(c, h, values, covered);
    bytes += static_cast<int64_t>(c.payload.size());
  }
  covered = merged(std::move(covered));
  if (covered.size() != 1 || !(covered.front() == Range{h.begin, h.end}))
    refuse(grpc::DATA_LOSS, cat("the stream ended before elements [", h.begin, ", ", h.end, ") arrived"));

  std::lock_guard<std::mutex> lock(mu_);
  if (h.round != committed_ + 1 || (prepared_ && prepared_attempt_ == attempt_))
    refuse(grpc::ABORTED, cat("round ", h.round, " closed while the submission arrived; take its global model"));
  auto& s = round_[site];
  if (!s) {
    s = std::make_unique<Submission>();
    s->values = at::zeros({range().size()}, at::kFloat);
    s->payload = h.payload;
  }
  if (s->payload != h.payload) refuse(grpc::INVALID_ARGUMENT, "a site's ranks submitted models and deltas in one round");
  s->values.narrow(0, h.begin - range().begin, h.end - h.begin).copy_(values);
  s->tokens = h.tokens;
  auto& a = s->arrival;
  a.first_s = a.bytes == 0 ? arrived : std::min(a.first_s, arrived);
  a.last_s = std::max(a.last_s, wall_seconds());
  a.bytes += bytes;
  s->covered.push_back({h.begin, h.end});
  s->covered = merged(std::move(s->covered));
  s->norm2.reset();
  if (on_site) on_site(site, false);
  changed_.notify_all();
  SubmitReply r;
  r.accepted = true;
  r.committed = committed_;
  return r;
}

void Shard::fetch(const FetchRequest& r, const std::string& site, const std::function<bool()>& cancelled,
                  const std::function<bool(const std::string&)>& write) {
  if (r.site != site) refuse(grpc::PERMISSION_DENIED, cat("a fetch for site '", r.site, "' from site '", site, "'"));
  const SiteSessions::Call call(sessions_, site, r.session);
  std::unique_lock<std::mutex> lock(mu_);
  if (!identity_) refuse(grpc::FAILED_PRECONDITION, "a fetch before the site's hello");
  if (r.round == committed_ + 2)
    refuse(grpc::UNAVAILABLE, cat("this shard is at round ", committed_ + 1, ", catching up with round ", r.round));
  if (r.round > committed_ + 2)
    refuse(grpc::ABORTED, cat("round ", r.round, " is not open (this shard is at round ", committed_ + 1, ")"));
  const auto mine = range();
  if (r.begin < mine.begin || r.end > mine.end || r.end <= r.begin)
    refuse(grpc::INVALID_ARGUMENT, cat("elements [", r.begin, ", ", r.end, ") are not within this shard's [",
                                       mine.begin, ", ", mine.end, ")"));
  while (committed_ < r.round) {
    if (stopping_) refuse(grpc::UNAVAILABLE, "the round server is stopping");
    if (cancelled()) refuse(grpc::CANCELLED, "the site went away");
    changed_.wait_for(lock, std::chrono::milliseconds(100));
  }
  FetchHeader head;
  head.round = committed_;
  head.participants = static_cast<uint32_t>(participants_.size());
  for (const auto& p : participants_) {
    head.tokens += p.tokens;
    head.included = head.included || (p.site == site && committed_ == r.round);
  }
  // The change from the round the site holds, where the codec's encoding of it is kept; else the model whole. A
  // committed round's tensors are never changed (the next round makes new ones), so the chunks are cut from them
  // as they are written, outside the lock, and no fetch holds a copy of its range.
  const bool delta = codec_ && model_.down_delta.defined() && r.have == committed_ - 1;
  head.payload = delta ? Payload::Delta : Payload::Model;
  const at::Tensor source = delta ? model_.down_delta : model_.global;
  lock.unlock();
  if (!write(encode(head))) return;
  if (delta) {
    // The codec's blocks that cover the range, cut from the shard's one encoding (the last block padded).
    const int64_t g = codec_->granule(), step = kChunkElements / g * g, padded = round_up(mine.size(), g);
    const int64_t end = std::min(round_up(r.end - mine.begin, g), mine.size());
    for (int64_t from = (r.begin - mine.begin) / g * g; from < end; from += step) {
      const int64_t count = std::min(step, end - from);
      const auto bytes = codec_->cut(source, padded, from, round_up(count, g));
      if (!write(encode(make_chunk(mine.begin + from, count,
                                   std::string(static_cast<const char*>(bytes.data_ptr()), bytes.numel())))))
        return;
    }
    return;
  }
  for (int64_t from = r.begin; from < r.end; from += kChunkElements) {
    const int64_t count = std::min(kChunkElements, r.end - from);
    const auto v = source.narrow(0, from - mine.begin, count).contiguous();
    if (!write(encode(make_chunk(from, count, std::string(static_cast<const char*>(v.data_ptr()), count * 4)))))
      return;
  }
}

Ack Shard::leave(const Leave& l, const std::string& site) {
  if (l.site != site) refuse(grpc::PERMISSION_DENIED, cat("a leave for site '", l.site, "' from site '", site, "'"));
  {
    const SiteSessions::Call call(sessions_, site, l.session);
    sessions_.release(site, l.session);
  }
  if (on_site) on_site(site, true);
  std::fprintf(stderr, "fedshard serve: shard %d/%d: site %s left\n", opts_.shard, opts_.shards, site.c_str());
  return {};
}

void Shard::attend(const Attend& a, const std::string& site, const std::function<bool()>& cancelled,
                   const std::function<bool(const std::string&)>& write) {
  if (a.site != site) refuse(grpc::PERMISSION_DENIED, cat("an attend for site '", a.site, "' from site '", site, "'"));
  const SiteSessions::Call call(sessions_, site, a.session);
  if (!write(encode(Ack{}))) return;
  std::unique_lock<std::mutex> lock(mu_);
  while (!stopping_ && !cancelled()) changed_.wait_for(lock, std::chrono::milliseconds(200));
  if (stopping_) refuse(grpc::UNAVAILABLE, "the round server is stopping");
}

Report Shard::report_locked() {
  Report r;
  r.round = committed_ + 1;
  r.attempt = attempt_;
  r.shard = static_cast<uint32_t>(opts_.shard);
  r.state = prepared_ && prepared_attempt_ == attempt_ ? ShardState::Prepared : ShardState::Collecting;
  if (!ranges_) return r;
  for (const auto& [site, s] : round_) {
    if (!s->complete(range())) continue;
    // Round 0's data is a site's initial model, not a change: no norm.
    if (!s->norm2) s->norm2 = committed_ < 0 ? 0.0 : delta_norm2(s->payload, s->values, model_.global);
    r.complete.push_back({site, s->tokens, *s->norm2});
  }
  return r;
}

ShardSnapshot Shard::snapshot_of(const ShardModel& m, int64_t round, uint32_t attempt,
                                 const std::vector<SiteTokens>& participants) const {
  ShardSnapshot s;
  s.round = round;
  s.attempt = attempt;
  s.participants = participants;
  s.global = m.global;
  s.down_residual = m.down_residual;
  s.down_delta = m.down_delta;
  for (const auto& [name, t] : m.outer->state()[0]) s.outer[name] = t;
  return s;
}

void Shard::prepare_locked(const Decision& d) {
  at::NoGradGuard no_grad;
  std::vector<SiteData> sites;
  Payload payload = Payload::Model;
  for (const auto& p : d.participants) {
    const auto it = round_.find(p.site);
    if (it == round_.end() || !it->second->complete(range())) return;  // reported as missing below
    sites.push_back({p.site, p.tokens, it->second->values, p.scale});
    payload = it->second->payload;
  }
  faults_.at(FaultPoint::RoundPrepare, d.round);
  ShardModel next;
  if (d.round == 0) {
    apply_round(next, 0, payload, sites, codec_);
    next.outer = federation::make_outer_optimizer(opts_.outer, {next.global});
    if (codec_) next.down_residual = at::zeros_like(next.global);
  } else {
    next.global = model_.global.clone();
    next.outer = federation::make_outer_optimizer(opts_.outer, {next.global});
    for (auto& [name, t] : next.outer->state()[0]) t.copy_(model_.outer->state()[0].at(name));
    if (codec_) next.down_residual = model_.down_residual.clone();
    apply_round(next, d.round, payload, sites, codec_, Aggregation::parse(d.aggregate));
  }
  store_.prepare(snapshot_of(next, d.round, d.attempt, d.participants));
  prepared_ = std::move(next);
  prepared_attempt_ = d.attempt;
}

void Shard::commit_locked(const Decision& d) {
  FS_CHECK(prepared_ && prepared_attempt_ == d.attempt, "shard ", opts_.shard, "/", opts_.shards,
           ": told to commit round ", d.round, " (attempt ", d.attempt, "), which it has not prepared (its state "
           "directory lost the prepared round?)");
  faults_.at(FaultPoint::RoundCommit, d.round);
  store_.commit_prepared();
  model_ = std::move(*prepared_);
  prepared_.reset();
  committed_ = d.round;
  participants_ = d.participants;
  std::map<std::string, Arrival> arrivals;
  for (const auto& [site, sub] : round_) arrivals[site] = sub->arrival;
  append_round_log(store_.dir(), d.round, d.attempt, participants_, arrivals,
                   model_.global.contiguous().view(at::kInt).to(at::kLong).sum().item<int64_t>());
  attempt_ = 0;
  round_.clear();
  double tokens = 0;
  for (const auto& p : participants_) tokens += p.tokens;
  std::fprintf(stderr, "fedshard serve: shard %d/%d: round %lld committed with sites %s (%.0f tokens)\n", opts_.shard,
               opts_.shards, static_cast<long long>(d.round), names(participants_).c_str(), tokens);
  changed_.notify_all();
}

void Shard::run() {
  while (!stopping_) {
    Report rep;
    {
      std::lock_guard<std::mutex> lock(mu_);
      rep = report_locked();
    }
    Decision d;
    try {
      d = report_(rep);
    } catch (const std::exception& e) {
      // The coordinator is away (restarting): ask again.
      std::unique_lock<std::mutex> lock(mu_);
      changed_.wait_for(lock, std::chrono::milliseconds(500));
      continue;
    }
    std::unique_lock<std::mutex> lock(mu_);
    switch (d.verdict) {
      case Verdict::Wait:
        changed_.wait_for(lock, std::chrono::milliseconds(50));
        break;
      case Verdict::Abort:
        attempt_ = d.attempt;
        prepared_.reset();
        store_.drop_prepared();
        break;
      case Verdict::Prepare:
        if (d.round != committed_ + 1) break;
        attempt_ = d.attempt;
        if (!prepared_ || prepared_attempt_ != d.attempt) prepare_locked(d);
        if (!prepared_ || prepared_attempt_ != d.attempt) {
          // A site of the decision is not complete here (this shard restarted and lost its data): say so at once.
          Report missing = report_locked();
          missing.state = ShardState::Missing;
          lock.unlock();
          try {
            report_(missing);
          } catch (const std::exception&) {
          }
        }
        break;
      case Verdict::Commit:
        if (d.round == committed_ + 1) commit_locked(d);
        break;
    }
  }
}

void Shard::stop() {
  stopping_ = true;
  changed_.notify_all();
}

}  // namespace fedshard::sites
