// What a resume may change (docs/federation.md, "Resuming with other options"). A checkpoint records the
// resolved configuration it was written with; every option that shapes federation state is compared with
// the resuming run's. A change is allowed where the state the new option needs is in the checkpoint or can
// be derived exactly from it, and refused in one line naming the option and the checkpoint's value otherwise.
#pragma once

#include "train/checkpoint.h"
#include "train/config.h"

namespace fedshard::train {

// How the resume meets the checkpoint's groups (train/checkpoint.h, restore_checkpoint).
enum class Relayout { Same, PerGroup, Merge };

// Throws fedshard::Error when `cfg` may not resume `meta` under `relayout`. Local: safe in the start-up phase.
void check_resume_contract(const CheckpointMeta& meta, const TrainConfig& cfg, Relayout relayout);

}  // namespace fedshard::train
