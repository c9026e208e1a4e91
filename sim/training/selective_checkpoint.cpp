#include "sim/training/selective_checkpoint.h"

#include <array>

namespace vramsim {
namespace {

class TorchtitanOpSac final : public SelectiveCheckpointPolicy {
 public:
  bool must_save(std::string_view aten_op, int occurrence) const override {
    // no_recompute_list: aten.mm, aten._scaled_dot_product_efficient_attention,
    // aten._scaled_dot_product_flash_attention, _c10d_functional.reduce_scatter_tensor; torchtitan's MoE
    // models' _op_sac_save_list adds _c10d_functional.all_to_all_single
    // (torchtitan/models/deepseek_v3/infra/parallelize.py at 1e8f9acd1): only MoE layers run one.
    static constexpr std::array<std::string_view, 5> kSaveList{
        "mm", "_scaled_dot_product_efficient_attention", "_scaled_dot_product_flash_attention",
        "reduce_scatter_tensor", "all_to_all_single"};
    bool listed = false;
    for (std::string_view op : kSaveList) {
      listed = listed || op == aten_op;
    }
    // `meta[mm_count_key] % 2 == 0`: the second, fourth, ... mm of the pass is recomputed.
    return listed && !(aten_op == "mm" && occurrence % 2 == 0);
  }
};

}  // namespace

std::string_view dispatch_mode_op(std::string_view kind) { return kind == "_scaled_mm" ? "mm" : kind; }

const SelectiveCheckpointPolicy& torchtitan_op_sac_policy() {
  static const TorchtitanOpSac policy;
  return policy;
}

const SelectiveCheckpointPolicy* selective_checkpoint_policy(Checkpointing c) {
  switch (c) {
    case Checkpointing::kSelectiveOp:
      return &torchtitan_op_sac_policy();
    case Checkpointing::kNone:
    case Checkpointing::kFull:
    case Checkpointing::kSelective:
      return nullptr;
  }
  return nullptr;
}

}  // namespace vramsim
