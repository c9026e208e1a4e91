// The registry of techniques a job combines, as `vramsim predict` spells them: data-parallel schemes,
// Megatron's tensor and pipeline parallelism, PEFT, quantized base weights, activation checkpointing,
// offload, torch.compile, precision regimes, losses, optimizers and generation. Each entry is only the flags
// it adds: two techniques compose by giving both sets of flags, and the step builder composes what each does
// to the parameters, the autograd graph and the streams. A pair is refused only where the real library
// refuses it (the message quotes it) or where vramsim does not model it (the message says "not modelled").
// `vramsim techniques` prints the registry; tests/predict/test_composition_matrix.cpp walks every pair.
#pragma once

#include <string_view>
#include <vector>

namespace vramsim::cli {

struct Technique {
  std::string_view name;     // "fsdp", "qlora", ...
  std::string_view family;   // a job uses at most one technique of a family ("data-parallel", ...)
  std::string_view library;  // whose behaviour it follows
  std::string_view flags;    // what it adds to a `vramsim predict` command line
};

const std::vector<Technique>& techniques();

}  // namespace vramsim::cli
