// A site's lane (federation/lane.h): how this site's job meets the other sites, through the round server's shards
// (DESIGN.md "Sites"). The site is one federation group; each of its ranks owns an aggregation slice of the model
// (its shard under FSDP, a piece of it under HSDP and DDP, as in-job rounds cut them) and at a round sends that
// slice to the shards owning its elements (its float32 model, or its delta from the last global model encoded by
// federation.compress with error feedback), then fetches the round's global model from them; the site's ranks agree
// on the round they apply, apply it and gather it inside the site. The server decides who takes part: a site left
// out of a round takes its global model and keeps what it sent owed in its error feedback.
#pragma once

#include <future>
#include <optional>
#include <utility>
#include <memory>
#include <string>
#include <vector>

#include "comm/topology.h"
#include "federation/aggregator.h"
#include "federation/codec.h"
#include "federation/lane.h"
#include "optim/optimizer.h"
#include "parallel/sharded_model.h"
#include "sites/identity.h"
#include "sites/model_ranges.h"
#include "sites/shard_client.h"
#include "sites/site_options.h"
#include "sites/tls.h"

namespace fedshard::sites {

class SiteLane final : public federation::Lane {
 public:
  SiteLane(parallel::ShardedModel& model, comm::Topology& topo, optim::Optimizer& inner,
           const federation::FederationOptions& opts, SiteOptions site);
  ~SiteLane() override;

  void start() override;
  void leave() override;
  federation::Agreement begin(const std::vector<size_t>& units, double weight, const federation::Vote& vote) override;
  void arrive() override;
  void arrive_model() override { arrive(); }
  void settle() override { arrive(); }
  void finish() override;
  bool in_flight() const override { return round_ != nullptr; }
  federation::Agreement vote_stop(const federation::Vote& vote) override;
  void progress() override {}
  at::Tensor nonfinite_flag() const override;
  int64_t global_checksum() const override;
  std::optional<int64_t> server_round() const override { return global_round_; }
  void with_global_model(const std::function<void()>& fn) override;
  void with_backlog_model(const std::function<void()>& fn) override;

  std::vector<std::map<std::string, at::Tensor>> outer_state() override;
  std::vector<std::map<std::string, at::Tensor>> state() const override;
  void restore_state(size_t unit, const std::string& name, const at::Tensor& value) override;
  std::vector<size_t> round_units() const override;
  void restore_round(const std::vector<size_t>& units) override;

 private:
  // A part of this rank's slice of one unit that one shard owns.
  struct Piece {
    int shard = 0;
    size_t unit = 0;
    int64_t offset = 0;  // within the rank's slice of the unit
    Range global;
  };
  struct Round;
  at::Tensor slice_of(size_t unit) const;  // this rank's aggregation slice of a unit's shard (a view)
  ShardClient& client(int shard);
  at::Tensor over_site(const at::Tensor& v);      // every rank's v: [ranks, v's elements]
  at::Tensor max_over_site(const at::Tensor& v);  // element-wise, over the site's ranks
  // The global model of round >= `round` over every piece, whole, into `into` (per unit); the lowest and highest
  // round the shards answered with.
  std::pair<int64_t, int64_t> fetch_models(int64_t round, std::vector<at::Tensor>& into);
  // Every rank of the site holds the same round's global model in `values` at `round` (fetching a later one where
  // a shard had moved on); returns it.
  int64_t agree_on_round(int64_t round, std::vector<at::Tensor>& values);
  void transfer(Round& r);  // submit, then fetch: the round's thread
  // Round r's `pieces` (indices into its submissions) that shard `shard` owns: submitted, or their result fetched.
  void submit_to(Round& r, int shard, const std::vector<size_t>& pieces);
  void fetch_from(Round& r, int shard, const std::vector<size_t>& pieces);
  // `step` until it goes through; after a disconnection, the shard's data again first, with backoff, for up to the
  // shard's patience.
  using Step = void (SiteLane::*)(Round&, int, const std::vector<size_t>&);
  void until_through(Round& r, int shard, const std::vector<size_t>& pieces, Step step);
  int64_t submitted_bytes() const;  // every shard client's, so far

  parallel::ShardedModel& model_;
  comm::Topology& topo_;
  optim::Optimizer& inner_;
  federation::FederationOptions opts_;
  SiteOptions site_;
  std::optional<federation::Codec> codec_;
  ModelRanges ranges_;
  int shards_ = 0;
  std::vector<Piece> pieces_;
  std::vector<std::unique_ptr<ShardClient>> clients_;  // by shard (null where this rank sends nothing)
  std::vector<at::Tensor> global_;    // per unit: the global slice of round global_round_
  std::vector<at::Tensor> residual_;  // per unit: error feedback of what this rank's encodings lost
  int64_t global_round_ = -1;
  uint64_t session_ = 0;  // this job's, drawn by rank 0 at start() (sites/site_sessions.h)
  std::unique_ptr<Round> round_;
  std::vector<at::Tensor> saved_shards_;  // while the global model is swapped in
};

}  // namespace fedshard::sites
