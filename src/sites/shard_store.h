// A round server shard's state on disk (`fedshard serve --state DIR`), written as checkpoints are: whole, synced,
// renamed into place, so a shard killed at any moment finds its last committed round and nothing half-written.
//   DIR/identity.json            the federation identity the shard pinned (sites/identity.h) and its shard i/M
//   DIR/committed.safetensors    the last committed round: the global model over the shard's elements, the outer
//                                optimizer's state, the encoded rounds' residual and last change; round and
//                                participants in its metadata
//   DIR/prepared.safetensors     a round computed and not yet committed (sites/coordinator.h's two phases)
//   DIR/rounds.jsonl             a log, not state: what the shard measured of each committed round (sites/round_log.h)
#pragma once

#include <ATen/ATen.h>

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "sites/identity.h"
#include "sites/wire.h"

namespace fedshard::sites {

struct ShardSnapshot {
  int64_t round = -1;
  uint32_t attempt = 0;  // the decision's attempt (prepared rounds)
  std::vector<SiteTokens> participants;
  at::Tensor global, down_residual, down_delta;  // down_*: encoded rounds only
  std::map<std::string, at::Tensor> outer;       // the outer optimizer's state by name
};

class ShardStore {
 public:
  // `dir` is made if missing; `shard`/`shards` are checked against what the directory holds.
  ShardStore(std::string dir, int shard, int shards);
  const std::string& dir() const { return dir_; }

  std::optional<Identity> identity() const;
  void pin(const Identity& identity);

  std::optional<ShardSnapshot> committed() const;
  std::optional<ShardSnapshot> prepared() const;
  void prepare(const ShardSnapshot& s);
  void commit_prepared();  // the prepared round becomes the committed one (a rename)
  void drop_prepared();

 private:
  std::optional<ShardSnapshot> load(const std::string& name) const;
  std::string dir_;
  int shard_, shards_;
};

}  // namespace fedshard::sites
