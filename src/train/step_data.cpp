#include "train/step_data.h"

namespace fedshard::train {

StepData::StepData(const TrainSetup& s, int world_rank) : train_(s.train) {
  const auto& e = s.emulation;
  const auto& virt = e.virtual_layout;
  const int batch = static_cast<int>(s.cfg.batch_size * s.cfg.grad_accum);
  std::shared_ptr<data::WindowSampler> stream;
  if (s.partition.global_stream) {
    std::vector<int64_t> pool(s.train->num_windows());
    for (int64_t i = 0; i < static_cast<int64_t>(pool.size()); ++i) pool[i] = i;
    stream = std::make_shared<data::WindowSampler>(std::move(pool), virt.world(), batch, s.cfg.seed, /*stream=*/0);
  }
  for (int g : e.groups_of(world_rank)) {
    std::vector<int> readers;
    for (int p : e.positions_of(world_rank)) readers.push_back(stream ? virt.first_rank(g) + p : p);
    samplers_.push_back(stream ? stream
                               : std::make_shared<data::WindowSampler>(s.partition.pools[g], virt.group_size(g), batch,
                                                                       s.cfg.seed, /*stream=*/1 + g));
    readers_.push_back(std::move(readers));
  }
}

at::Tensor StepData::batch(int64_t step, size_t j, size_t r) const {
  return train_->batch(samplers_[j]->windows(step - 1, readers_[j][r]));
}

}  // namespace fedshard::train
