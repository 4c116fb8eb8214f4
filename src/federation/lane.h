// How a group meets the other groups at a round: the transport behind the round protocol (train/rounds.h), which
// asks it nothing else. A round is agreed and issued (begin: the groups' votes in one blocking agreement, then the
// averaging of its units), arrives (every unit's average has reached this rank, nothing applied yet) and is applied
// (finish); it may stay in flight across steps between begin and finish (federation.overlap). A group that must stop
// between rounds votes from where it is (vote_stop). One implementation today: the in-job MPI lane
// (federation::Aggregator), whose groups meet over the segment communicators of one job.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace fedshard::federation {

// What a group brings to a round; the groups' votes are agreed in the round's first, blocking agreement.
struct Vote {
  bool stop = false;        // preemption: checkpoint and exit after this round
  bool last = false;        // the job ends with this round
  bool checkpoint = false;  // time-based rounds: a checkpoint is due at this round
  bool evaluate = false;    // time-based rounds: an evaluation is due at this round
  bool at_round = true;     // false: the group votes to stop from between rounds (Lane::vote_stop)
  bool nonfinite = false;   // some rank of the group holds a non-finite value in its slices (agreed in the group)
  int64_t step = 0;         // the group's step count
  int64_t steps_in_round = 0;
  int64_t round = 0;         // the round's number, for messages (not sent)
  double launch_tokens = 0;  // what the group trained on since this launch started
};

// The round's agreement: any group's flags, every group's step count, the tokens of all groups.
struct Agreement {
  Vote any;                     // flags: OR over groups
  std::vector<int64_t> steps;   // per group
  std::vector<bool> at_round;   // per group: it voted from a round (not from between rounds, to stop)
  std::vector<bool> nonfinite;  // per group: Vote::nonfinite
  double launch_tokens = 0;     // summed over groups
  // Whether the round's averaging was issued: not when some group voted to stop from between rounds, so
  // every group stops where it is and a group that was at a round keeps that round pending.
  bool issued = true;
};

class Lane {
 public:
  virtual ~Lane() = default;
  // Before the first step (collective): a lane whose groups meet outside this job takes the federation's current
  // global model. After the last (or a stop): it says it leaves.
  virtual void start() {}
  virtual void leave() {}
  // Agrees on the groups' votes (blocking) and issues the averaging of `units`, this group weighing `weight` (e.g. the
  // tokens it trained on since those units were last averaged). A non-finite value in any group's model ends the job
  // here, before anything is sent. One round in flight at a time.
  virtual Agreement begin(const std::vector<size_t>& units, double weight, const Vote& vote) = 0;
  // Waits until the round's averaging has arrived on this rank, changing nothing; arrive_model: its model only (before
  // a checkpoint, which keeps the round in flight).
  virtual void arrive() = 0;
  virtual void arrive_model() = 0;
  // Waits for the round in flight and computes its outcome without applying it (before a checkpoint).
  virtual void settle() = 0;
  // Applies the round (waiting for it first).
  virtual void finish() = 0;
  virtual bool in_flight() const = 0;
  // A group that must stop between rounds takes part in the next agreement from where it is.
  virtual Agreement vote_stop(const Vote& vote) = 0;
  // Moves a round in flight along (once a step).
  virtual void progress() = 0;
  // 1 where this rank's slices hold a NaN or infinity, else 0: a device scalar, queued without a host sync.
  virtual at::Tensor nonfinite_flag() const = 0;
  // This rank's part of a checksum of the last global model (federation.audit): summed over a group's ranks, equal in
  // every group exactly when they hold the same global model.
  virtual int64_t global_checksum() const = 0;
  // The round server's number for that global model (a site's lane); none for rounds held in the job, which the
  // schedule numbers.
  virtual std::optional<int64_t> server_round() const { return std::nullopt; }
  // Runs fn while this rank's shard holds the latest global model instead of its group's own (evaluation under
  // overlap, where no step ends with the groups equal).
  virtual void with_global_model(const std::function<void()>& fn) = 0;
  // Runs fn while this rank's shard holds the global model plus what error feedback still owes (eval.backlog):
  // by conservation, the model rounds that lost nothing would have reached; tells a codec's lag from its damage.
  virtual void with_backlog_model(const std::function<void()>& fn) = 0;

  // What checkpoints keep of the lane (train/rank_state.h): per unit, the outer optimizer's state and the lane's own
  // tensors (the last global slice, error feedback, a settled round in flight), written back by name; the units of
  // a round in flight, and that round restored settled.
  virtual std::vector<std::map<std::string, at::Tensor>> outer_state() = 0;
  virtual std::vector<std::map<std::string, at::Tensor>> state() const = 0;
  virtual void restore_state(size_t unit, const std::string& name, const at::Tensor& value) = 0;
  virtual std::vector<size_t> round_units() const = 0;
  virtual void restore_round(const std::vector<size_t>& units) = 0;
};

}  // namespace fedshard::federation
