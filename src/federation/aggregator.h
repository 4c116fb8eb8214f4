// FedAvg-style aggregation across federation groups (DESIGN.md "Federation"). Every rank owns a disjoint
// slice of its group's model (the Layout's slice_range: piece i of R_g of its shard; the whole shard under
// FL+FSDP, piece p of the model under FL+DDP). Groups may differ in size, so their slices need not line up:
// the Layout cuts the model into segments, each held by one rank of every group, and a round averages each
// segment over the communicator of its owners (weighted by tokens), lets the outer optimizer turn the mean
// into the new global slice, and all-gathers the slices over `replica` so every replica holds the new shard.
// Every element crosses groups once per round, as in a ring all-reduce of the model among G parties.
//
// A round may cover some units only (federation.overlap = streaming:F) and may stay in flight while the
// groups train on (delayed, streaming): begin() issues it on the federation lane, finish() applies it with
// the delayed rule of docs/federation.md: slice <- new global + (slice now - slice at begin), i.e. the local
// progress made while the round was in flight is kept on top of the one-round-stale outer update. With
// federation.compress each group sends its delta from the last global model through a Codec, with error
// feedback on the sent deltas (stored unweighted, so a change of weights never sends a backlog at an old weight)
// and on the averaged ones where an owner encodes them again; topk:D's union mean skips the owner.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "comm/topology.h"
#include "federation/codec.h"
#include "federation/lane.h"
#include "federation/outer_optimizer.h"
#include "optim/optimizer.h"
#include "parallel/sharded_model.h"

namespace fedshard::federation {

struct FederationOptions {
  OuterOptions outer;
  std::string inner_state = "keep";  // keep | average | reset: the inner optimizer's state after a sync
  // The model average on the wire (parallel.reduce_dtype); Undefined: the master dtype. Optimizer state
  // (inner_state = average) always travels in the master dtype.
  at::ScalarType reduce_dtype = at::ScalarType::Undefined;
  std::string compress = "none";  // federation/codec.h: what a group's delta travels as (not reduce_dtype)
  int64_t compress_block = 256;   // elements per block of the blockwise codecs
  TopkValues topk_values = TopkValues::Means;
  // Error feedback: a residual is multiplied by this before it joins the next round's delta (SparseLoCo's beta;
  // 1: kept whole). A decaying residual forgets progress the global model took in without it.
  double ef_decay = 1.0;
  // topk:D: the groups' mean is the union of their sparse changes, all-gathered (`union`), or the chunk owner's
  // top-k of it (`sparsified`: fewer bytes when groups are many, but coordinates the others kept are dropped).
  std::string sparse_mean = "union";
  bool overlap = false;           // rounds may stay in flight across steps (keeps the slice at begin)
  // federation.normalize = steps (FedNova): each group's delta is divided by the steps it took, and the sum
  // rescaled by the groups' mean steps, so groups that took more steps do not pull further.
  bool normalize_steps = false;
  // Plain rounds whose wire dtype (reduce_dtype) is narrower than the master's send each group's weighted
  // delta from the last global model, so the float32 masters never pass through the wire dtype.
  bool delta_rounds(at::ScalarType master) const;
  // Whether the aggregator keeps the last global model (compression, overlap, FedNova, delta rounds).
  bool keeps_global(at::ScalarType master) const;
};

// The in-job MPI lane (federation/lane.h): the groups of one job meet over the segment communicators.
class Aggregator final : public Lane {
 public:
  Aggregator(parallel::ShardedModel& model, comm::Topology& topo, optim::Optimizer& inner,
             const FederationOptions& opts);
  ~Aggregator() override;

  // Collective over the world. weight: this group's share, e.g. tokens it processed since the last sync.
  // stop: this group wants the job to stop (agreed inside the group); returns whether any group does, the
  // same on every rank.
  bool sync(double weight, bool stop = false);

  // sync() in two halves. begin: agrees on weights and votes (blocking, (8 + 2G) x 8 bytes per segment) and
  // issues the averaging of `units`; finish: waits for it and applies it. One round in flight at a time.
  // A non-finite value in any group's slices ends the job here, before anything is sent: every rank throws
  // the same Error, reported by one rank of the lowest such group that holds it, naming round and tensor.
  Agreement begin(const std::vector<size_t>& units, double weight, const Vote& vote) override;
  void finish() override;
  bool in_flight() const override { return round_ != nullptr; }
  // After a lost peer (comm::PeerLost), before the engine is rebuilt over the kept ranks: forgets a round that has
  // not settled (restoring the error-feedback residuals it moved on), so the survivors can hold it again or go on
  // without it; its collectives end with the revoked communicators. Returns the units of a settled round (a
  // checkpoint's, settled on every rank: the trainer agrees on its arrival first), which goes on in flight in the new
  // engine (restore_round, then its state handed over).
  std::vector<size_t> drop_unsettled();
  // After such a rebuild, compressed rounds: the averaged deltas' residuals dealt to their chunks' new owners
  // (collective over the segments; the lost ranks' chunks start from zero).
  void redeal_mean_residual();
  // A group that must stop (preemption) between rounds takes part in the next agreement from where it is,
  // so every group stops at its next step instead of at its next round: the groups at a round skip that
  // round (Agreement::issued false). Waits for this rank's half of a round in flight first, as a round would.
  Agreement vote_stop(const Vote& vote) override;
  // Moves a compressed round in flight on to its second half once the first has arrived (call once a step). A
  // lost peer is kept for arrive() or settle() to throw.
  void progress() override;
  // Waits for the round in flight and computes its outcome without applying it (before a checkpoint).
  void settle() override;
  // Waits until every unit's averaging of the round in flight (and, inner_state = average, of its optimizer
  // state) has arrived on this rank, changing nothing: the round's last collectives across groups. A lost peer
  // fails it here (or progress() saw it), before anything of the round is applied: in-job recovery agrees on
  // that, then applies it (finish: local, and all-gathers inside the group).
  void arrive() override;
  // The model's part of arrive(): before a checkpoint, which keeps the round in flight (its optimizer state is
  // averaged, inner_state = average, when it is finished).
  void arrive_model() override;
  // 1 where this rank's slices hold a NaN or infinity, else 0: a device scalar, queued without a host sync.
  at::Tensor nonfinite_flag() const override;
  // This rank's part of a checksum of the last global model: the sum of the bit patterns (as 32-bit integers)
  // of its slices of it. Slices partition each group's model, so a group's checksum is the sum over its ranks
  // (modulo 2^64), the same in every group exactly when they hold the same global model (federation.audit).
  int64_t global_checksum() const override;

  // Runs fn while every rank's shard holds the latest global model instead of its group's own (evaluation
  // under overlap, where no step ends with the groups equal). Collective over the world.
  void with_global_model(const std::function<void()>& fn) override;
  // Compressed rounds: every group's residual at its last round's weight and the owners' mean residuals, summed
  // over each segment, on top of the global model. Collective over the world.
  void with_backlog_model(const std::function<void()>& fn) override;

  OuterOptimizer& outer() { return *outer_; }
  // Per-unit state beyond the outer optimizer's, by name, for checkpoints; every tensor is slice-shaped but
  // one: "global" (last global slice), "residual"/"mean_residual" (error feedback of sent and averaged
  // deltas), "round_sent"/"round_global" (a settled round in flight: the slice at begin and the new global
  // slice), "round_scale" (its group's weight, one element: finish() averages the inner state with it).
  std::vector<std::map<std::string, at::Tensor>> state() const override;
  void restore_state(size_t unit, const std::string& name, const at::Tensor& value) override;
  std::vector<size_t> round_units() const override;  // of the round in flight
  // A checkpointed round in flight, restored settled (its units' round_* state follows via restore_state).
  void restore_round(const std::vector<size_t>& units) override;
  std::vector<std::map<std::string, at::Tensor>> outer_state() override { return outer_->state(); }
  const FederationOptions& options() const { return opts_; }
  // `slice` (this rank's slice of unit `unit`) with zeros outside the chunks of a compressed round that this
  // rank averages: where its "mean_residual" lives. All zeros without compression.
  at::Tensor owned_part(size_t unit, const at::Tensor& slice) const;

 private:
  struct Round;
  struct Piece;
  struct StateSums;
  at::Tensor slice_of(size_t unit, const at::Tensor& shard) const;
  Agreement agree(double weight, const Vote& vote, double* scale, double* carry);
  // Ends the job before the round sends anything when some group's model holds a non-finite value.
  void refuse_nonfinite(const Agreement& a, const Vote& vote);
  // Where this rank's slices first hold a non-finite value ("tensor NAME element I of unit U"); "" if nowhere.
  std::string first_nonfinite() const;
  // Plain rounds: the weighted slices of `shards` (one shard-sized tensor per unit of the round; with `delta`,
  // less the last global slice) summed over each segment, in `wire` dtype.
  void issue_sums(Round& r, const std::vector<at::Tensor>& shards, double scale, at::ScalarType wire, bool delta);
  void issue_compressed(Round& r, double scale);
  bool union_mean() const;  // topk:D's mean is the union of the groups' changes (no owner)
  void reduce_piece(Piece& p);  // owner: decode, sum, encode the mean chunk; all-gather it
  at::Tensor piece_mean(const Piece& p, at::ScalarType dtype) const;  // the piece's averaged change, once gathered
  void settle(Round& r);
  void apply(Round& r);
  // inner_state = average: the optimizer moments of r's units summed over each segment (the plain path, no outer
  // step), weighted as r's model.
  void issue_state_sums(Round& r);
  void swap_in_global(bool backlog);
  void swap_out_global();

  parallel::ShardedModel& model_;
  comm::Topology& topo_;
  optim::Optimizer& inner_;
  FederationOptions opts_;
  std::unique_ptr<OuterOptimizer> outer_;
  std::optional<Codec> codec_;
  bool delta_ = false;  // plain rounds send deltas (FederationOptions::delta_rounds)
  std::vector<at::Tensor> global_;         // per unit, when compressing or overlapping
  std::vector<at::Tensor> residual_;       // per unit: error feedback of this rank's sent deltas
  std::vector<at::Tensor> mean_residual_;  // per unit: of the averaged chunks this rank owns
  std::unique_ptr<Round> round_;
  std::vector<at::Tensor> saved_shards_;   // while the global model is swapped in
  double last_scale_ = 0;                  // this group's weight in the last round issued (its residual's)
};

}  // namespace fedshard::federation
