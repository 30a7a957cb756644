// Transport: moves a tensor between two ranks on a comm stream. Kinds:
//   "mpi-host"        stages through host memory (page-locked for GPU backends); always
//                     available with MPI; the CPU backend sends straight from its buffers.
//   "mpi-cuda-aware"  hands device pointers to MPI; only when MPIX_Query_cuda_support() says 1.
//   "nccl"            ncclSend/ncclRecv on the comm stream (executor/cuda/, CUDA builds only).
//   "cuda-ipc"        GPUs of one host: a peer-to-peer copy into the receiver's buffer, signalled
//                     by flags in GPU memory (executor/cuda/ipc_transport.cpp, CUDA builds only).
//
// Contract: the runner calls prepare() after Backend::prepare() (again after each new program
// of a rank session: connections made for earlier programs are kept), then per pass send/recv
// in program order (the send stream already waits on the producer, see program.hpp) and
// end_pass() after the last instruction of a pass, before the host synchronises the backend.
// Per (src, dst) pair Recvs come in exactly the order of the Sends, so in-order matching
// (NCCL, MPI with one tag) always pairs the right tensors.
#pragma once

#include <string>

#include "executor/backend.hpp"
#include "executor/comm.hpp"
#include "executor/program.hpp"
#include "graph/graph.hpp"

namespace hios::exec {

class Transport {
 public:
  virtual ~Transport() = default;
  virtual std::string name() const = 0;
  virtual std::string versions() const { return ""; }  // e.g. "NCCL 2.23.4"

  virtual void prepare(const Graph& g, const RankProgram& p) = 0;
  // `lane` is the stream's lane (StreamDesc::lane): a transport with ordered channels keeps one
  // per (source, destination, lane); one that matches a pair's messages in order across lanes
  // (MPI with one tag) may ignore it, since the runner issues them in the pair's send order.
  virtual void send(int node, int peer, int stream, int lane) = 0;
  virtual void recv(int node, int peer, int stream, int lane) = 0;
  // Completes the first `count` sends of this pass to `peer` where they are non-blocking on the
  // host (MPI): a send fence (program.hpp, send_fence_stages) gives their memory to later
  // tensors next. Stream-ordered transports (NCCL) need nothing: the fence is a stream wait.
  virtual void complete_sends(int peer, int count) {
    (void)peer;
    (void)count;
  }
  // Completes host-side work left by the pass (e.g. waits for non-blocking MPI sends).
  virtual void end_pass() {}
  // Whether send/recv may be issued inside Backend::begin_capture()/end_capture().
  virtual bool capturable() const { return false; }
};

}  // namespace hios::exec
