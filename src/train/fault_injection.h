// The robustness tests' fault plan (util/faults.h), read from the environment once, at start-up:
//
// FEDSHARD_FAULT=ACTION:RANK:STEP[:POINT][,...] makes launch rank RANK (its rank in MPI_COMM_WORLD: its number
// stays when the job goes on without a lost group) fail at optimizer step STEP (each item of the list). ACTION:
// throw (an exception, as a bug would), kill (SIGKILL, as the OOM killer would), nan (the loss becomes NaN), inf
// (a master weight becomes infinite), stall (the rank sleeps 60 s, as a hung node would, or until a preemption
// signal or a stop notice reaches it: a test's kill or signal from outside then lands at a known step), alloc
// (LibTorch is asked for 2^50 bytes: its own out-of-memory error). POINT: step (default, after backward),
// checkpoint (in the middle of writing that step's checkpoint), eval (before that step's evaluation of the global
// model), join (in the rejoin after step STEP, federation.rejoin_after: a replacement for launch rank RANK as it
// starts up, a kept rank RANK before it sends the replacements their state) or summary (in the end-of-run
// summary's gather, STEP the last step).
//
// FEDSHARD_PREPARE_KILL=K: `fedshard prepare` kills itself (SIGKILL) after its K-th token shard is finished and
// before progress.json says so, the worst moment for --resume.
//
// FEDSHARD_SITE_ATTACK=scale:S|random:SIGMA makes a site (`fedshard train --server ...`) hostile: at every round
// from round 1 on, each of its ranks sends its change from the global model times S, or random values (normal,
// standard deviation SIGMA, drawn from the round and the rank) in its place (docs/sites.md, robust aggregation).
//
// FEDSHARD_SERVE_KILL=ROUND:prepare|commit: `fedshard serve` kills itself (SIGKILL) when round ROUND's data has
// arrived and it is about to prepare it, or when it has written the prepared round and is about to commit it.
//
// Unset in normal runs (then nothing is injected); a malformed value is an error, not ignored.
#pragma once

#include <memory>

#include "util/faults.h"

namespace fedshard::train {

// FEDSHARD_FAULT's plan, for `fedshard train`; FEDSHARD_PREPARE_KILL's, for `fedshard prepare`; FEDSHARD_SERVE_KILL's,
// for `fedshard serve`. Each throws
// fedshard::Error on a malformed plan.
std::unique_ptr<Faults> training_faults_from_environment();
std::unique_ptr<Faults> prepare_faults_from_environment();
std::unique_ptr<Faults> serve_faults_from_environment();

}  // namespace fedshard::train
