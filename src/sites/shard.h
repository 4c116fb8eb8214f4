// One shard of the round server (`fedshard serve --shard i/M`): its elements of the global model, the round being
// collected from the sites, and its side of the two phases (sites/coordinator.h). Sites say hello, submit their
// model or delta over the shard's elements for the open round, and fetch the round's result, which a fetch waits
// for. The gRPC service (sites/service.h) calls in from its threads; a driver thread reports to the coordinator and
// prepares and commits rounds. Every refusal is one line on the server and reaches the site as a gRPC status.
#pragma once

#include <atomic>
#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "federation/codec.h"
#include "federation/outer_optimizer.h"
#include "sites/identity.h"
#include "sites/model_ranges.h"
#include "sites/refusal.h"
#include "sites/round_math.h"
#include "sites/shard_store.h"
#include "sites/site_sessions.h"
#include "sites/wire.h"
#include "util/faults.h"

namespace fedshard::sites {

struct ServeOptions {
  int shard = 0, shards = 1;
  std::string state_dir;
  federation::OuterOptions outer;
  int quorum = 0;         // sites a round waits for; 0: every active site
  double deadline = 600;  // seconds after the first complete site: the round closes with those complete
};

class Shard {
 public:
  // `report`: the coordinator (shard 0's own, or a connection to it); `faults`: the robustness tests' plan.
  Shard(ServeOptions opts, std::function<Decision(const Report&)> report, const Faults& faults = Faults::none());
  ~Shard();

  // `site`: the peer's verified name (its certificate's common name). Each throws Refusal.
  HelloReply hello(const Hello& h, const std::string& site);
  // The submission's chunks come from `next` (false at the end of the stream).
  SubmitReply submit(const SubmitHeader& h, const std::string& site, const std::function<bool(Chunk&)>& next);
  // Waits for round r.round to be committed (`cancelled` polled), then writes the header and the chunks.
  void fetch(const FetchRequest& r, const std::string& site, const std::function<bool()>& cancelled,
             const std::function<bool(const std::string&)>& write);
  Ack leave(const Leave& l, const std::string& site);
  // Holds the site's job connected (sites/site_sessions.h): writes one Ack, then returns when `cancelled` (the rank
  // ended or its link failed) or the shard stops.
  void attend(const Attend& a, const std::string& site, const std::function<bool()>& cancelled,
              const std::function<bool(const std::string&)>& write);

  // The driver: reports, prepares, commits until stop().
  void run();
  void stop();

  // Called for sites' hellos and submissions at shard 0 (the coordinator's quorum); set before serving.
  std::function<void(const std::string& site, bool left)> on_site;

 private:
  struct Submission;
  Range range() const;
  Report report_locked();
  void prepare_locked(const Decision& d);
  void commit_locked(const Decision& d);
  void adopt(const ShardSnapshot& s);
  ShardSnapshot snapshot_of(const ShardModel& m, int64_t round, uint32_t attempt,
                            const std::vector<SiteTokens>& participants) const;
  void store_chunk(const Chunk& c, const SubmitHeader& h, at::Tensor& values, std::vector<Range>& covered) const;

  ServeOptions opts_;
  std::function<Decision(const Report&)> report_;
  const Faults& faults_;
  ShardStore store_;
  std::optional<Identity> identity_;
  std::optional<ModelRanges> ranges_;
  std::optional<federation::Codec> codec_;
  SiteSessions sessions_;
  mutable std::mutex mu_;
  std::condition_variable changed_;
  ShardModel model_;               // as of the last committed round
  int64_t committed_ = -1;
  std::vector<SiteTokens> participants_;  // of the committed round
  uint32_t attempt_ = 0;
  std::map<std::string, std::unique_ptr<Submission>> round_;  // the open round's data, by site
  std::optional<ShardModel> prepared_;
  uint32_t prepared_attempt_ = 0;
  std::atomic<bool> stopping_{false};
};

}  // namespace fedshard::sites
