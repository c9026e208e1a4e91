// Data parallelism's settings (DDP, DeepSpeed ZeRO, FSDP1/FSDP2, offload), with the libraries' defaults. Part
// of TrainingOptions (sim/training/training_options.h); the CLI parses them in
// sim/training/training_options.cpp.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "sim/core/types.h"
#include "sim/graph/dtype.h"

namespace vramsim {

// How torch.distributed.optim.ZeroRedundancyOptimizer orders the parameters before its sorted-greedy
// partition (see zero_redundancy_partition in data_parallel.h): numel() (current releases), or size()[0], the
// first dimension (its first releases, whose run printed the ZeRO recipe's figures).
enum class ZeroPartitionKey : std::uint8_t { kNumel, kSizeDim0 };

// Data parallelism (data_parallel.h): the user's settings, with the libraries' defaults.
struct DataParallelOptions {
  std::string scheme = "none";  // a registry name; "none": one GPU
  int world_size = 1;           // ranks in the data-parallel group
  // DDP: bucket_cap_mb = 25; the first bucket is 1 MiB (dist._DEFAULT_FIRST_BUCKET_BYTES).
  Bytes ddp_bucket_cap_bytes = 25 * kMiB;
  Bytes ddp_first_bucket_bytes = 1 * kMiB;
  // DDP's gradient_as_bucket_view (default false): each .grad is a view of its bucket (ddp.cpp).
  bool ddp_gradient_as_bucket_view = false;
  // DeepSpeed ZeRO 1/2: reduce_bucket_size (elements; default 5e8), contiguous_gradients (default true),
  // overlap_comm (default false; double gradient buffers when true).
  std::int64_t reduce_bucket_elements = 500'000'000;
  bool contiguous_gradients = true;
  bool overlap_comm = false;
  // ZeRO-3's stage3_max_reuse_distance, stage3_prefetch_bucket_size and stage3_max_live_parameters
  // (elements; defaults 1e9, 5e7, 1e9): see zero3_param_coordinator.h.
  std::int64_t stage3_max_reuse_distance = 1'000'000'000;
  std::int64_t stage3_prefetch_bucket_size = 50'000'000;
  std::int64_t stage3_max_live_parameters = 1'000'000'000;
  // FSDP1's limit_all_gathers (default True): the host waits for the free event of the unit two all-gathers
  // back before issuing the next.
  bool fsdp_limit_all_gathers = true;
  // FSDP's MixedPrecision.reduce_dtype / FSDP2's MixedPrecisionPolicy.reduce_dtype: the dtype gradients are
  // reduce-scattered in (torchtitan's default: float32 under bf16 parameters). Unset: the gradients' own.
  std::optional<DType> fsdp_reduce_dtype;
  // FSDP2's reduce-scatter copy-in: on the compute stream, its input kept until the next unit's
  // post_backward drops it before allocating its own (current PyTorch, pytorch/pytorch#129721 on), or on the
  // reduce-scatter stream, dropped when foreach_reduce_scatter returns (the 2024 FSDP2).
  bool fsdp2_copy_in_on_reduce_scatter_stream = false;
  // FSDP2 applied as torchtitan does without pipeline parallelism (parallelize_llama.py apply_fsdp:
  // reshard_after_forward = int(layer_id) < len(model.layers) - 1, "do not reshard after forward for the last
  // transformer block since FSDP would prefetch it immediately"): the last decoder layer keeps its unsharded
  // parameters from its forward until its backward. Off: fully_shard's default on every layer.
  bool fsdp2_keep_last_layer_unsharded = false;
  // FSDP HYBRID_SHARD: the ranks of one node, which shard a unit among themselves.
  int gpus_per_node = 8;
  // FSDP1's auto_wrap_policy for a PEFT model: false, transformer_auto_wrap_policy (each decoder layer one
  // unit, its adapters inside it); true, PEFT's fsdp_auto_wrap_policy (peft/utils/other.py), which the
  // Trainer installs for a PeftModel (transformers' update_fsdp_plugin_peft): also every leaf module whose
  // weight requires grad (each lora_A / lora_B) is a unit of its own, so the layers' FlatParameters are
  // all frozen and get no gradient. The CLI sets it for LoRA runs (--fsdp-auto-wrap, default peft).
  bool fsdp_peft_wrap = false;
  // FSDP1's use_orig_params (accelerate's default: True). With adapters inside a frozen layer's unit it
  // decides the gradients: True, the FlatParameter requires grad and its whole flat gradient is made;
  // False, FSDP refuses to flatten parameters of mixed requires_grad.
  bool fsdp_use_orig_params = true;
  // FSDP1's sync_module_states (default False): each unit's parameters are broadcast from rank 0 while it is
  // wrapped (fsdp_qlora's low_memory loading, accelerate's cpu_ram_efficient_loading), in 250 MiB buckets.
  bool fsdp_sync_module_states = false;
  // Offload to the host (pinned CPU memory): DeepSpeed's offload_optimizer / offload_param {device: cpu}
  // (ZeRO-Offload, ZeRO-Infinity), FSDP's CPUOffload(offload_params=True), which also runs the optimizer on
  // the host. The optimizer's states and master weights, and the reduced gradient shards, leave the GPU; with
  // offload_params the parameter shards too (each layer is still gathered onto the GPU for its use).
  bool offload_optimizer = false;
  bool offload_params = false;
  bool offload_activations = false;  // parsed with the others; TrainingOptions::offload_activations acts
  // DDP with torch.distributed.optim.ZeroRedundancyOptimizer: each rank's optimizer steps (and keeps states
  // for) only its partition of the parameters; gradients and parameters stay whole (scheme "ddp" only).
  bool zero_redundancy_optimizer = false;
  ZeroPartitionKey zero_partition_key = ZeroPartitionKey::kNumel;
};

}  // namespace vramsim
