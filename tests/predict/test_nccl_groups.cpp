// NCCL's communicator buffers in the training bill (sim/engine/nccl_buffers.h, sim/predict/nccl_groups.h).
// Every expected byte count is worked by hand from NCCL's sources (NVIDIA/nccl master, 2026-06):
//   src/init.cc        DEFAULT_LL_BUFFSIZE 8 x 512 x 8 x 16 = 524,288; DEFAULT_LL128_BUFFSIZE
//                      120 x 640 x 8 x 8 = 4,915,200; DEFAULT_BUFFSIZE 1 << 22 = 4,194,304.
//   src/transport/p2p.cc  p2pRecvSetup: recvSize = sizeof(ncclRecvMem) + the three buffers (no P2P read on
//                      Hopper), ALIGN_SIZE(recvSize, CUDA_IPC_MIN = 2 MiB): 9,633,792 + header -> 10,485,760;
//                      p2pSendSetup: sendSize = sizeof(ncclSendMem) -> 2,097,152.
// NCCL issue #1685 (8 x H100, NCCL_DEBUG_SUBSYS=ALLOC) shows exactly these two allocation sizes, 10485760 and
// 2097152, and 32 p2p channels to one peer ("Channel 00/1 .. 31/1 : 0[0] -> 2[2] via P2P/CUMEM"); public
// H100 logs print "24 coll channels, 16 nvls channels, 32 p2p channels, 32 p2p channels per peer".
#include <catch2/catch.hpp>

#include "sim/engine/nccl_buffers.h"
#include "sim/predict/nccl_groups.h"
#include "sim/predict/step_prediction.h"

using namespace vramsim;

namespace {

constexpr Bytes kRecv = 5 * 2 * kMiB;          // 10,485,760: 9,633,792 B of buffers + header, in 2 MiB
constexpr Bytes kSend = 2 * kMiB;              // 2,097,152: ncclSendMem in 2 MiB
constexpr Bytes kRing = 24 * (kRecv + kSend);  // 24 channels x 12 MiB = 288 MiB = 301,989,888 B

TrainingOptions data_parallel(std::string scheme, int world) {
  TrainingOptions o;
  o.data_parallel.scheme = std::move(scheme);
  o.data_parallel.world_size = world;
  return o;
}

}  // namespace

TEST_CASE("NCCL buffers: a receive connection 10 MiB, a send connection 2 MiB, channels from public logs",
          "[quick][predict]") {
  CHECK(524'288 + 4'915'200 + 4'194'304 == 9'633'792);
  CHECK(nccl_connection_buffer_bytes() == 10'485'760);
  CHECK(nccl_send_connection_bytes() == 2'097'152);
  CHECK(nccl_ring_channels("h100") == 24);
  CHECK(nccl_ring_channels("h200") == 24);
  CHECK(nccl_p2p_channels_per_peer("h100") == 32);
  CHECK(nccl_ring_channels("a100") == 0);  // no public log used: not sized
  CHECK(nccl_p2p_channels_per_peer("") == 0);
}

TEST_CASE("NCCL groups: FSDP2 over 8 H100 is one ring, 24 channels x 12 MiB", "[quick][predict]") {
  const std::vector<NcclBillLine> lines =
      training_nccl_lines(data_parallel("fsdp2-full-shard", 8), 1, "h100");
  REQUIRE(lines.size() == 1);
  CHECK(lines[0].name == "NCCL dp");
  CHECK(lines[0].sized);
  CHECK(lines[0].size_bytes == kRing);
  CHECK(kRing == 301'989'888);
  CHECK(nccl_bytes(lines) == kRing);
  CHECK(training_nccl_lines(data_parallel("fsdp2-full-shard", 8), 1, "").empty());  // --capacity
  CHECK(training_nccl_lines(data_parallel("none", 1), 1, "h100").empty());
}

TEST_CASE("NCCL groups: TP 2 x FSDP 4 is two rings, and HSDP's replicate group across nodes is not sized",
          "[quick][predict]") {
  const std::vector<NcclBillLine> tp_dp = training_nccl_lines(data_parallel("fsdp-full-shard", 4), 2, "h100");
  REQUIRE(tp_dp.size() == 2);
  CHECK(tp_dp[0].name == "NCCL tp");
  CHECK(tp_dp[1].name == "NCCL dp");
  CHECK(nccl_bytes(tp_dp) == 2 * kRing);

  // 16 GPUs, 8 a node: hybrid-shard's shard group is a node's 8 ranks, its replicate group 2 ranks a node
  // apart (FSDP1 _init_intra_and_inter_node_groups).
  const std::vector<NcclBillLine> hsdp =
      training_nccl_lines(data_parallel("fsdp-hybrid-shard", 16), 1, "h100");
  REQUIRE(hsdp.size() == 2);
  CHECK(hsdp[0].name == "NCCL dp_shard");
  CHECK(hsdp[0].size_bytes == kRing);
  CHECK(hsdp[1].name == "NCCL dp_replicate");
  CHECK_FALSE(hsdp[1].sized);
  CHECK(hsdp[1].size_bytes == 0);
  CHECK_THAT(hsdp[1].source, Catch::Contains("spans nodes"));

  const std::vector<NcclBillLine> a100 = training_nccl_lines(data_parallel("ddp", 8), 1, "a100");
  REQUIRE(a100.size() == 1);
  CHECK_FALSE(a100[0].sized);
  CHECK_THAT(a100[0].source, Catch::Contains("no public NCCL log"));
}

TEST_CASE("NCCL groups: send/recv peers of expert and pipeline parallelism", "[quick][predict]") {
  // Expert parallelism over 8 H100: the all-to-all sends to and receives from the 7 others, 32 channels
  // each: 7 x 32 x (10 + 2) MiB = 2,688 MiB (NCCL issue #1685's user saw 1.06 -> 4.34 GB around the first
  // all_to_all_single, PyTorch's memory excluded).
  TrainingOptions ep = data_parallel("fsdp2-full-shard", 8);
  ep.moe.expert_parallel = 8;
  ep.moe.impl = MoeImpl::kTorchtitan;
  const std::vector<NcclBillLine> ep_lines = training_nccl_lines(ep, 1, "h100");
  REQUIRE(ep_lines.size() == 2);
  CHECK(ep_lines[1].name == "NCCL ep");
  CHECK(ep_lines[1].size_bytes == 7 * 32 * (kRecv + kSend));
  CHECK(ep_lines[1].size_bytes == 2688 * kMiB);

  // Four 1F1B stages on one node: the first stage talks to stage 1 only (activations out, gradients in),
  // a middle stage to two; the interleaved schedule wraps the last stage around to the first.
  TrainingOptions pp;
  pp.pipeline.stages = 4;
  pp.pipeline.stage = 0;
  CHECK(nccl_bytes(training_nccl_lines(pp, 1, "h100")) == 32 * (kRecv + kSend));
  pp.pipeline.stage = 1;
  CHECK(nccl_bytes(training_nccl_lines(pp, 1, "h100")) == 2 * 32 * (kRecv + kSend));
  pp.pipeline.stage = 0;
  pp.pipeline.schedule = PipelineSchedule::kInterleaved;
  CHECK(nccl_bytes(training_nccl_lines(pp, 1, "h100")) == 2 * 32 * (kRecv + kSend));
}

TEST_CASE("predict: NCCL's buffers leave the allocator less room, beside the CUDA context",
          "[quick][predict]") {
  RequestArgs a;
  a.model = "gpt2";
  a.batch = 1;
  a.seq = 128;
  a.steps = 1;
  a.gpu = "h100";
  a.world_size = 8;
  a.fsdp = "full-shard";
  a.fsdp2 = true;
  const Prediction p = predict(make_request(a));
  REQUIRE(p.nccl_lines.size() == 1);
  constexpr auto kRingBytes = static_cast<std::int64_t>(kRing);
  CHECK(p.nccl_bytes == kRingBytes);
  CHECK(p.bill.nccl == kRingBytes);
  CHECK(p.allocator_capacity_bytes == p.total_bytes - p.cuda_context_bytes - kRingBytes);
  CHECK(p.headroom_bytes == p.allocator_capacity_bytes - p.peak_reserved_bytes);
}

TEST_CASE("predict: --nccl-channels and --nccl-p2p-channels size the lines NCCL's public logs leave unsized",
          "[quick][predict]") {
  // What NCCL's INFO line on the user's machine prints ("16 coll channels, ..., 8 p2p channels per peer"):
  // a ring is then 16 x (10 + 2) MiB on any GPU.
  const NcclChannels read{16, 8};
  const std::vector<NcclBillLine> a100 = training_nccl_lines(data_parallel("ddp", 8), 1, "a100", read);
  REQUIRE(a100.size() == 1);
  CHECK(a100[0].sized);
  CHECK(a100[0].size_bytes == 16 * (kRecv + kSend));
  TrainingOptions pp;
  pp.pipeline.stages = 2;
  CHECK(nccl_bytes(training_nccl_lines(pp, 1, "a100", read)) == 8 * (kRecv + kSend));
  // Given on an H100, the user's counts replace the public logs' 24 and 32.
  CHECK(nccl_bytes(training_nccl_lines(data_parallel("ddp", 8), 1, "h100", read)) == 16 * (kRecv + kSend));

  RequestArgs a;
  a.model = "gpt2";
  a.gpu = "a100";
  a.world_size = 8;
  a.nccl_channels = 65;
  CHECK_THROWS_WITH(make_request(a), Catch::Contains("--nccl-channels: 65 is not in 1..64"));
  a.nccl_channels = 0;
  a.nccl_p2p_channels = -1;
  CHECK_THROWS_WITH(make_request(a), Catch::Contains("--nccl-p2p-channels: -1"));
  a.nccl_p2p_channels = 0;
  a.nccl_channels = 16;
  CHECK(make_request(a).nccl_channels.ring == 16);
  a.gpu.clear();
  a.capacity = "40GiB";
  CHECK_THROWS_WITH(make_request(a), Catch::Contains("--nccl-channels: needs --gpu"));
}
