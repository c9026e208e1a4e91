// vramsim-replay with CUDA: the host logic of kernels/replay/ plus the real backends (kernels/replay_cuda.h).
#include <iostream>

#include "kernels/replay/replay_cli.h"
#include "kernels/replay_cuda.h"

int main(int argc, char** argv) {
  return vramsim::hw::replay_main(argc, argv, std::cout, std::cerr, vramsim::hw::cuda_hooks());
}
