// vramsim-replay of a build without CUDA: the host logic and the fake backends; the real backends say that
// this build has no CUDA and exit 2.
#include <iostream>

#include "kernels/replay/replay_cli.h"

int main(int argc, char** argv) {
  return vramsim::hw::replay_main(argc, argv, std::cout, std::cerr, vramsim::hw::no_cuda_hooks());
}
