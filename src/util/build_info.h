// What this binary was built with (LibTorch, CUDA, NCCL) and what it sees at run time (GPUs), for
// `fedshard --version`, `fedshard info` and the checks of model.device = cuda.
#pragma once

#include <string>

namespace fedshard {

// One line, e.g. "LibTorch 2.11.0 with CUDA 13.0, NCCL 2.28.9; GPUs visible: none (no CUDA driver)".
std::string build_description();
// GPUs this process can use; 0 in a CPU-only build, without a driver, or without devices. Prints nothing.
int visible_gpus();
bool built_with_cuda();

}  // namespace fedshard
