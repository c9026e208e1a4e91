// The NCCL communicators of a training job's process groups, as bill lines beside the CUDA context: memory
// NCCL allocates with the driver's own calls (cuMem / cudaMalloc, src/transport/p2p.cc), outside PyTorch's
// caching allocator, so the allocator has that much less room and nvidia-smi shows it.
//
// One rank's groups (torch.distributed: each group its own ProcessGroupNCCL and NCCL communicator; NCCL's
// ncclCommSplit shares no buffers unless asked, NCCL_COMM_SPLIT_SHARE_RESOURCES=0), in Megatron's rank order
// tp-cp-ep-dp-pp and torchtitan's mesh ["pp", "dp_replicate", "dp_shard", "cp", "tp"] (tp innermost):
//   tp            Megatron's tensor-model-parallel group / torchtitan's "tp" mesh: the layers' all-reduce,
//                 reduce-scatter and all-gather: its ring.
//   dp            DDP's group (the constructor's broadcast, the buckets' all-reduce), DeepSpeed ZeRO's,
//   FSDP's
//                 and FSDP2's (all-gather, reduce-scatter; with context parallelism torchtitan's dp_shard_cp,
//                 Megatron's data-parallel group with CP): its ring.
//   dp_shard,     FSDP / FSDP2 hybrid-shard: the shard group within a node and the replicate group across
//   dp_replicate  nodes (FSDP1 _init_intra_and_inter_node_groups, FSDP2's 2-D mesh): a ring each.
//   cp            ring attention's group: its ring (allgather rotation) or, with the alltoall rotation, one
//                 send peer and one receive peer (torch _attention.py _AllToAllRotater).
//   pp            the stages' send/recv (Megatron p2p_communication and torch.distributed.pipelining both
//                 batch_isend_irecv on the pipeline group): p2p connections to each neighbouring stage, both
//                 directions (activations forward, gradients back; the interleaved schedule wraps around).
//   ep            the experts' all-to-all (Megatron's MoEAlltoAllTokenDispatcher, torchtitan's
//                 ExpertParallel): p2p connections to every other rank of the group, both directions.
// Sized from sim/engine/nccl_buffers.h: a ring 12 MiB per channel, a send/recv peer 2 MiB (send) or 10 MiB
// (receive) per channel. Not sized, and said so: a group on a GPU whose NCCL channel counts are not public;
// a group spanning nodes (NCCL's network transport, net.cc: not modelled). Not counted: NVLS (NVLink SHARP)
// and tree buffers, which NCCL connects when its tuner picks them for a collective; the default world group
// where only a barrier uses it; Megatron's small groups (embedding, model-parallel gradient norm).
#pragma once

#include <string>
#include <vector>

#include "sim/core/types.h"
#include "sim/training/training_options.h"

namespace vramsim {

// One process group as one rank sees it.
struct NcclGroup {
  std::string name;        // the mesh dimension: "tp", "dp", "dp_shard", "dp_replicate", "cp", "pp", "ep"
  int ranks = 1;           // in the group
  int span_gpus = 1;       // consecutive GPUs its ranks lie on (stride x ranks): more than a node spans nodes
  bool ring = false;       // its collectives connect NCCL's ring
  int p2p_send_peers = 0;  // ranks this rank sends to with send/recv (all-to-all: every other)
  int p2p_recv_peers = 0;  // ranks it receives from
  std::string created_by;  // the library code that makes and uses it
};

// A bill line "NCCL <name>": its bytes on this GPU, or not sized (size 0) with the reason.
struct NcclBillLine {
  std::string name;  // "NCCL dp"
  Bytes size_bytes = 0;
  bool sized = false;
  std::string source;  // how it was sized (channels x connections), or why not, and the group's creator
};

// The channel counts NCCL's INFO line prints for the job's GPUs ("N coll channels, ..., M p2p channels per
// peer"), as the user read them (--nccl-channels, --nccl-p2p-channels); 0: from the public logs
// (nccl_buffers.h), not sized where none is known.
struct NcclChannels {
  int ring = 0;
  int p2p_per_peer = 0;
};
inline constexpr int kNcclMaxChannels = 64;  // MAXCHANNELS (src/include/device.h)

// The groups of one rank of the job `o` describes, `tensor_parallel` wide, at pipeline stage
// o.pipeline.stage. Groups of one rank (a degree of 1) have no communicator and are left out.
std::vector<NcclGroup> training_process_groups(const TrainingOptions& o, int tensor_parallel);

// `g`'s line on `gpu` (a find_gpu name) with `gpus_per_node` GPUs a node and the user's channel counts.
NcclBillLine nccl_group_line(const NcclGroup& g, const std::string& gpu, int gpus_per_node,
                             const NcclChannels& channels = {});

// Every group's line; empty without a GPU (--capacity: nothing outside the allocator is counted).
std::vector<NcclBillLine> training_nccl_lines(const TrainingOptions& o, int tensor_parallel,
                                              const std::string& gpu, const NcclChannels& channels = {});

// The sum of the sized lines.
Bytes nccl_bytes(const std::vector<NcclBillLine>& lines);

}  // namespace vramsim
