// exec::Transport "cuda-ipc": GPUs of one host move tensors straight into the
// receiver's buffer, and signal through flags in GPU memory. A transfer costs one push kernel on
// the sender and one one-thread flag kernel on the receiver, where NCCL's costs a kernel on each
// side that moves the data through NCCL's own buffers and its proxy's protocol.
//
// Protocol, per message (the k-th transfer from rank S to rank R in send order, which is the
// order of R's receives: program.hpp guarantees it):
//   R, at its receive:  ready[S->R][k] := 1 on S's GPU   (R's buffer may be written now)
//                       wait done[S->R][k] == 1 on R's GPU, then set it back to 0
//   S, at its send:     one push kernel: wait ready[S->R][k] == 1 on S's GPU, copy the tensor
//                       into R's buffer over NVLink (its blocks' stores), set ready back to 0 and
//                       done[S->R][k] := 1 on R's GPU once every block's stores are visible.
//                       (Buffers not 16-byte aligned: a wait kernel, cudaMemcpyAsync peer to
//                       peer, a set kernel.)
// Each flag is set by one side and reset by the side that waits on it, so the same values work
// in every replay of a captured pass. The receiver posts "ready" only when its program reaches
// the receive, so the copy never overwrites memory the receiver still uses for an earlier tensor
// of the arena: every send is a rendezvous, as the lowering already allows (send fences).
//
// Addresses. Each rank exports its flag buffer and, per program, the buffers it receives into
// (cudaIpcGetMemHandle on the allocation holding each, with the tensor's offset in it); senders
// open them once (cudaIpcOpenMemHandle). Ranks that are threads of one process (the in-process
// runner) use each other's pointers directly, with peer access enabled. Every load of a program
// exchanges the addresses again, so a load must be collective, as NCCL's is. A captured pass
// holds the peer's addresses of its load: a rank whose buffers move must be captured again on
// every rank (a whole-job load does that).
//
// The kernels are in signals.cu, which says why waits spin in kernels, not in stream memory
// operations.
#include <cuda.h>
#include <unistd.h>

#include <exception>
#include <map>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "executor/cuda/check.hpp"
#include "executor/cuda/cuda_backend.hpp"
#include "executor/cuda/kernels.hpp"
#include "executor/registry.hpp"
#include "executor/transport.hpp"

namespace hios::cuda {

namespace {

// Messages per ordered pair and program; flags for more would need a bigger flag buffer.
constexpr int kMaxMessages = 8192;

using GetAddressRange = CUresult(CUDAAPI*)(CUdeviceptr*, size_t*, CUdeviceptr);

template <typename Fn>
Fn driver_entry(const char* symbol, unsigned version) {
  void* fn = nullptr;
  cudaDriverEntryPointQueryResult found{};
  HIOS_CUDA_CHECK(cudaGetDriverEntryPointByVersion(symbol, &fn, version, cudaEnableDefault, &found));
  HIOS_CHECK(found == cudaDriverEntryPointSuccess && fn != nullptr,
             "cuda-ipc transport: the CUDA driver has no %s (version %u)", symbol, version);
  return reinterpret_cast<Fn>(fn);
}

void check_driver(CUresult r, const char* call) {
  HIOS_CHECK(r == CUDA_SUCCESS, "%s%scuda-ipc transport: %s failed with CUDA driver error %d",
             error_location().c_str(), error_location().empty() ? "" : ": ", call, int(r));
}

std::string to_hex(const void* p, size_t n) {
  static const char* digits = "0123456789abcdef";
  std::string s;
  for (size_t i = 0; i < n; ++i) {
    const unsigned char c = static_cast<const unsigned char*>(p)[i];
    s += digits[c >> 4];
    s += digits[c & 15];
  }
  return s;
}

cudaIpcMemHandle_t handle_from_hex(const std::string& s) {
  cudaIpcMemHandle_t h{};
  HIOS_CHECK(s.size() == 2 * sizeof h, "cuda-ipc transport: a malformed memory handle from a peer");
  for (size_t i = 0; i < sizeof h; ++i) h.reserved[i] = char(std::stoi(s.substr(2 * i, 2), nullptr, 16));
  return h;
}

class IpcTransport final : public exec::Transport {
 public:
  IpcTransport(exec::Comm& comm, CudaBackend& backend) : comm_(comm), backend_(backend) {
    set_error_location(comm.where());
    // The driver's call, through the runtime, so that nothing links libcuda.
    get_range_ = driver_entry<GetAddressRange>("cuMemGetAddressRange", 3020);
  }

  ~IpcTransport() override {
    // Unwinding from an error: a flag kernel may spin for a peer that will never signal, and
    // cudaFree would wait for it. Leave the mappings and the flags to the process's end, which
    // the error brings (the runner ends the whole job).
    if (std::uncaught_exceptions() > 0) return;
    (void)cudaSetDevice(backend_.device());
    (void)cudaDeviceSynchronize();
    for (auto& [key, m] : opened_) (void)cudaIpcCloseMemHandle(m.mapped);
    if (flags_) (void)cudaFree(flags_);
  }

  std::string name() const override { return "cuda-ipc"; }
  bool capturable() const override { return true; }

  void prepare(const Graph& g, const exec::RankProgram& p) override {
    g_ = &g;
    HIOS_CHECK(p.rank == comm_.rank() && p.num_ranks == comm_.size(),
               "cuda-ipc transport: program for rank %d of %d run by rank %d of %d", p.rank, p.num_ranks, comm_.rank(),
               comm_.size());
    HIOS_CUDA_CHECK(cudaSetDevice(backend_.device()));
    if (flags_ == nullptr) connect_peers();
    number_messages(p);
    exchange_receive_buffers(p);
  }

  void send(int node, int peer, int stream, int /*lane*/) override {
    const exec::TensorView t = backend_.tensor(node);
    const int k = slot(send_slot_, node, peer, "send");
    const auto it = remote_.find({peer, k});
    HIOS_CHECK(it != remote_.end(), "cuda-ipc transport: rank %d never announced a buffer for '%s'", peer,
               g_->nodes.at(size_t(node)).name.c_str());
    HIOS_CHECK(it->second.bytes == t.bytes,
               "cuda-ipc transport: '%s' is %zu bytes here but rank %d receives %zu bytes",
               g_->nodes.at(size_t(node)).name.c_str(), t.bytes, peer, it->second.bytes);
    cudaStream_t st = backend_.stream_handle(stream);
    if (aligned16(t.data) && aligned16(it->second.data)) {
      launch_push(t.data, it->second.data, t.bytes, local_flag(kReady, peer, k), peer_flag(peer, kDone, comm_.rank(), k),
                  local_flag(kBlocksDone, peer, k), st);
      HIOS_CUDA_CHECK_LAUNCH();
      return;
    }
    launch_wait_flag(local_flag(kReady, peer, k), st);
    HIOS_CUDA_CHECK_LAUNCH();
    HIOS_CUDA_CHECK(cudaMemcpyAsync(it->second.data, t.data, t.bytes, cudaMemcpyDefault, st));
    launch_set_flag(peer_flag(peer, kDone, comm_.rank(), k), st);
    HIOS_CUDA_CHECK_LAUNCH();
  }

  void recv(int node, int peer, int stream, int /*lane*/) override {
    const int k = slot(recv_slot_, node, peer, "receive");
    launch_set_then_wait_flag(peer_flag(peer, kReady, comm_.rank(), k), local_flag(kDone, peer, k),
                              backend_.stream_handle(stream));
    HIOS_CUDA_CHECK_LAUNCH();
  }

 private:
  enum Kind { kReady = 0, kDone = 1, kBlocksDone = 2, kKinds = 3 };
  static bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15) == 0; }
  struct Peer {
    unsigned int* flags = nullptr;  // the peer's flag buffer, mapped here
    bool same_process = false;
  };
  struct Remote {
    void* data = nullptr;
    size_t bytes = 0;
  };

  // Flag buffer layout: [kind][other rank][message]. ready[..][R][k] and the push's block count
  // live on the sender (R is the receiver), done[..][S][k] on the receiver (S is the sender).
  size_t flag_index(Kind kind, int other, int k) const {
    return (size_t(kind) * size_t(comm_.size()) + size_t(other)) * kMaxMessages + size_t(k);
  }
  unsigned int* local_flag(Kind kind, int other, int k) const { return flags_ + flag_index(kind, other, k); }
  unsigned int* peer_flag(int peer, Kind kind, int other, int k) const {
    return peers_.at(size_t(peer)).flags + flag_index(kind, other, k);
  }

  // Once per transport: the flag buffer, exported to every peer; the peers' buffers, mapped.
  void connect_peers() {
    const int size = comm_.size(), me = comm_.rank(), device = backend_.device();
    const size_t bytes = size_t(kKinds) * size_t(size) * kMaxMessages * sizeof(unsigned int);
    HIOS_CUDA_CHECK(load_signal_kernels());
    HIOS_CUDA_CHECK(cudaMalloc(&flags_, bytes));
    HIOS_CUDA_CHECK(cudaMemset(flags_, 0, bytes));
    HIOS_CUDA_CHECK(cudaDeviceSynchronize());
    cudaIpcMemHandle_t h{};
    HIOS_CUDA_CHECK(cudaIpcGetMemHandle(&h, flags_));
    std::ostringstream mine;
    // The host name goes last: it may hold spaces (the in-process runner's does).
    mine << getpid() << ' ' << device << ' ' << to_hex(&h, sizeof h) << ' ' << reinterpret_cast<uintptr_t>(flags_)
         << ' ' << comm_.hostname();
    const std::vector<std::string> all = comm_.allgather(mine.str());
    peers_.assign(size_t(size), Peer{});
    for (int r = 0; r < size; ++r) {
      std::istringstream in(all[size_t(r)]);
      std::string host, hex;
      long pid = 0;
      int dev = 0;
      uintptr_t ptr = 0;
      in >> pid >> dev >> hex >> ptr;
      std::getline(in >> std::ws, host);
      if (r == me) {
        peers_[size_t(r)].flags = flags_;
        peers_[size_t(r)].same_process = true;
        continue;
      }
      HIOS_CHECK(host == comm_.hostname(),
                 "%s: --transport cuda-ipc moves tensors between GPUs of one host, but rank %d is on host %s; use "
                 "--transport nccl",
                 comm_.where().c_str(), r, host.c_str());
      if (dev != device) {
        int can = 0;
        HIOS_CUDA_CHECK(cudaDeviceCanAccessPeer(&can, device, dev));
        HIOS_CHECK(can == 1, "%s: --transport cuda-ipc needs peer access from GPU %d to GPU %d, which this host lacks",
                   comm_.where().c_str(), device, dev);
      }
      Peer& peer = peers_[size_t(r)];
      peer.same_process = pid == long(getpid());
      if (peer.same_process) {
        if (dev != device) enable_peer_access(dev);
        peer.flags = reinterpret_cast<unsigned int*>(ptr);
      } else {
        peer.flags = static_cast<unsigned int*>(open_handle(r, ptr, hex));
      }
    }
  }

  void enable_peer_access(int dev) {
    const cudaError_t e = cudaDeviceEnablePeerAccess(dev, 0);
    if (e == cudaErrorPeerAccessAlreadyEnabled) {
      (void)cudaGetLastError();
      return;
    }
    HIOS_CUDA_CHECK(e);
  }

  // A peer allocation, mapped here once. Keyed by the peer's address of it: when the peer frees
  // an allocation and makes a new one at the same address (an arena that grew), the old
  // mapping is closed first, or the driver refuses the new handle as already mapped.
  void* open_handle(int peer, uintptr_t base, const std::string& hex) {
    auto it = opened_.find({peer, base});
    if (it != opened_.end()) {
      if (it->second.handle == hex) return it->second.mapped;
      HIOS_CUDA_CHECK(cudaIpcCloseMemHandle(it->second.mapped));
      opened_.erase(it);
    }
    void* p = nullptr;
    HIOS_CUDA_CHECK(cudaIpcOpenMemHandle(&p, handle_from_hex(hex), cudaIpcMemLazyEnablePeerAccess));
    opened_[{peer, base}] = Mapping{hex, p};
    return p;
  }

  // The k-th send to a peer and the k-th receive from it, in program order.
  void number_messages(const exec::RankProgram& p) {
    send_slot_.clear();
    recv_slot_.clear();
    std::vector<int> sent(size_t(comm_.size()), 0), received(size_t(comm_.size()), 0);
    for (const exec::Instr& in : p.instrs) {
      if (in.kind == exec::InstrKind::Send) send_slot_[{in.node, in.peer}] = sent[size_t(in.peer)]++;
      if (in.kind == exec::InstrKind::Recv) recv_slot_[{in.node, in.peer}] = received[size_t(in.peer)]++;
    }
    for (int r = 0; r < comm_.size(); ++r) {
      HIOS_CHECK(sent[size_t(r)] <= kMaxMessages && received[size_t(r)] <= kMaxMessages,
                 "cuda-ipc transport: more than %d transfers between ranks %d and %d in one pass", kMaxMessages,
                 comm_.rank(), r);
    }
  }

  // Collective: every rank announces where each tensor it receives lives; senders map them.
  void exchange_receive_buffers(const exec::RankProgram& p) {
    std::ostringstream mine;
    for (const exec::Instr& in : p.instrs) {
      if (in.kind != exec::InstrKind::Recv) continue;
      const exec::TensorView t = backend_.tensor(in.node);
      CUdeviceptr base = 0;
      size_t extent = 0;
      check_driver(get_range_(&base, &extent, reinterpret_cast<CUdeviceptr>(t.data)), "cuMemGetAddressRange");
      cudaIpcMemHandle_t h{};
      HIOS_CUDA_CHECK(cudaIpcGetMemHandle(&h, reinterpret_cast<void*>(base)));
      const size_t offset = size_t(reinterpret_cast<CUdeviceptr>(t.data) - base);
      mine << in.peer << ' ' << recv_slot_.at({in.node, in.peer}) << ' ' << t.bytes << ' ' << offset << ' '
           << to_hex(&h, sizeof h) << ' ' << base << '\n';
    }
    const std::vector<std::string> all = comm_.allgather(mine.str());
    remote_.clear();
    for (int dst = 0; dst < comm_.size(); ++dst) {
      std::istringstream in(all[size_t(dst)]);
      int src = 0, k = 0;
      size_t bytes = 0, offset = 0;
      std::string hex;
      uintptr_t base = 0;
      while (in >> src >> k >> bytes >> offset >> hex >> base) {
        if (src != comm_.rank()) continue;
        Remote r;
        r.bytes = bytes;
        r.data = (peers_.at(size_t(dst)).same_process ? reinterpret_cast<char*>(base)
                                                      : static_cast<char*>(open_handle(dst, base, hex))) +
                 offset;
        remote_[{dst, k}] = r;
      }
    }
  }

  int slot(const std::map<std::pair<int, int>, int>& slots, int node, int peer, const char* what) const {
    auto it = slots.find({node, peer});
    HIOS_CHECK(it != slots.end(), "cuda-ipc transport: %s of '%s' with rank %d, which the program never planned", what,
               g_->nodes.at(size_t(node)).name.c_str(), peer);
    return it->second;
  }

  exec::Comm& comm_;
  CudaBackend& backend_;
  const Graph* g_ = nullptr;
  GetAddressRange get_range_ = nullptr;
  unsigned int* flags_ = nullptr;
  std::vector<Peer> peers_;
  struct Mapping {
    std::string handle;
    void* mapped = nullptr;
  };
  std::map<std::pair<int, uintptr_t>, Mapping> opened_;  // (peer, its address) -> mapped here
  std::map<std::pair<int, int>, int> send_slot_, recv_slot_;  // (node, peer) -> message number
  std::map<std::pair<int, int>, Remote> remote_;              // (destination, message) -> its buffer
};

}  // namespace

}  // namespace hios::cuda

namespace hios::exec {

std::unique_ptr<Transport> make_ipc_transport(Comm& comm, Backend& backend) {
  auto* cuda = dynamic_cast<cuda::CudaBackend*>(&backend);
  HIOS_CHECK(cuda != nullptr, "the cuda-ipc transport moves GPU memory and needs the cuda backend, not '%s'",
             backend.name().c_str());
  return std::make_unique<cuda::IpcTransport>(comm, *cuda);
}

}  // namespace hios::exec
