// NCCL's connection buffers on one GPU, from NCCL's sources (NVIDIA/nccl, master of 2026-06): the bookkeeping
// that serving's bill (sim/serving/non_torch_memory.h) and training's (sim/predict/nccl_groups.h) share.
//
// A connection is one direction between two ranks on one channel (src/transport/p2p.cc, NVLink / PCIe peers
// on one node). Each side allocates its own structure, rounded to CUDA_IPC_MIN (2 MiB, src/include/comm.h;
// cuMem's granule too):
//   receiving side  p2pRecvSetup: sizeof(ncclRecvMem) + the buffers of every protocol, LL 512 KiB
//                   (DEFAULT_LL_BUFFSIZE: 8 lines x 512 threads x 8 steps x 16 B) + LL128 4,800 KiB
//                   (DEFAULT_LL128_BUFFSIZE: 120 x 640 threads x 8 steps x 8 B) + Simple 4 MiB
//                   (DEFAULT_BUFFSIZE), all in src/init.cc: 9,633,792 B and the header -> 10 MiB.
//   sending side    p2pSendSetup: sizeof(ncclSendMem) alone -> 2 MiB.
// P2P read mode moves the Simple buffer to the sender (sendSize += buffSizes[SIMPLE]); NCCL turns it on only
// between two compute-capability 8.0 GPUs over NVLink (src/graph/paths.cc ncclTopoCheckP2p), and it gives the
// same 12 MiB a pair (4 MiB + header -> 6 MiB sent, 5,312 KiB + header -> 6 MiB received). NCCL issue #1685's
// ALLOC log on 8 x H100 shows exactly these two sizes, 10485760 and 2097152 bytes.
//
// Which connections a communicator makes, and when (NCCL_RUNTIME_CONNECT=1, the default since NCCL 2.22, for
// cuMem-capable setups: src/init.cc only sets up channels; src/enqueue.cc connects an algorithm's channels
// at its first collective, and a send/recv peer's p2p channels at the first send/recv to it):
//   ring            per channel, a send connection to the next rank and a receive connection from the
//                   previous one: 12 MiB a channel.
//   send/recv       per peer, p2pnChannelsPerPeer channels of connector 1 (send[1] / recv[1],
//                   enqueue.cc p2pTaskAppend), each a 2 MiB send or a 10 MiB receive connection.
// Channel counts are NCCL's topology search's answer; they are taken from NCCL's own INFO lines where they
// are public, else 0 (the caller says the line is not sized).
#pragma once

#include <string>

#include "sim/core/types.h"

namespace vramsim {

// One receive connection's buffers on a GPU (header + LL + LL128 + Simple at NCCL's defaults, rounded to
// 2 MiB): 10,485,760 B.
Bytes nccl_connection_buffer_bytes();

// One send connection's structure on a GPU (ncclSendMem, rounded to 2 MiB): 2,097,152 B.
Bytes nccl_send_connection_bytes();

// One ring channel's buffers on a GPU: a receive connection from the previous rank and a send connection to
// the next, 10 MiB + 2 MiB = 12,582,912 B.
Bytes nccl_ring_channel_bytes();

// NCCL's ring ("coll") channels for `gpu` (a find_gpu name) where public NCCL logs state them: 24 on H100 /
// H200 SXM nodes ("24 coll channels, 16 nvls channels, 32 p2p channels, 32 p2p channels per peer"), else 0.
// Empty `gpu`: 0.
int nccl_ring_channels(const std::string& gpu);

// NCCL's p2p channels per peer (comm->p2pnChannelsPerPeer, src/graph/paths.cc) where public logs state it:
// 32 on H100 / H200 SXM nodes (the line above; issue #1685: "Channel 00/1 .. 31/1 : 0[0] -> 2[2]"), else 0.
int nccl_p2p_channels_per_peer(const std::string& gpu);

}  // namespace vramsim
