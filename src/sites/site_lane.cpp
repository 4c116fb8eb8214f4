#include "sites/site_lane.h"

#include <ATen/core/grad_mode.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <future>
#include <limits>
#include <numeric>
#include <random>
#include <thread>

#include "comm/ledger.h"
#include "sites/round_math.h"
#include "util/error.h"

namespace fedshard::sites {

namespace {

using Clock = std::chrono::steady_clock;
constexpr int64_t kSendChunk = 1 << 20;  // elements per submitted chunk (4 MiB of float32)

std::string host_of(const std::string& address) { return address.substr(0, address.rfind(':')); }

// Calls in flight at once to one shard: a piece (a unit's slice) is one call, and calls made one after another each
// paid the link's round trip (4 pieces in `tiny`, 34 in Llama 3.1 8B); gRPC carries them as streams of one connection.
constexpr size_t kCallsInFlight = 8;

// Waits for every task; the first one's failure, if any.
std::exception_ptr first_failure(std::vector<std::future<void>>& tasks) {
  std::exception_ptr failed;
  for (auto& t : tasks) {
    try {
      t.get();
    } catch (...) {
      if (!failed) failed = std::current_exception();
    }
  }
  return failed;
}

// work(k) for every k of `pieces`, up to kCallsInFlight at once; the first failure is rethrown once all have ended.
void concurrently(const std::vector<size_t>& pieces, const std::function<void(size_t)>& work) {
  std::atomic<size_t> next{0};
  std::vector<std::future<void>> workers;
  for (size_t w = 0; w < std::min(pieces.size(), kCallsInFlight); ++w)
    workers.push_back(std::async(std::launch::async, [&] {
      for (size_t i = next++; i < pieces.size(); i = next++) work(pieces[i]);
    }));
  if (const auto failed = first_failure(workers)) std::rethrow_exception(failed);
}

}  // namespace

// A round from begin to finish: what this rank sends to each shard, and what came back.
struct SiteLane::Round {
  std::vector<size_t> units;
  int64_t number = 0;
  double tokens = 0;
  std::vector<at::Tensor> sent;       // overlap: each unit's slice at begin
  std::vector<at::Tensor> encoded;    // per piece: the decoded values of what was sent (encoded rounds)
  std::vector<std::pair<SubmitHeader, std::vector<Chunk>>> submissions;  // per piece
  std::vector<ShardClient::Fetched> fetched;                             // per piece
  std::future<void> transfer;
  std::vector<at::Tensor> result;  // per unit of the round: the new global slice, once arrived
  int64_t result_round = -1;
  bool included = false;
  bool arrived = false;
};

SiteLane::SiteLane(parallel::ShardedModel& model, comm::Topology& topo, optim::Optimizer& inner,
                   const federation::FederationOptions& opts, SiteOptions site)
    : model_(model), topo_(topo), inner_(inner), opts_(opts), site_(std::move(site)), ranges_([&] {
        std::vector<int64_t> numel;
        for (const auto& u : model.units()) numel.push_back(u->flat().numel());
        return numel;
      }()) {
  FS_CHECK(!site_.servers.empty(), "sites.server names no round server shard");
  if (opts_.compress != "none") codec_.emplace(site_.identity.make_codec());
  site_.identity.total = ranges_.total();
  shards_ = static_cast<int>(site_.servers.size());
  clients_.resize(site_.servers.size());
  const auto& layout = topo_.layout();
  for (size_t u = 0; u < model_.units().size(); ++u) {
    const int64_t padded = model_.units()[u]->flat().padded_numel();
    const auto [a, b] = layout.slice_range(padded, topo_.world_rank());
    const auto mine = ranges_.of_unit(u, a, b);
    for (int j = 0; j < shards_; ++j) {
      const auto part = intersect(mine, ranges_.shard(j, shards_));
      if (part.size() > 0) pieces_.push_back({j, u, part.begin - (ranges_.unit_offset(u) + a), part});
    }
    // The lane's own copies live on the host, where the wire is.
    const auto slice = slice_of(u).to(at::kCPU, /*non_blocking=*/false, /*copy=*/true);
    global_.push_back(slice);
    if (codec_) residual_.push_back(at::zeros_like(slice));
  }
  // A channel to each shard this rank sends to (gRPC connects when first called).
  const auto tls = load_tls(site_.tls);
  for (const auto& p : pieces_) {
    auto& c = clients_[static_cast<size_t>(p.shard)];
    const auto& address = site_.servers[static_cast<size_t>(p.shard)];
    if (!c) c = std::make_unique<ShardClient>(address, tls, site_.server_name.empty() ? host_of(address) : site_.server_name,
                                              site_.patience);
  }
}

SiteLane::~SiteLane() {
  if (round_ && round_->transfer.valid()) round_->transfer.wait();
}

at::Tensor SiteLane::slice_of(size_t unit) const {
  auto& flat = model_.units()[unit]->flat();
  const int64_t padded = flat.padded_numel();
  const auto [a, b] = topo_.layout().slice_range(padded, topo_.world_rank());
  const int64_t shard_begin = topo_.layout().shard_range(padded, topo_.world_rank()).first;
  return flat.shard().detach().narrow(0, a - shard_begin, b - a);
}

at::Tensor SiteLane::over_site(const at::Tensor& v) {
  // Control scalars live where the communicators work (the GPU under NCCL).
  const auto device = model_.units().front()->flat().shard().device();
  const auto mine = v.to(device);
  auto all = at::empty({topo_.world().size() * v.numel()}, mine.options());
  topo_.world().all_gather(mine, all, comm::Traffic::Control)->wait();
  return all.view({topo_.world().size(), v.numel()}).cpu();
}

at::Tensor SiteLane::max_over_site(const at::Tensor& v) { return std::get<0>(over_site(v).max(0)); }

ShardClient& SiteLane::client(int shard) { return *clients_.at(static_cast<size_t>(shard)); }

std::pair<int64_t, int64_t> SiteLane::fetch_models(int64_t round, std::vector<at::Tensor>& into) {
  // Every piece at once: each shard answers with the round it has committed when asked, so asked one after the
  // other over a slow link, the shards straddle a commit more often than not, and a site whose fetch takes longer
  // than a round chased the federation until it stopped (seen: 1.4% loss and 200 ms jitter, tests/sites_chaos.py).
  std::vector<int64_t> rounds(pieces_.size());
  std::vector<size_t> all(pieces_.size());
  std::iota(all.begin(), all.end(), 0);
  concurrently(all, [&](size_t k) {
    const auto& p = pieces_[k];
    FetchRequest req;
    req.round = round;
    req.site = site_.name;
    req.session = session_;
    req.rank = static_cast<uint32_t>(topo_.world_rank());
    req.begin = p.global.begin;
    req.end = p.global.end;
    const auto deadline = Clock::now() + std::chrono::duration<double>(site_.patience);
    ShardClient::Fetched f;
    for (double backoff = 0.2;; backoff = std::min(backoff * 2, 5.0)) {
      try {
        f = client(p.shard).fetch(req);
        break;
      } catch (const RoundMoved& m) {
        throw Error(cat("the round server at ", client(p.shard).address(), " refused a fetch of round ", round, ": ",
                        m.message));
      } catch (const Disconnected& d) {
        if (Clock::now() > deadline)
          throw Error(cat("the round server at ", client(p.shard).address(), " did not answer a fetch for ",
                          site_.patience, " s (", d.message, ")"));
        std::this_thread::sleep_for(std::chrono::duration<double>(backoff));
      }
    }
    FS_CHECK(f.header.payload == Payload::Model, "the round server sent a delta for a whole model");
    for (const auto& c : f.chunks) {
      FS_CHECK(intersect({c.offset, c.offset + c.count}, p.global).size() == c.count &&
                   static_cast<int64_t>(c.payload.size()) == c.count * 4,
               "the round server sent elements [", c.offset, ", ", c.offset + c.count, ") for [", p.global.begin, ", ",
               p.global.end, ")");
      auto dst = into[p.unit].narrow(0, p.offset + (c.offset - p.global.begin), c.count);
      std::memcpy(dst.data_ptr(), c.payload.data(), c.payload.size());
    }
    rounds[k] = f.header.round;
  });
  if (rounds.empty()) return {std::numeric_limits<int64_t>::max(), -1};
  return {*std::min_element(rounds.begin(), rounds.end()), *std::max_element(rounds.begin(), rounds.end())};
}

int64_t SiteLane::agree_on_round(int64_t round, std::vector<at::Tensor>& values) {
  at::NoGradGuard no_grad;
  for (;;) {
    // Shards may answer with different rounds (one moved on): every rank's lowest and highest, and the highest of
    // all asked for again until the site's ranks hold one round.
    const auto [lo, hi] = fetch_models(round, values);
    const auto span = max_over_site(at::tensor({-static_cast<double>(lo), static_cast<double>(hi)}, at::kDouble));
    const auto site_lo = static_cast<int64_t>(-span[0].item<double>()), site_hi = static_cast<int64_t>(span[1].item<double>());
    if (site_lo == site_hi) return site_hi;
    round = site_hi;
  }
}

void SiteLane::start() {
  at::NoGradGuard no_grad;
  // The job's session: rank 0's draw, 53 bits so that a double carries it to every rank exactly.
  std::random_device entropy;
  const uint64_t drawn = ((uint64_t{entropy()} << 32 | entropy()) & ((uint64_t{1} << 53) - 1)) | 1;
  session_ = static_cast<uint64_t>(over_site(at::full({1}, static_cast<double>(drawn), at::kDouble))[0][0].item<double>());
  Hello h;
  h.session = session_;
  h.identity = site_.identity.to_json().dump();
  h.site = site_.name;
  h.rank = static_cast<uint32_t>(topo_.world_rank());
  h.ranks = static_cast<uint32_t>(topo_.world().size());
  int64_t committed = -1;
  std::string failed;
  try {
    for (int j = 0; j < shards_; ++j) {
      if (std::none_of(pieces_.begin(), pieces_.end(), [&](const Piece& p) { return p.shard == j; })) continue;
      const auto reply = client(j).hello(h);
      client(j).attend({site_.name, session_, h.rank});
      FS_CHECK(static_cast<int>(reply.shards) == shards_, "the round server at ", site_.servers[j], " is shard ",
               reply.shard, " of ", reply.shards, "; sites.server names ", shards_, " shards");
      FS_CHECK(static_cast<int>(reply.shard) == j, "sites.server names ", site_.servers[j], " as shard ", j,
               ", but it is shard ", reply.shard);
      const auto want = ranges_.shard(j, shards_);
      FS_CHECK(reply.begin == want.begin && reply.end == want.end, "the round server's shard ", j,
               " holds elements [", reply.begin, ", ", reply.end, "), this site's model puts it at [", want.begin,
               ", ", want.end, ")");
      committed = std::max(committed, reply.committed);
    }
  } catch (const Error& e) {
    failed = e.what();
  }
  // A refusal (a certificate, the federation's identity) reaches every rank alike: the site ends with one line,
  // the lowest refused rank's.
  const auto refused = over_site(at::full({1}, failed.empty() ? 0.0 : 1.0, at::kDouble)).select(1, 0).nonzero();
  if (refused.numel() > 0)
    throw Error(failed.empty() ? "another rank of the site was refused" : failed)
        .reported_by(topo_.world_rank() == refused[0][0].item<int64_t>())
        .everywhere(true);
  committed = static_cast<int64_t>(max_over_site(at::full({1}, static_cast<double>(committed), at::kDouble)).item<double>());
  // A resumed site that the federation has not moved past goes on with its own state, exactly.
  if (global_round_ >= 0 && committed == global_round_) return;
  FS_CHECK(committed >= global_round_, "the round server is at round ", committed, ", behind this site's checkpoint (",
           "round ", global_round_, "): its state directory is not the one this site trained with");
  if (committed < 0) {
    // No global model yet: this site offers its initial one as round 0 (another site's may be taken instead).
    for (const auto& p : pieces_) {
      SubmitHeader head;
      head.round = 0;
      head.site = site_.name;
      head.session = session_;
      head.rank = static_cast<uint32_t>(topo_.world_rank());
      head.payload = Payload::Model;
      head.begin = p.global.begin;
      head.end = p.global.end;
      std::vector<Chunk> chunks;
      const auto values = slice_of(p.unit).narrow(0, p.offset, p.global.size()).to(at::kCPU).contiguous();
      for (int64_t from = 0; from < values.numel(); from += kSendChunk) {
        const int64_t n = std::min(kSendChunk, values.numel() - from);
        chunks.push_back(make_chunk(p.global.begin + from, n,
                                    std::string(static_cast<const char*>(values.data_ptr()) + from * 4, n * 4)));
      }
      try {
        client(p.shard).submit(head, chunks);
      } catch (const RoundMoved&) {
        // Round 0 closed already: another site's initial model is the federation's.
      } catch (const Disconnected& d) {
        throw Error(cat("the round server at ", client(p.shard).address(), " went away during round 0 (", d.message, ")"));
      }
    }
    committed = 0;
  }
  std::vector<at::Tensor> values;
  for (size_t u = 0; u < model_.units().size(); ++u) values.push_back(at::empty_like(global_[u]));
  global_round_ = agree_on_round(committed, values);
  std::vector<comm::WorkHandle> gathers;
  for (size_t u = 0; u < model_.units().size(); ++u) {
    global_[u].copy_(values[u]);
    slice_of(u).copy_(values[u]);
    auto shard = model_.units()[u]->flat().shard().detach();
    if (topo_.replica().size() > 1) gathers.push_back(topo_.replica().all_gather(slice_of(u), shard));
  }
  for (auto& g : gathers) g->wait();
  if (topo_.world_rank() == 0)
    std::fprintf(stderr, "fedshard: site %s: takes the federation's global model of round %lld\n", site_.name.c_str(),
                 static_cast<long long>(global_round_));
}

void SiteLane::leave() {
  for (auto& c : clients_) {
    if (!c) continue;
    try {
      c->leave({site_.name, session_});
    } catch (...) {
      // The server is gone: the round closes without this site at its deadline anyway.
    }
  }
}

federation::Agreement SiteLane::begin(const std::vector<size_t>& units, double weight, const federation::Vote& vote) {
  at::NoGradGuard no_grad;
  FS_ASSERT(!round_, "a site round is already in flight");
  FS_CHECK(!vote.nonfinite, "site ", site_.name, "'s model holds a non-finite value at its round ", vote.round,
           " (step ", vote.step, "); stopped before the round sent it (lower optim.lr, enable optim.grad_clip, or ",
           "resume from the last checkpoint)");
  federation::Agreement a;
  a.any = vote;
  a.steps = {vote.step};
  a.at_round = {true};
  a.nonfinite = {false};
  a.launch_tokens = vote.launch_tokens;
  round_ = std::make_unique<Round>();
  auto& r = *round_;
  r.units = units;
  r.number = global_round_ + 1;
  r.tokens = weight;
  if (opts_.overlap)
    for (size_t u : units) r.sent.push_back(slice_of(u).clone());
  for (const auto& p : pieces_) {
    if (std::find(units.begin(), units.end(), p.unit) == units.end()) continue;
    SubmitHeader head;
    head.round = r.number;
    head.site = site_.name;
    head.session = session_;
    head.rank = static_cast<uint32_t>(topo_.world_rank());
    head.tokens = weight;
    head.begin = p.global.begin;
    head.end = p.global.end;
    std::vector<Chunk> chunks;
    const int64_t n = p.global.size();
    if (!codec_) {
      head.payload = Payload::Model;
      const auto values = site_.faults
                              ->corrupt_change(r.number, slice_of(p.unit).narrow(0, p.offset, n).to(at::kCPU),
                                               global_[p.unit].narrow(0, p.offset, n))
                              .contiguous();
      for (int64_t from = 0; from < n; from += kSendChunk) {
        const int64_t count = std::min(kSendChunk, n - from);
        chunks.push_back(make_chunk(p.global.begin + from, count,
                                    std::string(static_cast<const char*>(values.data_ptr()) + from * 4, count * 4)));
      }
      r.encoded.emplace_back();
    } else {
      // Error feedback: what this rank's encodings lost so far (decayed) is sent now, unweighted (the server weighs).
      head.payload = Payload::Delta;
      auto residual = residual_[p.unit].narrow(0, p.offset, n);
      auto delta = (slice_of(p.unit).narrow(0, p.offset, n).to(at::kCPU) - global_[p.unit].narrow(0, p.offset, n))
                             .add_(residual, opts_.ef_decay);
      delta = site_.faults->corrupt_change(r.number, delta, at::Tensor());
      auto decoded = at::empty_like(delta);
      const int64_t step = kSendChunk / codec_->granule() * codec_->granule();
      for (int64_t from = 0; from < n; from += step) {
        const int64_t count = std::min(step, n - from);
        const auto bytes = encode_blocks(*codec_, delta.narrow(0, from, count).contiguous());
        decoded.narrow(0, from, count).copy_(decode_blocks(*codec_, bytes, count));
        chunks.push_back(make_chunk(p.global.begin + from, count,
                                    std::string(static_cast<const char*>(bytes.data_ptr()), bytes.numel())));
      }
      residual.copy_(delta - decoded);
      r.encoded.push_back(decoded);
    }
    r.submissions.emplace_back(head, std::move(chunks));
  }
  r.transfer = std::async(std::launch::async, [this, &r] { transfer(r); });
  return a;
}

void SiteLane::submit_to(Round& r, int shard, const std::vector<size_t>& pieces) {
  concurrently(pieces, [&](size_t k) {
    try {
      client(shard).submit(r.submissions[k].first, r.submissions[k].second);
    } catch (const RoundMoved&) {
      // The round closed without this site (or moved on): its result is fetched all the same.
    }
  });
}

void SiteLane::fetch_from(Round& r, int shard, const std::vector<size_t>& pieces) {
  concurrently(pieces, [&](size_t k) {
    const auto& head = r.submissions[k].first;
    FetchRequest req;
    req.round = r.number;
    req.have = global_round_;
    req.site = site_.name;
    req.session = session_;
    req.rank = head.rank;
    req.begin = head.begin;
    req.end = head.end;
    try {
      r.fetched[k] = client(shard).fetch(req);
    } catch (const RoundMoved& m) {
      throw Error(cat("the round server at ", client(shard).address(), " refused a fetch of round ", r.number, ": ",
                      m.message));
    }
  });
}

void SiteLane::until_through(Round& r, int shard, const std::vector<size_t>& pieces, Step step) {
  auto& c = client(shard);
  const auto deadline = Clock::now() + std::chrono::duration<double>(c.patience());
  for (double backoff = 0.2;; backoff = std::min(backoff * 2, 5.0)) {
    try {
      (this->*step)(r, shard, pieces);
      return;
    } catch (const Disconnected& d) {
      if (Clock::now() > deadline)
        throw Error(cat("the round server at ", c.address(), " did not answer for ", c.patience(), " s (", d.message,
                        ")"));
      std::this_thread::sleep_for(std::chrono::duration<double>(backoff));
    }
    try {
      submit_to(r, shard, pieces);
    } catch (const Disconnected&) {
      // Still away: the next try waits longer.
    }
  }
}

int64_t SiteLane::submitted_bytes() const {
  int64_t bytes = 0;
  for (const auto& c : clients_)
    if (c) bytes += c->submitted_bytes();
  return bytes;
}

void SiteLane::transfer(Round& r) {
  // Each shard's part is submitted, then its result fetched (a round commits on a shard only once every shard has the
  // sites' data). A shard that went away (restarted: it lost what it had not committed) is given the data again
  // once it is back, and asked again.
  r.fetched.assign(r.submissions.size(), {});
  const auto started = Clock::now();
  const int64_t before = submitted_bytes();
  std::vector<std::vector<size_t>> of_shard(static_cast<size_t>(shards_));
  for (size_t i = 0, k = 0; i < pieces_.size(); ++i) {
    if (std::find(r.units.begin(), r.units.end(), pieces_[i].unit) == r.units.end()) continue;
    of_shard[static_cast<size_t>(pieces_[i].shard)].push_back(k++);
  }
  // Each shard on a thread of its own: one shard's fetch waits for the round while another's data may have to be
  // sent again, and the shards' streams share the link.
  std::vector<std::future<void>> shards;
  for (int j = 0; j < shards_; ++j)
    if (const auto& pieces = of_shard[static_cast<size_t>(j)]; !pieces.empty())
      shards.push_back(std::async(std::launch::async, [this, &r, j, &pieces] {
        until_through(r, j, pieces, &SiteLane::submit_to);
        until_through(r, j, pieces, &SiteLane::fetch_from);
      }));
  const auto failed = first_failure(shards);
  // What this rank handed to gRPC for the round (data sent again after a disconnection included), on the federation
  // lane's inter-group tier as an in-job round's bytes are: the step lines and the summary count it so.
  comm::Tally t;
  t.sent_bytes = t.payload_bytes = static_cast<double>(submitted_bytes() - before);
  t.calls = 1;
  t.seconds = std::chrono::duration<double>(Clock::now() - started).count();
  comm::Ledger::instance().record("server", comm::Tier::InterGroup, comm::Lane::Federation, comm::Traffic::Data, t);
  if (failed) std::rethrow_exception(failed);
}

void SiteLane::arrive() {
  if (!round_ || round_->arrived) return;
  at::NoGradGuard no_grad;
  auto& r = *round_;
  // The steps wait for the round here, as they wait for an in-job round's collectives: exposed communication.
  const auto waiting = Clock::now();
  r.transfer.get();
  comm::Ledger::instance().add_exposed_wait(std::chrono::duration<double>(Clock::now() - waiting).count());
  std::vector<at::Tensor> values;
  for (size_t u = 0; u < model_.units().size(); ++u) values.push_back(global_[u].clone());
  // Each piece: the round's model, or its change from the round this rank holds.
  int64_t lo = std::numeric_limits<int64_t>::max(), hi = -1;
  bool included = true;
  for (size_t i = 0, k = 0; i < pieces_.size(); ++i) {
    const auto& p = pieces_[i];
    if (std::find(r.units.begin(), r.units.end(), p.unit) == r.units.end()) continue;
    const auto& f = r.fetched[k++];
    lo = std::min(lo, f.header.round);
    hi = std::max(hi, f.header.round);
    included = included && f.header.included;
    for (const auto& c : f.chunks) {
      const auto part = intersect({c.offset, c.offset + c.count}, p.global);
      if (part.size() == 0) continue;
      at::Tensor whole;  // the chunk's elements
      if (f.header.payload == Payload::Model) {
        FS_CHECK(static_cast<int64_t>(c.payload.size()) == c.count * 4, "the round server sent a malformed model chunk");
        whole = at::empty({c.count}, at::kFloat);
        std::memcpy(whole.data_ptr(), c.payload.data(), c.payload.size());
      } else {
        FS_CHECK(codec_.has_value() && static_cast<int64_t>(c.payload.size()) == encoded_size(*codec_, c.count),
                 "the round server sent a malformed delta chunk");
        auto bytes = at::empty({static_cast<int64_t>(c.payload.size())}, at::kByte);
        std::memcpy(bytes.data_ptr(), c.payload.data(), c.payload.size());
        whole = decode_blocks(*codec_, bytes, c.count);
      }
      const int64_t at = p.offset + (part.begin - p.global.begin);
      auto v = whole.narrow(0, part.begin - c.offset, part.size());
      if (f.header.payload == Payload::Delta) v = v + global_[p.unit].narrow(0, at, part.size());
      values[p.unit].narrow(0, at, part.size()).copy_(v);
    }
  }
  // The site's ranks apply one round: where their shards answered with different ones, the latest, whole.
  const auto span =
      max_over_site(at::tensor({-static_cast<double>(lo), static_cast<double>(hi), included ? 0.0 : 1.0}, at::kDouble));
  lo = static_cast<int64_t>(-span[0].item<double>());
  hi = static_cast<int64_t>(span[1].item<double>());
  included = span[2].item<double>() == 0.0 && lo == r.number;
  r.result_round = lo == hi ? hi : agree_on_round(hi, values);
  r.included = included && r.result_round == r.number;
  if (!r.included && codec_) {
    // What this rank sent did not reach the global model: it stays owed, to be sent at the next round.
    for (size_t i = 0, k = 0; i < pieces_.size(); ++i) {
      const auto& p = pieces_[i];
      if (std::find(r.units.begin(), r.units.end(), p.unit) == r.units.end()) continue;
      residual_[p.unit].narrow(0, p.offset, p.global.size()).add_(r.encoded[k++]);
    }
  }
  if (!r.included && topo_.world_rank() == 0)
    std::fprintf(stderr, "fedshard: site %s: round %lld closed without this site (late, refused by the server's norm "
                 "bound, or a shard lost its data); it takes the global model of round %lld\n",
                 site_.name.c_str(), static_cast<long long>(r.number), static_cast<long long>(r.result_round));
  for (size_t u : r.units) r.result.push_back(values[u]);
  r.arrived = true;
}

void SiteLane::finish() {
  at::NoGradGuard no_grad;
  FS_ASSERT(round_, "no site round in flight");
  arrive();
  auto& r = *round_;
  std::vector<comm::WorkHandle> gathers;
  for (size_t i = 0; i < r.units.size(); ++i) {
    const size_t u = r.units[i];
    auto slice = slice_of(u);
    if (opts_.overlap)
      slice.sub_(r.sent[i]).add_(r.result[i].to(slice.device()));
    else
      slice.copy_(r.result[i]);
    global_[u].copy_(r.result[i]);
    auto shard = model_.units()[u]->flat().shard().detach();
    if (topo_.replica().size() > 1) gathers.push_back(topo_.replica().all_gather(slice, shard));
  }
  for (auto& g : gathers) g->wait();
  global_round_ = r.result_round;
  const auto units = r.units;
  round_.reset();
  if (opts_.inner_state == "reset") inner_.reset_state(units);
}

federation::Agreement SiteLane::vote_stop(const federation::Vote& vote) {
  federation::Agreement a;
  a.any = vote;
  a.any.stop = true;
  a.steps = {vote.step};
  a.at_round = {false};
  a.nonfinite = {vote.nonfinite};
  a.issued = false;
  return a;
}

at::Tensor SiteLane::nonfinite_flag() const {
  at::NoGradGuard no_grad;
  at::Tensor sum;
  for (size_t u = 0; u < model_.units().size(); ++u) {
    const auto s = slice_of(u).sum(at::kDouble);
    sum = sum.defined() ? sum + s : s;
  }
  return at::isfinite(sum).logical_not().to(at::kDouble);
}

int64_t SiteLane::global_checksum() const {
  at::NoGradGuard no_grad;
  int64_t sum = 0;
  for (const auto& g : global_) sum += g.contiguous().view(at::kInt).to(at::kLong).sum().item<int64_t>();
  return sum;
}

void SiteLane::with_backlog_model(const std::function<void()>&) {
  // The other sites' residuals are theirs: train/config.cpp refuses eval.backlog for a site.
  throw Error("eval.backlog is an in-job diagnostic: a site holds its own residual only");
}

void SiteLane::with_global_model(const std::function<void()>& fn) {
  at::NoGradGuard no_grad;
  const auto swap = [&](bool in) {
    std::vector<comm::WorkHandle> gathers;
    for (size_t u = 0; u < model_.units().size(); ++u) {
      auto shard = model_.units()[u]->flat().shard().detach();
      if (!in) {
        shard.copy_(saved_shards_[u]);
        continue;
      }
      saved_shards_.push_back(shard.clone());
      slice_of(u).copy_(global_[u]);
      if (topo_.replica().size() > 1) gathers.push_back(topo_.replica().all_gather(slice_of(u), shard));
    }
    for (auto& g : gathers) g->wait();
    if (!in) saved_shards_.clear();
  };
  swap(true);
  try {
    fn();
  } catch (...) {
    swap(false);
    throw;
  }
  swap(false);
}

std::vector<std::map<std::string, at::Tensor>> SiteLane::outer_state() {
  return std::vector<std::map<std::string, at::Tensor>>(model_.units().size());  // the server keeps it
}

std::vector<std::map<std::string, at::Tensor>> SiteLane::state() const {
  std::vector<std::map<std::string, at::Tensor>> out(model_.units().size());
  for (size_t u = 0; u < global_.size(); ++u) {
    out[u]["global"] = global_[u];
    if (codec_) out[u]["residual"] = residual_[u];
  }
  // The round of the global model held, and of a settled round in flight (-1: none).
  out[0]["site_round"] = at::tensor({global_round_, round_ ? round_->result_round : int64_t{-1}}, at::kLong);
  if (round_) {
    FS_ASSERT(round_->arrived, "checkpoint of a site round that has not arrived");
    for (size_t i = 0; i < round_->units.size(); ++i) {
      if (opts_.overlap) out[round_->units[i]]["round_sent"] = round_->sent[i];
      out[round_->units[i]]["round_global"] = round_->result[i];
    }
  }
  return out;
}

void SiteLane::restore_state(size_t unit, const std::string& name, const at::Tensor& value) {
  at::NoGradGuard no_grad;
  if (name == "global") global_[unit].copy_(value);
  if (name == "residual" && codec_) residual_[unit].copy_(value);
  if (name == "site_round") {
    const auto v = value.to(at::kLong).contiguous();
    global_round_ = v[0].item<int64_t>();
    if (round_) round_->result_round = v[1].item<int64_t>();
  }
  if (!round_) return;
  const auto it = std::find(round_->units.begin(), round_->units.end(), unit);
  if (it == round_->units.end()) return;
  const auto i = static_cast<size_t>(it - round_->units.begin());
  if (name == "round_sent") round_->sent[i].copy_(value);
  if (name == "round_global") round_->result[i].copy_(value);
}

std::vector<size_t> SiteLane::round_units() const { return round_ ? round_->units : std::vector<size_t>{}; }

void SiteLane::restore_round(const std::vector<size_t>& units) {
  round_.reset();
  if (units.empty()) return;
  round_ = std::make_unique<Round>();
  round_->units = units;
  round_->arrived = true;
  for (size_t u : units) {
    if (opts_.overlap) round_->sent.push_back(at::empty_like(slice_of(u)));
    round_->result.push_back(at::empty_like(global_[u]));
  }
}

bool available() { return true; }

std::unique_ptr<federation::Lane> make_site_lane(parallel::ShardedModel& model, comm::Topology& topo,
                                                 optim::Optimizer& inner, const federation::FederationOptions& opts,
                                                 SiteOptions site) {
  return std::make_unique<SiteLane>(model, topo, inner, opts, std::move(site));
}

}  // namespace fedshard::sites
