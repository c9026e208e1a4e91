// Data parallelism (sim/parallel/data_parallel.h): one rank's model states under DDP, DeepSpeed ZeRO 1-3 and
// FSDP, against the sources' own accounting.
#include <catch2/catch.hpp>

#include <cstdint>
#include <string>

#include "sim/core/error.h"
#include "sim/graph/tensor_lifetime.h"
#include "sim/models/transformer_builder.h"
#include "sim/parallel/data_parallel.h"
#include "sim/parallel/tensor_parallel.h"
#include "sim/predict/step_prediction.h"

using namespace vramsim;

namespace {

// The bill where (step, phase) begins; by default step 2's optimizer step: gradients of step 2 and optimizer
// states of step 1 alive.
MemoryBill bill_at(const ModelConfig& m, const std::string& scheme, int world, int step = 2,
                   Phase phase = Phase::kOptimizer, bool offload_optimizer = false,
                   bool offload_params = false) {
  TrainingOptions o;
  o.batch = 1;
  o.seq = 64;
  o.steps = 2;
  o.precision = Precision::kBf16;  // bf16 weights and gradients, fp32 master weights and Adam states
  o.optimizer = OptimizerKind::kAdamW;
  o.optimizer_impl = OptimizerImpl::kFused;  // no foreach temporaries
  o.data_parallel.scheme = scheme;
  o.data_parallel.world_size = world;
  o.data_parallel.offload_optimizer = offload_optimizer;
  o.data_parallel.offload_params = offload_params;
  const OpGraph g = build_training_steps(m, o);
  const AllocationSchedule s = build_allocation_schedule(g);
  return live_bill(g, s, s.phase_begin(step, phase)->event_index);
}

// Ψ and its per-rank parts as ZeRO cuts it: shards of ceil(n / N) per tensor; parameters of at most 1e5
// elements stay whole under ZeRO-3 (stage3_param_persistence_threshold).
struct Psi {
  std::int64_t all = 0;
  std::int64_t shard = 0;        // sum of ceil(n / N)
  std::int64_t small_full = 0;   // elements of parameters <= 1e5
  std::int64_t small_shard = 0;  // their shards
};
Psi psi_of(const ModelConfig& m, int nd) {
  Psi psi;
  for (const ParameterShape& p : m.parameter_shapes()) {
    const std::int64_t n = p.numel();
    psi.all += n;
    psi.shard += (n + nd - 1) / nd;
    if (n <= 100'000) {
      psi.small_full += n;
      psi.small_shard += (n + nd - 1) / nd;
    }
  }
  return psi;
}

ModelConfig small_llama() {
  ModelConfig m = model_preset("llama-2-7b");
  m.n_layers = 4;
  m.vocab_size = 32000;
  return m;
}

}  // namespace

TEST_CASE("ZeRO paper Table 1: model states per GPU for DP, P_os, P_os+g, P_os+g+p", "[quick][predict]") {
  // Rajbhandari et al. 2020, Table 1 and Sec. 5: mixed-precision Adam keeps 2Ψ bytes of fp16 parameters,
  // 2Ψ of fp16 gradients and KΨ = 12Ψ of optimizer states (fp32 parameters, momentum, variance). Per GPU
  // with N_d ranks: DP 16Ψ, P_os 4Ψ + 12Ψ/N_d, P_os+g 2Ψ + 14Ψ/N_d, P_os+g+p 16Ψ/N_d (the paper's own
  // row for Ψ = 7.5B is checked in the next test). Here Ψ is the model's, shards are ceil(n / N_d) per
  // tensor, and ZeRO-3 keeps parameters of at most 1e5 elements whole (stage3_param_persistence_threshold):
  // those are added by hand below. The fused AdamW also keeps a 4-byte fp32 `step` per parameter tensor (its
  // _init_group: capturable/fused steps live on the device), so each line adds 4 B per parameter tensor.
  const ModelConfig m = small_llama();
  const int nd = 64;
  const std::int64_t step_tensors = 4 * static_cast<std::int64_t>(m.parameter_shapes().size());
  const Psi counts = psi_of(m, nd);
  const std::int64_t psi = counts.all, psi_shard = counts.shard;
  const std::int64_t small_full = counts.small_full, small_shard = counts.small_shard;
  const auto states = [](const MemoryBill& b) { return b.parameters + b.gradients + b.optimizer_states; };
  const MemoryBill dp = bill_at(m, "ddp", nd);
  CHECK(states(dp) == 16 * psi + step_tensors);
  CHECK(dp.communication == 2 * psi);  // DDP's gradient buckets: the gradients a second time
  const MemoryBill os = bill_at(m, "zero1", nd);
  CHECK(states(os) == 4 * psi + 12 * psi_shard + step_tensors);
  const MemoryBill osg = bill_at(m, "zero2", nd);
  CHECK(states(osg) == 2 * psi + 14 * psi_shard + step_tensors);
  const MemoryBill osgp = bill_at(m, "zero3", nd);
  CHECK(states(osgp) == 16 * psi_shard + 2 * (small_full - small_shard) + step_tensors);
}

TEST_CASE("ZeRO paper Table 1: the program's per-rank model states for Psi = 7.5B, N_d = 64", "[predict]") {
  // Rajbhandari et al. 2020 (ZeRO, arXiv:1910.02054), Table 1, row N_d = 64 of the 7.5B model (K = 12), as
  // printed (GB = 1e9 B): DP 120, P_os 31.4, P_os+g 16.6, P_os+g+p 1.88 (Figure 1 rounds it to 1.9). The
  // model is a Llama-2-7B shape with d_ff = 12,945, so that Ψ is 7.5B to 1e-5. By hand: a layer has
  // 4 d^2 + 3 d d_ff + 2 d = 67,108,864 + 159,068,160 + 8,192 = 226,185,216 parameters, 32 layers
  // 7,237,926,912, embeddings and head 2 x 32,000 x 4,096 = 262,144,000, the final norm 4,096: Ψ =
  // 7,500,075,008. Checked: the program's parameters + gradients + optimizer states of one rank at step 2's
  // optimizer step, in GB, against the printed figures to half a unit of their last digit (the fused AdamW's
  // 4-byte steps and ZeRO-3's whole small parameters add under 1 MB and do not reach it).
  ModelConfig m = model_preset("llama-2-7b");
  m.d_ff = 12945;
  REQUIRE(m.parameter_count() == 7'500'075'008);
  const auto states_gb = [&](const char* scheme) {
    const MemoryBill b = bill_at(m, scheme, 64);
    return static_cast<double>(b.parameters + b.gradients + b.optimizer_states) / 1e9;
  };
  CHECK(states_gb("ddp") == Approx(120.0).margin(0.5));
  CHECK(states_gb("zero1") == Approx(31.4).margin(0.05));
  CHECK(states_gb("zero2") == Approx(16.6).margin(0.05));
  CHECK(states_gb("zero3") == Approx(1.88).margin(0.005));
}

TEST_CASE("FSDP: shards per rank, full-shard frees gathered layers after forward, shard-grad-op keeps them",
          "[quick][predict]") {
  const ModelConfig m = small_llama();
  const int world = 8;
  std::int64_t shard = 0;
  for (const ParameterShape& p : m.parameter_shapes()) {
    std::int64_t n = 1;
    for (std::int64_t d : p.shape) {
      n *= d;
    }
    shard += (n + world - 1) / world;
  }
  const std::int64_t tensors = static_cast<std::int64_t>(m.parameter_shapes().size());
  const MemoryBill full = bill_at(m, "fsdp-full-shard", world);
  // bf16 with FSDP's default --master-weights fp32: MixedPrecision on a model built in fp32, so the shards
  // and the reduced gradient shards are fp32 (_flat_param.py, _cast_grad_to_param_dtype) and AdamW's two
  // moments fp32, with no master copy.
  CHECK(full.parameters == 4 * shard);
  CHECK(full.gradients == 4 * shard);
  CHECK(full.optimizer_states == 8 * shard + 4 * tensors);  // + the fused AdamW's 4-byte steps
  CHECK(full.communication == 0);                           // every unit resharded by the end of backward
  // Where forward ends: full-shard has resharded every decoder layer and keeps the root unit (embeddings,
  // final norm, head: not resharded after forward); shard-grad-op keeps every layer's unsharded flat
  // parameter too. Flat sizes by hand (bf16; both divisible by 8, so no padding): a Llama-2 layer
  // 4 d^2 + 3 d f + 2 d, the root 2 V d + d.
  const std::int64_t d = 4096;
  const std::int64_t layer_flat = 2 * (4 * d * d + 3 * d * 11008 + 2 * d);
  const std::int64_t root_flat = 2 * (2 * 32000 * d + d);
  CHECK(bill_at(m, "fsdp-full-shard", world, 1, Phase::kLoss).communication == root_flat);
  CHECK(bill_at(m, "fsdp-shard-grad-op", world, 1, Phase::kLoss).communication == root_flat + 4 * layer_flat);
  // ZeRO-3 gathers each partitioned parameter around the module that reads it (fetch_sub_module, then
  // release_sub_module after its forward) and, in the first step, keeps none (no trace yet): the head's too.
  CHECK(bill_at(m, "zero3", world, 1, Phase::kLoss).communication == 0);
}

TEST_CASE("data-parallel options: errors name the option", "[quick][predict]") {
  RequestArgs a;
  a.model = "gpt2";
  a.capacity = "80GiB";
  a.world_size = 8;
  a.zero = 4;
  CHECK_THROWS_WITH(make_request(a), "--zero: 4 is not a ZeRO stage (0..3)");
  a.zero.reset();
  a.fsdp = "hybrid-ish";
  CHECK_THROWS_WITH(make_request(a),
                    Catch::StartsWith("--fsdp: unknown data-parallel scheme 'fsdp-hybrid-ish'"));
  a.fsdp = "full-shard";
  a.zero = 3;
  CHECK_THROWS_WITH(make_request(a), "--zero / --fsdp: give only one of them");
  a.zero.reset();
  a.fsdp.clear();
  a.world_size = 0;
  CHECK_THROWS_WITH(make_request(a), "--world-size: 0 is not in 1..1048576");
  a.world_size = 8;  // no scheme named: DDP
  CHECK(make_request(a).options.data_parallel.scheme == "ddp");
}

TEST_CASE("Megatron tensor parallelism: one rank's weights, and the layout flags", "[quick][predict]") {
  // Llama-2-7B over t = 4: per layer q,k,v,o 4 x d x d/4, gate/up/down 3 x d x f/4, norms 2d whole; the
  // embedding and lm_head split over the vocabulary padded to a multiple of 128 t (32000 -> 32256 / 4).
  const ModelConfig m = tensor_parallel_rank(model_preset("llama-2-7b"), 4);
  const std::int64_t d = 4096, f = 11008, v = 32256 / 4;
  CHECK(m.parameter_count() == 32 * (4 * d * d / 4 + 3 * d * f / 4 + 2 * d) + 2 * v * d + d);
  CHECK_THROWS_WITH(tensor_parallel_rank(model_preset("llama-2-7b"), 3),
                    "--tp: 3 does not divide the 32 attention heads of llama-2-7b");
  // Fewer key/value heads than ranks (vLLM's rule): 4 over 8 ranks, one each, each replicated twice; 6 over
  // 8 cannot be replicated evenly, 12 over 8 cannot be split.
  ModelConfig gqa = model_preset("llama-2-7b");
  gqa.n_kv_heads = 4;
  CHECK(tensor_parallel_rank(gqa, 8).n_kv_heads == 1);
  gqa.n_kv_heads = 6;
  CHECK_THROWS_WITH(
      tensor_parallel_rank(gqa, 8),
      "--tp: 8 is not a multiple of the 6 key/value heads of llama-2-7b (each would be replicated "
      "on tp / heads ranks)");
  gqa.n_kv_heads = 12;
  CHECK_THROWS_WITH(tensor_parallel_rank(gqa, 8),
                    "--tp: 8 does not divide the 12 key/value heads of llama-2-7b");
  RequestArgs r;
  r.model = "llama-2-7b";
  r.capacity = "80GiB";
  r.tp = 4;
  r.world_size = 16;  // 4-way data parallel over 4-way tensor parallel
  const PredictRequest p = make_request(r);
  CHECK(p.options.data_parallel.world_size == 4);
  CHECK(p.options.data_parallel.scheme == "ddp");
  r.world_size = 6;
  CHECK_THROWS_WITH(make_request(r), "--tp: 4 does not divide --world-size 6");
}

TEST_CASE("FSDP hybrid-shard: full-shard within a node, replicated across nodes", "[quick][predict]") {
  // HYBRID_SHARD over 32 GPUs of 8 per node: a unit is sharded over the node's 8 ranks, so a rank holds what
  // full-shard over 8 holds (parameters, gradients and states alike), not what full-shard over 32 holds.
  const ModelConfig m = small_llama();
  const MemoryBill hybrid = bill_at(m, "fsdp-hybrid-shard", 32);
  const MemoryBill over8 = bill_at(m, "fsdp-full-shard", 8);
  CHECK(hybrid.parameters == over8.parameters);
  CHECK(hybrid.gradients == over8.gradients);
  CHECK(hybrid.optimizer_states == over8.optimizer_states);
  CHECK(hybrid.parameters > bill_at(m, "fsdp-full-shard", 32).parameters);
}

TEST_CASE("ZeRO-Offload / ZeRO-Infinity / FSDP CPU offload: the model states left on the GPU",
          "[quick][predict]") {
  // DeepSpeed's own estimators of GPU memory for model states (deepspeed/runtime/zero/stage_1_and_2.py
  // estimate_zero2_model_states_mem_needs, stage3.py estimate_zero3_model_states_mem_needs), Ψ parameters,
  // N GPUs:
  //   ZeRO-2, offload_optimizer:                  2Ψ          (bf16 parameters; no gradient partition stays)
  //   ZeRO-3, offload_optimizer:                  2Ψ/N + 4 x largest layer (gathered while it runs)
  //   ZeRO-3, offload_optimizer + offload_param:  4 x largest layer
  // Between steps (where the optimizer step begins) the gathered layer is gone, so the resident part is 2Ψ,
  // 2Ψ/N per tensor (ceil) and, with offload_param, only the persistent parameters (<= 1e5 elements, which
  // stage 3 keeps whole on the GPU; the estimators leave them out). FSDP's CPUOffload(offload_params=True)
  // keeps no parameter shard on the GPU at all.
  const ModelConfig m = small_llama();
  const int nd = 64;
  const Psi counts = psi_of(m, nd);
  const std::int64_t psi = counts.all, psi_shard = counts.shard;
  const std::int64_t small_full = counts.small_full, small_shard = counts.small_shard;
  const auto states = [](const MemoryBill& b) { return b.parameters + b.gradients + b.optimizer_states; };
  const MemoryBill zero2 = bill_at(m, "zero2", nd, 2, Phase::kOptimizer, true, false);
  CHECK(states(zero2) == 2 * psi);
  CHECK(zero2.optimizer_states == 0);
  const MemoryBill zero3 = bill_at(m, "zero3", nd, 2, Phase::kOptimizer, true, false);
  CHECK(states(zero3) == 2 * psi_shard + 2 * (small_full - small_shard));
  const MemoryBill infinity = bill_at(m, "zero3", nd, 2, Phase::kOptimizer, true, true);
  CHECK(states(infinity) == 2 * small_full);
  const MemoryBill fsdp = bill_at(m, "fsdp-full-shard", nd, 2, Phase::kOptimizer, true, true);
  CHECK(states(fsdp) == 0);
}

namespace {

HostMemory host_of(const ModelConfig& m, const std::string& scheme, int world, bool offload_params,
                   Precision precision = Precision::kBf16, MasterWeights master = MasterWeights::kFp32) {
  TrainingOptions o;
  o.master_weights = master;
  o.batch = 1;
  o.seq = 64;
  o.steps = 1;
  o.precision = precision;
  o.optimizer = OptimizerKind::kAdamW;
  o.optimizer_impl = OptimizerImpl::kFused;
  o.data_parallel.scheme = scheme;
  o.data_parallel.world_size = world;
  o.data_parallel.offload_optimizer = true;
  o.data_parallel.offload_params = offload_params;
  return build_training_steps(m, o).host_memory;
}

}  // namespace

TEST_CASE("offload: the host memory of one rank against DeepSpeed's estimator and FSDP's CPU shards",
          "[quick][predict]") {
  // DeepSpeed's estimate_zero3_model_states_mem_needs (deepspeed/runtime/zero/stage3.py), CPU side with
  // zero_init and one node of N GPUs, before its additional_buffer_factor of 1.5:
  //   offload_optimizer:                  16Ψ per node (fp32 partition 4, its fp32 .grad 4, Adam's 8)
  //   offload_optimizer + offload_param:  18Ψ per node (+ the bf16 parameter partitions, 2)
  // A node of N ranks holds N partitions. The estimator counts every parameter in the 2; the persistent ones
  // (<= 1e5 elements) stay whole on the GPU and are not offloaded. With N = 8 every dimension of the model
  // divides evenly, so the partitions are exact.
  const ModelConfig m = small_llama();
  const int nd = 8;
  const Psi c = psi_of(m, nd);
  REQUIRE(c.shard * nd == c.all);  // no padding
  const HostMemory zero3 = host_of(m, "zero3", nd, false);
  CHECK(static_cast<std::int64_t>(zero3.model_states()) * nd == 16 * c.all);
  CHECK(static_cast<std::int64_t>(zero3.master_weights) * nd == 4 * c.all);
  CHECK(static_cast<std::int64_t>(zero3.gradients) * nd == 4 * c.all);
  CHECK(static_cast<std::int64_t>(zero3.optimizer_states) * nd == 8 * c.all);
  CHECK(zero3.parameters == 0);
  const HostMemory infinity = host_of(m, "zero3", nd, true);
  CHECK(static_cast<std::int64_t>(infinity.model_states()) * nd == 18 * c.all - 2 * c.small_full);
  // ZeRO-2's partitions are the same bytes between steps (its estimator's max(4 x GPUs, 16) counts the
  // whole fp32 model every process loads before partitioning: not step memory).
  CHECK(host_of(m, "zero2", nd, false).model_states() == zero3.model_states());
  // FSDP CPUOffload(offload_params=True) with amp-bf16 (fp32 parameters): the flat parameter's fp32 shard,
  // its fp32 _cpu_grad and torch.optim.AdamW's two fp32 states, 16 bytes per shard element; no master copy.
  const HostMemory fsdp = host_of(m, "fsdp-full-shard", nd, true, Precision::kAmpBf16);
  CHECK(static_cast<std::int64_t>(fsdp.parameters) == 4 * c.shard);
  CHECK(static_cast<std::int64_t>(fsdp.gradients) == 4 * c.shard);
  CHECK(static_cast<std::int64_t>(fsdp.optimizer_states) == 8 * c.shard);
  CHECK(fsdp.master_weights == 0);
  // A model loaded in bf16 (--master-weights none): the shard, its gradient and torch.optim's states
  // (zeros_like(param)) are bf16.
  const HostMemory fsdp_bf16 =
      host_of(m, "fsdp-full-shard", nd, true, Precision::kBf16, MasterWeights::kNone);
  CHECK(static_cast<std::int64_t>(fsdp_bf16.model_states()) == (2 + 2 + 4) * c.shard);
  // MixedPrecision(param_dtype=bf16) on a model built in fp32 (--master-weights fp32): the shard is the
  // fp32 FlatParameter's (_local_shard), _cpu_grad is zeros_like(_local_shard), the states fp32; no master.
  const HostMemory fsdp_mp = host_of(m, "fsdp-full-shard", nd, true, Precision::kBf16);
  CHECK(static_cast<std::int64_t>(fsdp_mp.parameters) == 4 * c.shard);
  CHECK(static_cast<std::int64_t>(fsdp_mp.gradients) == 4 * c.shard);
  CHECK(static_cast<std::int64_t>(fsdp_mp.optimizer_states) == 8 * c.shard);
  CHECK(fsdp_mp.master_weights == 0);
  // Nothing offloaded, nothing on the host.
  TrainingOptions plain;
  plain.batch = 1;
  plain.seq = 64;
  plain.steps = 1;
  CHECK(build_training_steps(m, plain).host_memory.total() == 0);
}
