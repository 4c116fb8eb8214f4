#include "train/step_data.h"

namespace fedshard::train {

StepData::StepData(const TrainSetup& s, int world_rank) : train_(s.train) {
  const auto& e = s.emulation;
  // The layout the data is dealt over, the groups this rank reads for and the positions it plays in them: the
  // virtual ones; a site reading as group I of N, N groups of its own size.
  comm::Layout dealt = e.virtual_layout;
  std::vector<int> groups = e.groups_of(world_rank), positions = e.positions_of(world_rank);
  if (s.data_slot) {
    const int size = s.layout.world();
    dealt = comm::Layout(std::vector<int>(static_cast<size_t>(s.data_slot->second), size), size);
    groups = {s.data_slot->first};
    positions = {world_rank};
  }
  const int batch = static_cast<int>(s.cfg.batch_size * s.cfg.grad_accum);
  std::shared_ptr<data::WindowSampler> stream;
  if (s.partition.global_stream) {
    std::vector<int64_t> pool(s.train->num_windows());
    for (int64_t i = 0; i < static_cast<int64_t>(pool.size()); ++i) pool[i] = i;
    stream = std::make_shared<data::WindowSampler>(std::move(pool), dealt.world(), batch, s.cfg.seed, /*stream=*/0);
  }
  for (int g : groups) {
    std::vector<int> readers;
    for (int p : positions) readers.push_back(stream ? dealt.first_rank(g) + p : p);
    samplers_.push_back(stream ? stream
                               : std::make_shared<data::WindowSampler>(s.partition.pools[g], dealt.group_size(g), batch,
                                                                       s.cfg.seed, /*stream=*/1 + g));
    readers_.push_back(std::move(readers));
  }
}

at::Tensor StepData::batch(int64_t step, size_t j, size_t r) const {
  return train_->batch(samplers_[j]->windows(step - 1, readers_[j][r]));
}

}  // namespace fedshard::train
