// What this binary was built with (LibTorch, CUDA, NCCL, MPI) and what it sees at run time (GPUs), for
// `fedshard --version`, `fedshard info` and the checks of model.device = cuda.
#pragma once

#include <string>

namespace fedshard {

// One line, e.g. "LibTorch 2.11.0 with CUDA 13.0, NCCL 2.28.9; MPI: Open MPI v5.0.11 with ULFM; GPUs visible:
// none (no CUDA driver)".
std::string build_description();
// GPUs this process can use; 0 in a CPU-only build, without a driver, or without devices. Prints nothing.
int visible_gpus();
bool built_with_cuda();
// The compute capability of GPU `device` as major * 10 + minor (90 for Hopper); 0 where it cannot be read.
int gpu_compute_capability(int device);
// Against an MPI with ULFM, which in-job recovery needs (comm/survivors.h).
bool built_with_ulfm();
// Makes `device` the calling thread's current GPU, before anything else touches CUDA, so the CUDA context
// (and every later runtime call without a device argument) is on this rank's GPU rather than on GPU 0.
// Throws fedshard::Error when it cannot; a no-op in a CPU-only build.
void use_gpu(int device);

}  // namespace fedshard
