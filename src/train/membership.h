// Who trains, under in-job recovery (comm/survivors.h, ULFM): the base communicator, the launch rank each of its
// ranks is (a replacement's: the one it stands for), the groups lost and not rejoined, and when they rejoin. A
// peer lost anywhere becomes here a MembershipChange, the same on every survivor, or LeftJob on the ranks whose
// group lost a rank; the trainer applies a change in one rebuild and logs it. Nothing here logs.
#pragma once

#include <mpi.h>

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "comm/layout.h"
#include "comm/topology.h"
#include "train/join_plan.h"

namespace fedshard::train {

// Thrown on the ranks of a group that lost a rank: they leave the job, which goes on without them.
struct LeftJob {
  std::string message;
};

// How the survivors of some work agree that it succeeded everywhere. Every survivor of a loss learns of it in
// one such agreement, the same one on all (its round's, evaluation's, checkpoint's, or a rejoin's transfer; a rank
// whose group lost a rank during a step joins the next of them), so all change membership at the same point of the
// run and go on from there together.
enum class Agreement {
  Succeeded,  // collectives: MPIX_Comm_agree after them (ULFM tells some members of a failure, not others)
  Exchanged,  // point-to-point work (a rejoin's state): a barrier, then the agreement (comm::all_exchanged)
};

// Runs `work` over `comm` and says whether it succeeded on every member, the same answer on all of them: a member
// whose work threw comm::PeerLost counts as failed, and first calls `revoke`, so that the members still inside
// work's collectives leave them.
bool succeeded_everywhere(MPI_Comm comm, Agreement how, const std::function<void()>& work,
                          const std::function<void()>& revoke = {});

// Who goes on after a change: the groups that train from now on (their layout and ids, their ranks' base
// communicator) and who left or joined.
struct MembershipChange {
  comm::Layout layout;
  std::vector<int> group_ids;
  std::vector<int> lost_group_ids, lost_ranks;      // launch ranks
  std::vector<int> joined_group_ids, joined_ranks;  // launch ranks
  std::string during;  // where the survivors learned of a loss (Position::during)
};

class Membership {
 public:
  // layout: the job's as launched; rejoin_after: federation.rejoin_after (0: lost groups never rejoin).
  Membership(const comm::Layout& layout, int64_t rejoin_after);
  ~Membership();
  Membership(const Membership&) = delete;
  Membership& operator=(const Membership&) = delete;

  MPI_Comm base() const { return base_; }
  const std::vector<int>& launch_ranks() const { return launch_ranks_; }
  // Groups were lost or rejoined: the job is no longer as launched.
  bool changed() const { return changed_; }
  // Whether the lost groups rejoin after the round that made `syncs` (federation.rejoin_after rounds after their
  // loss).
  bool rejoin_due(int64_t syncs) const { return !lost_groups_.empty() && rejoin_after_ > 0 && syncs >= rejoin_round_; }

  // Where the job is when a change comes: the step, the rounds held, the groups' ids.
  struct Position {
    int64_t step = 0, syncs = 0;
    std::vector<int> group_ids;
    std::string during;  // what the run was doing: "step", "round", "checkpoint", "evaluation", ...
  };
  // Runs `work`, collectives over the base communicator and topo's communicators. In a recoverable job every
  // survivor then agrees (`how`) whether it succeeded everywhere; where a peer was lost during it (on any rank:
  // ULFM tells some survivors only), `before` runs and the kept groups' change is returned (revoke every
  // communicator, shrink the base communicator to the live ranks, keep the groups that lost none: comm::regroup);
  // a rank of a lost group throws LeftJob instead. In a job that is not recoverable `work` just runs.
  std::optional<MembershipChange> with_recovery(bool recoverable, Agreement how, comm::Topology& topo,
                                                const Position& at, const std::function<void()>& work,
                                                const std::function<void()>& before = {});
  // A peer lost outside such work (during a step; or while a change was applied): revokes every communicator,
  // says so in the survivors' next agreement, and returns the change as with_recovery does (or throws LeftJob).
  MembershipChange lost(comm::Topology& topo, const Position& at);

  // The kept ranks' side of a rejoin after the round at at.step: starts replacements for every rank of the lost
  // groups (comm::spawn_replacements), sends them `plan` (filled in here with the grown job's layout and launch
  // ranks) and agrees with them that every one started. Returns the grown membership (the lost groups appended),
  // or why they did not join (then the lost groups are given up).
  struct Growth {
    std::optional<MembershipChange> change;
    std::vector<int> group_ids;  // the lost groups', joined or not
    std::string error;
  };
  Growth grow(const Position& at, const comm::Layout& old, JoinPlan plan, const std::vector<std::string>& argv);
  // A replacement's membership, from its plan.
  void joined(const JoinPlan& plan);

 private:
  MembershipChange lose(const Position& at);
  void set_base(MPI_Comm base);

  comm::Layout layout_;             // the groups training, over base_'s ranks
  MPI_Comm base_ = MPI_COMM_WORLD;  // the ranks training (the survivors' communicator after a loss)
  std::vector<int> launch_ranks_;   // per rank of base_: the launch rank it is (or, a replacement, stands for)
  // Groups lost and not rejoined: id and launch ranks. They rejoin after round rejoin_round_.
  std::vector<std::pair<int, std::vector<int>>> lost_groups_;
  int64_t rejoin_after_ = 0, rejoin_round_ = 0;
  bool changed_ = false;
};

}  // namespace fedshard::train
