#include "federation/aggregator.h"

#include <ATen/core/grad_mode.h>

#include <algorithm>
#include <exception>

#include "comm/work.h"
#include "util/error.h"

namespace fedshard::federation {

// One segment of one unit in a compressed round: this rank's piece [offset, offset + length) of its slice,
// padded to G chunks; chunk j is averaged by the segment's rank j (its owner) and all-gathered back.
struct Aggregator::Piece {
  comm::Communicator* comm = nullptr;
  size_t unit = 0;  // index into Round::units
  int64_t offset = 0, length = 0, chunk = 0;
  at::Tensor send, recv, gathered;  // encoded bytes: G chunks each
  comm::WorkHandle work;            // the all-to-all, then the all-gather
  bool reduced = false;
};

// inner_state = average: one optimizer moment of the round's units that have it, summed over each segment.
struct Aggregator::StateSums {
  std::vector<size_t> units;
  std::vector<at::Tensor> moments;  // written once the round applies
  std::unique_ptr<Round> sums;
};

struct Aggregator::Round {
  std::vector<size_t> units;
  double scale = 0;
  double carry = 0;  // normalize = steps, plain rounds: the global slice's share in the new one
  std::vector<at::Tensor> sums;  // plain rounds: per unit, the weighted slice summed over each segment
  std::vector<std::vector<comm::WorkHandle>> works;
  std::vector<Piece> pieces;     // compressed rounds
  std::vector<at::Tensor> sent;  // overlap: each unit's slice at begin
  std::vector<at::Tensor> result;  // the new global slices, once settled
  std::vector<StateSums> state;    // inner_state = average, once arrived
  // Compressed rounds: the error-feedback residuals of the round's units as they were before it, for a round
  // dropped after a lost peer.
  std::vector<at::Tensor> residual_before, mean_residual_before;
  std::exception_ptr failed;  // a lost peer seen by progress(), thrown where the round is waited for
  bool arrived = false;
  bool settled = false;
};

bool FederationOptions::delta_rounds(at::ScalarType master) const {
  return compress == "none" && reduce_dtype != at::ScalarType::Undefined &&
         c10::elementSize(reduce_dtype) < c10::elementSize(master);
}

bool FederationOptions::keeps_global(at::ScalarType master) const {
  return compress != "none" || overlap || normalize_steps || delta_rounds(master);
}

Aggregator::Aggregator(parallel::ShardedModel& model, comm::Topology& topo, optim::Optimizer& inner,
                       const FederationOptions& opts)
    : model_(model), topo_(topo), inner_(inner), opts_(opts) {
  FS_CHECK(opts_.inner_state == "keep" || opts_.inner_state == "average" || opts_.inner_state == "reset",
           "federation.inner_state must be keep, average or reset, got '", opts_.inner_state, "'");
  FS_CHECK(opts_.ef_decay >= 0 && opts_.ef_decay <= 1, "federation.ef_decay must be in [0, 1], got ", opts_.ef_decay);
  FS_CHECK(opts_.sparse_mean == "union" || opts_.sparse_mean == "sparsified",
           "federation.sparse_mean must be union or sparsified, got '", opts_.sparse_mean, "'");
  if (opts_.compress != "none") codec_.emplace(opts_.compress, opts_.compress_block, opts_.topk_values);
  std::vector<at::Tensor> slices;
  for (size_t u = 0; u < model_.units().size(); ++u) slices.push_back(slice_of(u, model_.units()[u]->flat().shard().detach()));
  outer_ = make_outer_optimizer(opts_.outer, slices);
  const auto master = slices.front().scalar_type();
  delta_ = opts_.delta_rounds(master);
  for (const auto& s : slices) {
    if (opts_.keeps_global(master)) global_.push_back(s.clone());
    if (codec_) {
      residual_.push_back(at::zeros_like(s));
      mean_residual_.push_back(at::zeros_like(s));
    }
  }
}

Aggregator::~Aggregator() = default;

at::Tensor Aggregator::slice_of(size_t unit, const at::Tensor& shard) const {
  const int64_t padded = model_.units()[unit]->flat().padded_numel();
  const auto [a, b] = topo_.layout().slice_range(padded, topo_.world_rank());
  const int64_t shard_begin = topo_.layout().shard_range(padded, topo_.world_rank()).first;
  return shard.narrow(0, a - shard_begin, b - a);
}

Agreement Aggregator::agree(double weight, const Vote& vote, double* scale, double* carry) {
  // Every segment has one rank of each group, so each yields the sums over groups (weights, votes, FedNova's
  // sums, each group's step and flags in its own slots); it is run on all of this rank's segments because
  // every member of a communicator must take part. One group has no segments to average over, but its outer
  // optimizer still steps.
  const auto& layout = topo_.layout();
  const int groups = layout.groups(), g = topo_.coords().group;
  const double share = static_cast<double>(layout.group_size(g)) / layout.world();  // FedNova's p_g
  const double tau = static_cast<double>(std::max<int64_t>(vote.steps_in_round, 1));
  auto mine = at::zeros({8 + 2 * groups}, at::kDouble);
  auto m = mine.accessor<double, 1>();
  m[0] = weight;
  m[1] = vote.stop;
  m[2] = vote.last;
  m[3] = vote.checkpoint;
  m[4] = vote.evaluate;
  m[5] = share * tau;
  m[6] = share / tau;
  m[7] = vote.launch_tokens;
  m[8 + g] = static_cast<double>(vote.step);
  m[8 + groups + g] = (vote.at_round ? 1 : 0) + (vote.nonfinite ? 2 : 0);
  const auto device = model_.units().front()->flat().shard().device();
  std::vector<at::Tensor> totals;
  std::vector<comm::WorkHandle> works;
  for (const auto& s : topo_.segments()) {
    totals.push_back(mine.to(device, /*non_blocking=*/false, /*copy=*/true));  // one buffer per segment
    works.push_back(s.comm->all_reduce(totals.back(), comm::ReduceOp::Sum, comm::Traffic::Control));
  }
  for (auto& w : works) w->wait();
  const auto total = totals.empty() ? mine : totals.front().cpu();
  const auto t = total.accessor<double, 1>();
  Agreement a;
  a.any.stop = t[1] > 0;
  a.any.last = t[2] > 0;
  a.any.checkpoint = t[3] > 0;
  a.any.evaluate = t[4] > 0;
  a.launch_tokens = t[7];
  for (int i = 0; i < groups; ++i) {
    const auto flags = static_cast<int64_t>(t[8 + groups + i]);
    a.steps.push_back(static_cast<int64_t>(t[8 + i]));
    a.at_round.push_back(flags & 1);
    a.nonfinite.push_back(flags & 2);
    a.any.nonfinite = a.any.nonfinite || (flags & 2);
  }
  a.issued = std::all_of(a.at_round.begin(), a.at_round.end(), [](bool b) { return b; });
  if (opts_.normalize_steps) {
    *scale = t[5] * share / tau;  // tau_eff p_g / tau_g
    *carry = 1.0 - t[5] * t[6];   // 1 - sum of the scales
  } else {
    *scale = weight / t[0];
    *carry = 0.0;
  }
  return a;
}

std::string Aggregator::first_nonfinite() const {
  at::NoGradGuard no_grad;
  for (size_t u = 0; u < model_.units().size(); ++u) {
    auto& flat = model_.units()[u]->flat();
    const auto slice = slice_of(u, flat.shard().detach());
    const auto bad = at::isfinite(slice).logical_not().nonzero();
    if (bad.numel() == 0) continue;
    const int64_t i = bad[0][0].item<int64_t>();
    const double value = slice[i].item<double>();
    const int64_t at = topo_.layout().slice_range(flat.padded_numel(), topo_.world_rank()).first + i;
    for (const auto& e : flat.entries())
      if (at >= e.offset && at < e.offset + e.numel) return cat("tensor ", e.name, " element ", at - e.offset, " is ", value);
    return cat("element ", at, " of unit ", u, " is ", value);
  }
  return "";
}

void Aggregator::refuse_nonfinite(const Agreement& a, const Vote& vote) {
  const auto bad = std::find(a.nonfinite.begin(), a.nonfinite.end(), true);
  if (bad == a.nonfinite.end()) return;
  const int group = static_cast<int>(bad - a.nonfinite.begin());
  // The lowest rank of that group whose own slices hold it reports; every rank throws the same error.
  std::string where;
  bool reporter = false;
  if (topo_.coords().group == group) {
    where = first_nonfinite();
    auto& comm = topo_.group();
    const auto device = model_.units().front()->flat().shard().device();
    auto mine = at::full({1}, where.empty() ? 0.0 : 1.0, at::TensorOptions().dtype(at::kDouble).device(device));
    auto all = at::empty({comm.size()}, mine.options());
    comm.all_gather(mine, all, comm::Traffic::Control)->wait();
    const auto holders = all.cpu().nonzero();
    reporter = holders.numel() > 0 ? holders[0][0].item<int64_t>() == comm.rank() : comm.rank() == 0;
  }
  throw Error(cat("group ", group, "'s model holds a non-finite value at federation round ", vote.round, " (step ",
                  a.steps.at(static_cast<size_t>(group)), "): ", where.empty() ? "see its ranks" : where,
                  "; stopped before the round sent it (lower optim.lr, enable optim.grad_clip, or resume from the ",
                  "last checkpoint)"))
      .reported_by(reporter)
      .everywhere(true);
}

void Aggregator::issue_sums(Round& r, const std::vector<at::Tensor>& shards, double scale, at::ScalarType wire,
                            bool delta) {
  const auto& layout = topo_.layout();
  for (size_t i = 0; i < r.units.size(); ++i) {
    const size_t u = r.units[i];
    const auto slice = slice_of(u, shards[i]);
    r.sums.push_back(((delta ? slice - global_[u] : slice) * scale).to(wire));
    r.works.emplace_back();
    const int64_t padded = model_.units()[u]->flat().padded_numel();
    const int64_t slice_begin = layout.slice_range(padded, topo_.world_rank()).first;
    for (const auto& s : topo_.segments()) {
      const auto [a, b] = layout.segment_range(s.segment, padded);
      r.works.back().push_back(s.comm->all_reduce(r.sums.back().narrow(0, a - slice_begin, b - a), comm::ReduceOp::Sum));
    }
  }
}

bool Aggregator::union_mean() const { return codec_ && sparse_codec(opts_.compress) && opts_.sparse_mean == "union"; }

void Aggregator::issue_compressed(Round& r, double scale) {
  const auto& layout = topo_.layout();
  const auto bytes = at::TensorOptions().dtype(at::kByte).device(global_.front().device());
  const bool all_gather = union_mean();
  for (size_t i = 0; i < r.units.size(); ++i) {
    const size_t u = r.units[i];
    // Error feedback: what this rank failed to send before (decayed) is sent now. The codecs are invariant to a
    // positive scale, so the delta is encoded weighted and the residual kept unweighted.
    auto delta = (slice_of(u, model_.units()[u]->flat().shard().detach()) - global_[u]).add_(residual_[u], opts_.ef_decay);
    const int64_t padded = model_.units()[u]->flat().padded_numel();
    const int64_t slice_begin = layout.slice_range(padded, topo_.world_rank()).first;
    for (const auto& s : topo_.segments()) {
      const auto [a, b] = layout.segment_range(s.segment, padded);
      Piece p;
      p.comm = s.comm.get();
      p.unit = i;
      p.offset = a - slice_begin;
      p.length = b - a;
      const int g = p.comm->size();
      const int64_t granule = codec_->granule();
      // Union: the whole piece is this rank's one chunk; else G chunks, chunk j averaged by the segment's rank j.
      const int chunks = all_gather ? 1 : g;
      p.chunk = (p.length + chunks * granule - 1) / (chunks * granule) * granule;
      auto values = at::zeros({chunks * p.chunk}, delta.options());
      values.narrow(0, 0, p.length).copy_(delta.narrow(0, p.offset, p.length)).mul_(scale);
      const int64_t e = codec_->encoded_bytes(p.chunk);
      p.send = at::empty({chunks * e}, bytes);
      for (int j = 0; j < chunks; ++j) codec_->encode(values.narrow(0, j * p.chunk, p.chunk), p.send.narrow(0, j * e, e));
      at::Tensor decoded = at::empty_like(values);
      for (int j = 0; j < chunks; ++j)
        decoded.narrow(0, j * p.chunk, p.chunk).copy_(codec_->decode(p.send.narrow(0, j * e, e), p.chunk, values.scalar_type()));
      // A group of weight 0 sends zeros and keeps its whole delta.
      auto residual = delta.narrow(0, p.offset, p.length);
      if (scale > 0) residual = residual - decoded.narrow(0, 0, p.length).div_(scale);
      residual_[u].narrow(0, p.offset, p.length).copy_(residual);
      p.gathered = at::empty({g * e}, bytes);
      if (all_gather) {
        p.work = p.comm->all_gather(p.send, p.gathered);
        p.reduced = true;
      } else {
        p.recv = at::empty_like(p.send);
        p.work = p.comm->all_to_all(p.send, p.recv);
      }
      r.pieces.push_back(std::move(p));
    }
  }
}

at::Tensor Aggregator::owned_part(size_t unit, const at::Tensor& slice) const {
  auto out = at::zeros_like(slice);
  if (!codec_) return out;
  const auto& layout = topo_.layout();
  const int64_t padded = model_.units()[unit]->flat().padded_numel();
  const int64_t slice_begin = layout.slice_range(padded, topo_.world_rank()).first;
  // The chunk arithmetic of issue_compressed and reduce_piece.
  for (const auto& s : topo_.segments()) {
    const auto [a, b] = layout.segment_range(s.segment, padded);
    const int64_t length = b - a, g = s.comm->size(), granule = codec_->granule();
    const int64_t chunk = (length + g * granule - 1) / (g * granule) * granule;
    const int64_t first = std::min(s.comm->rank() * chunk, length), last = std::min(first + chunk, length);
    out.narrow(0, a - slice_begin + first, last - first).copy_(slice.narrow(0, a - slice_begin + first, last - first));
  }
  return out;
}

void Aggregator::reduce_piece(Piece& p) {
  p.work->wait();
  const int g = p.comm->size(), j = p.comm->rank();
  const int64_t e = codec_->encoded_bytes(p.chunk);
  const size_t u = round_->units[p.unit];
  const auto dtype = global_[u].scalar_type();
  auto sum = at::zeros({p.chunk}, global_[u].options());
  for (int r = 0; r < g; ++r) sum.add_(codec_->decode(p.recv.narrow(0, r * e, e), p.chunk, dtype));
  // The owned chunk's own error feedback: the part of the averaged delta that its encoding lost last time.
  const int64_t begin = j * p.chunk, kept = std::max<int64_t>(0, std::min(p.chunk, p.length - begin));
  auto carried = mean_residual_[u].narrow(0, p.offset + std::min(begin, p.length), kept);
  sum.narrow(0, 0, kept).add_(carried, opts_.ef_decay);
  auto mine = p.gathered.narrow(0, j * e, e);
  codec_->encode(sum, mine);
  carried.copy_((sum - codec_->decode(mine, p.chunk, dtype)).narrow(0, 0, kept));
  p.work = p.comm->all_gather(mine, p.gathered);
  p.reduced = true;
}

at::Tensor Aggregator::piece_mean(const Piece& p, at::ScalarType dtype) const {
  const int g = p.comm->size();
  const int64_t e = codec_->encoded_bytes(p.chunk);
  if (union_mean()) {
    // Every group's weighted change of the whole piece, summed in group order (the same on every rank).
    auto sum = codec_->decode(p.gathered.narrow(0, 0, e), p.chunk, dtype);
    for (int j = 1; j < g; ++j) sum.add_(codec_->decode(p.gathered.narrow(0, j * e, e), p.chunk, dtype));
    return sum;
  }
  auto mean = at::empty({g * p.chunk}, at::TensorOptions().dtype(dtype).device(p.gathered.device()));
  for (int j = 0; j < g; ++j) mean.narrow(0, j * p.chunk, p.chunk).copy_(codec_->decode(p.gathered.narrow(0, j * e, e), p.chunk, dtype));
  return mean;
}

Agreement Aggregator::begin(const std::vector<size_t>& units, double weight, const Vote& vote) {
  at::NoGradGuard no_grad;
  FS_ASSERT(!round_, "a federation round is already in flight");
  double scale = 0, carry = 0;
  const auto agreement = agree(weight, vote, &scale, &carry);
  refuse_nonfinite(agreement, vote);
  if (!agreement.issued) return agreement;
  last_scale_ = scale;
  round_ = std::make_unique<Round>();
  round_->units = units;
  round_->scale = scale;
  round_->carry = carry;
  if (opts_.overlap)
    for (size_t u : units) round_->sent.push_back(slice_of(u, model_.units()[u]->flat().shard().detach()).clone());
  if (codec_ && !topo_.segments().empty()) {
    for (size_t u : units) {
      round_->residual_before.push_back(residual_[u].clone());
      round_->mean_residual_before.push_back(mean_residual_[u].clone());
    }
    issue_compressed(*round_, scale);
  } else {
    std::vector<at::Tensor> shards;
    for (size_t u : units) shards.push_back(model_.units()[u]->flat().shard().detach());
    const auto master = shards.front().scalar_type();
    issue_sums(*round_, shards, scale, opts_.reduce_dtype == at::ScalarType::Undefined ? master : opts_.reduce_dtype,
               delta_);
  }
  return agreement;
}

Agreement Aggregator::vote_stop(const Vote& vote) {
  at::NoGradGuard no_grad;
  // A compressed round's all-gathers go onto the segment communicators before the next agreement on every
  // rank (a group at a round finishes its round in flight before agreeing), so this rank's do too.
  settle();
  Vote v = vote;
  v.stop = true;
  v.at_round = false;
  double scale = 0, carry = 0;
  const auto agreement = agree(0.0, v, &scale, &carry);
  refuse_nonfinite(agreement, v);
  return agreement;
}

at::Tensor Aggregator::nonfinite_flag() const {
  at::NoGradGuard no_grad;
  // A sum is non-finite exactly when some term is (or when finite terms overflow, which weights do not).
  at::Tensor sum;
  for (size_t u = 0; u < model_.units().size(); ++u) {
    const auto s = slice_of(u, model_.units()[u]->flat().shard().detach()).sum(at::kDouble);
    sum = sum.defined() ? sum + s : s;
  }
  return at::isfinite(sum).logical_not().to(at::kDouble);
}

int64_t Aggregator::global_checksum() const {
  at::NoGradGuard no_grad;
  int64_t sum = 0;
  for (size_t u = 0; u < model_.units().size(); ++u) {
    // Without a kept copy the model is the global one right after a round that did not stay in flight.
    const auto slice = global_.empty() ? slice_of(u, model_.units()[u]->flat().shard().detach()) : global_[u];
    sum += slice.contiguous().view(at::kInt).to(at::kLong).sum().item<int64_t>();
  }
  return sum;
}

void Aggregator::progress() {
  if (!round_ || round_->settled || round_->failed) return;
  // In order, so that every rank queues the all-gathers on the federation lane in the same order.
  try {
    for (auto& p : round_->pieces) {
      if (p.reduced) continue;
      if (!p.work->completed()) return;
      reduce_piece(p);
    }
  } catch (const comm::PeerLost&) {
    // Inside a step: the survivors learn of it together where the round is waited for (arrive, settle).
    round_->failed = std::current_exception();
  }
}

void Aggregator::settle() {
  if (round_) settle(*round_);
}

void Aggregator::arrive_model() {
  if (!round_ || round_->arrived) return;
  if (round_->failed) std::rethrow_exception(round_->failed);
  at::NoGradGuard no_grad;
  for (auto& p : round_->pieces)
    if (!p.reduced) reduce_piece(p);
  for (auto& p : round_->pieces) p.work->wait();
  for (auto& works : round_->works)
    for (auto& w : works) w->wait();
}

void Aggregator::arrive() {
  if (!round_ || round_->arrived) return;
  arrive_model();
  if (opts_.inner_state == "average") {
    issue_state_sums(*round_);
    for (auto& s : round_->state)
      for (auto& works : s.sums->works)
        for (auto& w : works) w->wait();
  }
  round_->arrived = true;
}

void Aggregator::issue_state_sums(Round& r) {
  // Only the round's units: under streaming:F the other fragments' state belongs to their own rounds.
  for (const char* key : {"exp_avg", "exp_avg_sq", "momentum_buffer"}) {
    StateSums s;
    for (size_t u : r.units)
      if (inner_.state()[u].count(key)) {
        s.units.push_back(u);
        s.moments.push_back(inner_.state()[u].at(key));
      }
    if (s.units.empty()) continue;
    s.sums = std::make_unique<Round>();
    s.sums->units = s.units;
    issue_sums(*s.sums, s.moments, r.scale, s.moments.front().scalar_type(), /*delta=*/false);
    r.state.push_back(std::move(s));
  }
}

void Aggregator::settle(Round& r) {
  if (r.settled) return;
  if (r.failed) std::rethrow_exception(r.failed);
  at::NoGradGuard no_grad;
  for (auto& p : r.pieces)
    if (!p.reduced) reduce_piece(p);
  std::vector<at::Tensor> deltas;
  if (!r.pieces.empty()) {
    for (size_t u : r.units) deltas.push_back(at::zeros_like(global_[u]));
    for (auto& p : r.pieces) {
      p.work->wait();
      deltas[p.unit].narrow(0, p.offset, p.length).copy_(piece_mean(p, deltas[p.unit].scalar_type()).narrow(0, 0, p.length));
    }
  }
  // Every unit's averaging has arrived before any unit is applied: a round that fails (a lost peer) leaves
  // the model and the outer state untouched, so the survivors can hold it again (train/membership.h: the survivors apply the change).
  for (auto& works : r.works)
    for (auto& w : works) w->wait();
  for (size_t i = 0; i < r.units.size(); ++i) {
    const size_t u = r.units[i];
    auto slice = slice_of(u, model_.units()[u]->flat().shard().detach());
    at::Tensor mean;
    if (!r.pieces.empty()) {
      mean = global_[u] + deltas[i];
    } else {
      mean = r.sums[i].to(slice.scalar_type());
      // Delta rounds carry the global slice's share themselves: their scales weigh deltas, not weights.
      if (delta_)
        mean.add_(global_[u]);
      else if (opts_.normalize_steps)
        mean.add_(global_[u], r.carry);
    }
    // Without overlap the new global slice is written straight into the model.
    auto target = opts_.overlap ? at::empty_like(slice) : slice;
    outer_->step(u, mean, target);
    if (!global_.empty()) global_[u].copy_(target);
    r.result.push_back(target);
  }
  r.settled = true;
}

void Aggregator::apply(Round& r) {
  settle(r);
  std::vector<comm::WorkHandle> gathers;
  for (size_t i = 0; i < r.units.size(); ++i) {
    const size_t u = r.units[i];
    auto shard = model_.units()[u]->flat().shard().detach();
    auto slice = slice_of(u, shard);
    if (opts_.overlap) slice.sub_(r.sent[i]).add_(r.result[i]);
    if (topo_.replica().size() > 1) gathers.push_back(topo_.replica().all_gather(slice, shard));
  }
  for (auto& s : r.state)
    for (size_t i = 0; i < s.units.size(); ++i) {
      auto slice = slice_of(s.units[i], s.moments[i]);
      slice.copy_(s.sums->sums[i]);
      if (topo_.replica().size() > 1) gathers.push_back(topo_.replica().all_gather(slice, s.moments[i]));
    }
  for (auto& g : gathers) g->wait();
}

void Aggregator::finish() {
  at::NoGradGuard no_grad;
  FS_ASSERT(round_, "no federation round in flight");
  arrive();
  apply(*round_);
  const auto units = round_->units;
  round_.reset();
  if (opts_.inner_state == "reset") inner_.reset_state(units);
}

bool Aggregator::sync(double weight, bool stop) {
  std::vector<size_t> all(model_.units().size());
  for (size_t u = 0; u < all.size(); ++u) all[u] = u;
  Vote vote;
  vote.stop = stop;
  const bool any_stop = begin(all, weight, vote).any.stop;
  finish();
  return any_stop;
}

std::vector<std::map<std::string, at::Tensor>> Aggregator::state() const {
  std::vector<std::map<std::string, at::Tensor>> out(model_.units().size());
  for (size_t u = 0; u < global_.size(); ++u) out[u]["global"] = global_[u];
  for (size_t u = 0; u < residual_.size(); ++u) {
    out[u]["residual"] = residual_[u];
    out[u]["mean_residual"] = mean_residual_[u];
  }
  if (round_) {
    FS_ASSERT(round_->settled, "checkpoint of an unsettled federation round");
    const auto scale = at::full({1}, round_->scale, at::kDouble);
    for (size_t i = 0; i < round_->units.size(); ++i) {
      out[round_->units[i]]["round_sent"] = round_->sent[i];
      out[round_->units[i]]["round_global"] = round_->result[i];
      out[round_->units[i]]["round_scale"] = scale;
    }
  }
  return out;
}

std::vector<size_t> Aggregator::drop_unsettled() {
  if (!round_) return {};
  if (round_->settled) return round_->units;
  for (size_t i = 0; i < round_->residual_before.size(); ++i) {
    residual_[round_->units[i]].copy_(round_->residual_before[i]);
    mean_residual_[round_->units[i]].copy_(round_->mean_residual_before[i]);
  }
  round_.reset();
  return {};
}

void Aggregator::redeal_mean_residual() {
  if (!codec_) return;
  at::NoGradGuard no_grad;
  // Each chunk's residual is held by its owner only (zeros elsewhere): the sum over a segment's ranks is the
  // segment's whole field, of which each rank keeps the chunks it now owns.
  const auto& layout = topo_.layout();
  for (size_t u = 0; u < mean_residual_.size(); ++u) {
    const int64_t padded = model_.units()[u]->flat().padded_numel();
    const int64_t slice_begin = layout.slice_range(padded, topo_.world_rank()).first;
    std::vector<comm::WorkHandle> works;
    for (const auto& s : topo_.segments()) {
      const auto [a, b] = layout.segment_range(s.segment, padded);
      works.push_back(s.comm->all_reduce(mean_residual_[u].narrow(0, a - slice_begin, b - a), comm::ReduceOp::Sum));
    }
    for (auto& w : works) w->wait();
    mean_residual_[u].copy_(owned_part(u, mean_residual_[u]));
  }
}

std::vector<size_t> Aggregator::round_units() const { return round_ ? round_->units : std::vector<size_t>{}; }

void Aggregator::restore_round(const std::vector<size_t>& units) {
  round_.reset();
  if (units.empty()) return;
  FS_ASSERT(opts_.overlap, "a round in flight restored without overlap (prepare_training refuses it)");
  round_ = std::make_unique<Round>();
  round_->units = units;
  round_->settled = true;
  for (size_t u : units) {
    const auto slice = slice_of(u, model_.units()[u]->flat().shard().detach());
    round_->sent.push_back(at::empty_like(slice));
    round_->result.push_back(at::empty_like(slice));
  }
}

void Aggregator::restore_state(size_t unit, const std::string& name, const at::Tensor& value) {
  at::NoGradGuard no_grad;
  at::Tensor dst;
  if (name == "global" && unit < global_.size()) dst = global_[unit];
  if (name == "residual" && unit < residual_.size()) dst = residual_[unit];
  if (name == "mean_residual" && unit < mean_residual_.size()) dst = mean_residual_[unit];
  if (round_ && std::count(round_->units.begin(), round_->units.end(), unit)) {
    const size_t i = static_cast<size_t>(std::find(round_->units.begin(), round_->units.end(), unit) - round_->units.begin());
    if (name == "round_sent") dst = round_->sent[i];
    if (name == "round_global") dst = round_->result[i];
    if (name == "round_scale") round_->scale = value.item<double>();
  }
  if (dst.defined()) dst.copy_(value);
}

void Aggregator::with_global_model(const std::function<void()>& fn) {
  try {
    swap_in_global(/*backlog=*/false);
    fn();
  } catch (...) {
    swap_out_global();  // a lost peer: the recovery hands over this group's own model
    throw;
  }
  swap_out_global();
}

void Aggregator::with_backlog_model(const std::function<void()>& fn) {
  FS_CHECK(codec_.has_value(), "eval.backlog needs compressed rounds (federation.compress): there is no backlog");
  try {
    swap_in_global(/*backlog=*/true);
    fn();
  } catch (...) {
    swap_out_global();
    throw;
  }
  swap_out_global();
}

void Aggregator::swap_in_global(bool backlog) {
  at::NoGradGuard no_grad;
  FS_ASSERT(!global_.empty() && saved_shards_.empty(), "no global model kept to swap in");
  const auto& layout = topo_.layout();
  std::vector<comm::WorkHandle> gathers;
  for (size_t u = 0; u < model_.units().size(); ++u) {
    auto shard = model_.units()[u]->flat().shard().detach();
    saved_shards_.push_back(shard.clone());
    auto slice = slice_of(u, shard);
    slice.copy_(global_[u]);
    if (backlog) {
      auto owed = residual_[u] * last_scale_ + mean_residual_[u];
      const int64_t padded = model_.units()[u]->flat().padded_numel();
      const int64_t slice_begin = layout.slice_range(padded, topo_.world_rank()).first;
      for (const auto& s : topo_.segments()) {
        const auto [a, b] = layout.segment_range(s.segment, padded);
        s.comm->all_reduce(owed.narrow(0, a - slice_begin, b - a), comm::ReduceOp::Sum, comm::Traffic::Control)->wait();
      }
      slice.add_(owed);
    }
    if (topo_.replica().size() > 1) gathers.push_back(topo_.replica().all_gather(slice, shard));
  }
  for (auto& g : gathers) g->wait();
}

void Aggregator::swap_out_global() {
  at::NoGradGuard no_grad;
  for (size_t u = 0; u < saved_shards_.size(); ++u) model_.units()[u]->flat().shard().detach().copy_(saved_shards_[u]);
  saved_shards_.clear();
}

}  // namespace fedshard::federation
