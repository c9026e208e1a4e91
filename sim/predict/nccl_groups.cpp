#include "sim/predict/nccl_groups.h"

#include <algorithm>

#include <fmt/format.h>

#include "sim/core/size_format.h"
#include "sim/engine/nccl_buffers.h"

namespace vramsim {
namespace {

NcclGroup ring_group(std::string name, int ranks, int span_gpus, std::string created_by) {
  return NcclGroup{std::move(name), ranks, span_gpus, true, 0, 0, std::move(created_by)};
}

NcclGroup p2p_group(std::string name, int ranks, int span_gpus, int peers, std::string created_by) {
  return NcclGroup{std::move(name), ranks, span_gpus, false, peers, peers, std::move(created_by)};
}

// The data-parallel groups: one (DDP, ZeRO, FSDP, FSDP2), or hybrid-shard's shard and replicate groups.
void add_data_parallel(const TrainingOptions& o, int tp, std::vector<NcclGroup>& groups) {
  const DataParallelOptions& d = o.data_parallel;
  if (d.scheme == "none" || d.world_size < 2) {
    return;
  }
  if (d.scheme.ends_with("hybrid-shard")) {
    // fsdp.cpp / fsdp2.cpp: a unit is sharded over min(world, gpus_per_node) ranks.
    const int shard = std::min(d.world_size, d.gpus_per_node);
    const int replicate = d.world_size / shard;
    const std::string by = d.scheme.starts_with("fsdp2-") ? "FSDP2's 2-D mesh (fully_shard)"
                                                          : "FSDP1 _init_intra_and_inter_node_groups";
    if (shard > 1) {
      groups.push_back(ring_group("dp_shard", shard, tp * shard, by + ": all-gather, reduce-scatter"));
    }
    if (replicate > 1) {
      groups.push_back(ring_group("dp_replicate", replicate, tp * d.world_size, by + ": all-reduce"));
    }
    return;
  }
  std::string by = "FSDP's process group: all-gather, reduce-scatter";
  if (d.scheme == "ddp") {
    by = "DistributedDataParallel: the constructor's broadcast, the buckets' all-reduce";
  } else if (d.scheme.starts_with("zero")) {
    by = "DeepSpeed ZeRO's data-parallel group: gradients reduced, parameters gathered";
  } else if (d.scheme.starts_with("fsdp2-")) {
    by = "fully_shard's mesh: all-gather, reduce-scatter";
  }
  groups.push_back(ring_group("dp", d.world_size, tp * d.world_size, by));
}

// The pipeline group: send/recv with the neighbouring stages of stage `s` of `stages`.
int pipeline_neighbours(const PipelineOptions& pp) {
  if (pp.stages == 2) {
    return 1;
  }
  if (pp.schedule == PipelineSchedule::kInterleaved) {  // chunk v's last stage feeds chunk v+1's first
    return 2;
  }
  return pp.stage == 0 || pp.stage == pp.stages - 1 ? 1 : 2;
}

}  // namespace

std::vector<NcclGroup> training_process_groups(const TrainingOptions& o, int tensor_parallel) {
  std::vector<NcclGroup> groups;
  const int tp = tensor_parallel;
  if (tp > 1) {
    groups.push_back(ring_group("tp", tp, tp,
                                "Megatron's tensor-model-parallel group / torchtitan's tp mesh: the layers' "
                                "all-reduce, reduce-scatter, all-gather"));
  }
  const int cp = o.context_parallel.degree;
  if (cp > 1) {
    groups.push_back(
        o.context_parallel.rotate == CpRotate::kAllGather
            ? ring_group("cp", cp, tp * cp, "context_parallel ring attention: _AllGatherRotater")
            : p2p_group("cp", cp, tp * cp, 1, "context_parallel ring attention: _AllToAllRotater"));
  }
  add_data_parallel(o, tp, groups);
  const int ep = o.moe.expert_parallel;
  if (ep > 1) {
    // Megatron's expert groups lie expert-tensor-parallel (default: tp) ranks apart; torchtitan's EP borrows
    // the innermost dimensions (its expert_tensor_parallel_degree 1 borrows tp too).
    const int span = o.moe.impl == MoeImpl::kTorchtitan ? ep : tp * ep;
    groups.push_back(
        p2p_group("ep", ep, span, ep - 1, "the experts' all-to-all (token dispatch and combine)"));
  }
  const PipelineOptions& pp = o.pipeline;
  if (pp.stages > 1) {
    groups.push_back(p2p_group("pp", pp.stages, tp * o.data_parallel.world_size * pp.stages,
                               pipeline_neighbours(pp),
                               "the stages' batch_isend_irecv (Megatron p2p_communication, "
                               "torch.distributed.pipelining)"));
  }
  return groups;
}

NcclBillLine nccl_group_line(const NcclGroup& g, const std::string& gpu, int gpus_per_node,
                             const NcclChannels& channels) {
  NcclBillLine line{"NCCL " + g.name, 0, false, ""};
  const std::string who = fmt::format("{} ranks; {}", g.ranks, g.created_by);
  if (g.span_gpus > gpus_per_node) {
    line.source = fmt::format(
        "not sized: spans nodes ({} GPUs, {} a node), NCCL's network transport is not "
        "modelled (vramsim); {}",
        g.span_gpus, gpus_per_node, who);
    return line;
  }
  const int ring = !g.ring ? 0 : channels.ring > 0 ? channels.ring : nccl_ring_channels(gpu);
  const int per_peer = g.ring                      ? 0
                       : channels.p2p_per_peer > 0 ? channels.p2p_per_peer
                                                   : nccl_p2p_channels_per_peer(gpu);
  if ((g.ring && ring == 0) || (!g.ring && per_peer == 0)) {
    line.source = fmt::format("not sized: no public NCCL log gives the channels on {} ({}); {}", gpu,
                              g.ring ? "--nccl-channels" : "--nccl-p2p-channels", who);
    return line;
  }
  const Bytes recv = nccl_connection_buffer_bytes();
  const Bytes send = nccl_send_connection_bytes();
  if (g.ring) {
    line.size_bytes = static_cast<Bytes>(ring) * nccl_ring_channel_bytes();
    line.source = fmt::format("ring: {} channels{} x ({} received + {} sent); {}", ring,
                              channels.ring > 0 ? " (--nccl-channels)" : "", format_bytes_short(recv),
                              format_bytes_short(send), who);
  } else {
    line.size_bytes = static_cast<Bytes>(per_peer) * (static_cast<Bytes>(g.p2p_send_peers) * send +
                                                      static_cast<Bytes>(g.p2p_recv_peers) * recv);
    line.source =
        fmt::format("send/recv: {} channels a peer{} x ({} peer{} x {} received + {} x {} sent); {}",
                    per_peer, channels.p2p_per_peer > 0 ? " (--nccl-p2p-channels)" : "", g.p2p_recv_peers,
                    g.p2p_recv_peers == 1 ? "" : "s", format_bytes_short(recv), g.p2p_send_peers,
                    format_bytes_short(send), who);
  }
  line.sized = true;
  return line;
}

std::vector<NcclBillLine> training_nccl_lines(const TrainingOptions& o, int tensor_parallel,
                                              const std::string& gpu, const NcclChannels& channels) {
  std::vector<NcclBillLine> lines;
  if (gpu.empty()) {
    return lines;
  }
  for (const NcclGroup& g : training_process_groups(o, tensor_parallel)) {
    lines.push_back(nccl_group_line(g, gpu, o.data_parallel.gpus_per_node, channels));
  }
  return lines;
}

Bytes nccl_bytes(const std::vector<NcclBillLine>& lines) {
  Bytes sum = 0;
  for (const NcclBillLine& l : lines) {
    sum += l.size_bytes;
  }
  return sum;
}

}  // namespace vramsim
