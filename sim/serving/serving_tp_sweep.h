// `fit --vary tp` for both serving engines (vllm_serving_fit.h, sglang_serving_fit.h): the same serving
// request at tensor-parallel sizes 1, 2, 4 and 8 (one node: vLLM's custom all-reduce sizes, SGLang's default
// fractions by TP), one replica of tp x pp GPUs, each size's request made as the command line would make it.
#pragma once

#include <utility>
#include <vector>

#include "sim/core/error.h"
#include "sim/predict/step_prediction.h"

namespace vramsim {

inline constexpr int kServingTpSizes[] = {1, 2, 4, 8};

// Calls size_one(request, row) for each size, row.tp set; a size the model cannot be split into keeps its
// InputError in row.error (at TP 1 the request itself is wrong, so the error is thrown). Row needs `int tp`
// and `std::string error`.
template <typename Row, typename SizeOne>
std::vector<Row> sweep_serving_tensor_parallel(const RequestArgs& args, SizeOne size_one) {
  std::vector<Row> rows;
  for (const int tp : kServingTpSizes) {
    RequestArgs a = args;
    a.tp = tp;
    a.world_size = tp * args.pp;  // one replica: its pipeline stages of tp GPUs each
    Row row;
    row.tp = tp;
    try {
      size_one(make_request(a), row);
    } catch (const InputError& e) {
      if (tp == 1) {
        throw;
      }
      row.error = e.what();
    }
    rows.push_back(std::move(row));
  }
  return rows;
}

}  // namespace vramsim
