// The MPI transports. Both match messages per (source, destination) pair in order on one tag
// of a private communicator: the lowering guarantees the receiver posts in send order, and MPI
// guarantees messages between two ranks on one tag and communicator never overtake.
//
// mpi-host: host-memory tensors (the CPU backend) go straight from their buffers; device
// tensors are copied to a page-locked staging buffer on the send stream, which the host then
// waits for before MPI_Isend (the stream already waits on the producer, so the copy reads the
// finished tensor). A receive is a blocking MPI_Recv into staging followed by an asynchronous
// copy to the device on the receive stream.
//
// mpi-cuda-aware: device pointers go to MPI directly, after the host waits for the send
// stream; only when the MPI library says it can (MPIX_Query_cuda_support() == 1).
#include <algorithm>
#include <climits>
#include <map>
#include <vector>

#include "executor/mpi/mpi_comm.hpp"  // mpi.h, which must come before mpi-ext.h

#if __has_include(<mpi-ext.h>)
#include <mpi-ext.h>
#endif
#include "executor/registry.hpp"
#include "executor/transport.hpp"
#include "graph/error.hpp"

namespace hios::exec {

namespace {

constexpr int kTag = 7;

class MpiTransport final : public Transport {
 public:
  MpiTransport(MpiComm& comm, Backend& backend, bool cuda_aware)
      : comm_(comm), backend_(backend), cuda_aware_(cuda_aware) {}

  std::string name() const override { return cuda_aware_ ? "mpi-cuda-aware" : "mpi-host"; }
  std::string versions() const override { return comm_.library(); }

  void prepare(const Graph& g, const RankProgram& p) override {
    g_ = &g;
    for (const Instr& in : p.instrs) {
      if (in.kind != InstrKind::Send && in.kind != InstrKind::Recv) continue;
      HIOS_CHECK(in.bytes <= INT_MAX, "%s: tensor '%s' has %lld bytes, more than one MPI message carries",
                 comm_.where().c_str(), g.nodes[in.node].name.c_str(), (long long)in.bytes);
      TensorView t = backend_.tensor(in.node);
      HIOS_CHECK(static_cast<int64_t>(t.bytes) == in.bytes, "%s: tensor '%s' is %zu bytes on the backend, %lld in the program",
                 comm_.where().c_str(), g.nodes[in.node].name.c_str(), t.bytes, (long long)in.bytes);
      if (cuda_aware_) {
        HIOS_CHECK(t.memory == MemoryKind::Device,
                   "%s: --transport mpi-cuda-aware moves device memory, but the %s backend keeps '%s' in host "
                   "memory; use --transport mpi-host",
                   comm_.where().c_str(), backend_.name().c_str(), g.nodes[in.node].name.c_str());
      } else if (t.memory == MemoryKind::Device) {
        auto key = std::make_pair(in.node, in.kind == InstrKind::Send ? in.peer : -1 - in.peer);
        if (!staging_.count(key)) staging_[key] = backend_.alloc_host(static_cast<size_t>(in.bytes));
      }
    }
  }

  void send(int node, int peer, int stream, int /*lane: one tag, matched in send order*/) override {
    TensorView t = backend_.tensor(node);
    void* buf = t.data;
    if (t.memory == MemoryKind::Device && !cuda_aware_) {
      buf = staging_.at({node, peer}).get();
      backend_.copy_to_host(node, buf, stream);
    }
    if (t.memory == MemoryKind::Device) backend_.sync_stream(stream);
    MPI_Request req;
    comm_.check(MPI_Isend(buf, static_cast<int>(t.bytes), MPI_BYTE, peer, kTag, comm_.data_comm(), &req),
                what("MPI_Isend", node, peer).c_str());
    pending_[peer].push_back(req);
  }

  void complete_sends(int peer, int count) override {
    std::vector<MPI_Request>& reqs = pending_[peer];
    size_t& done = completed_[peer];
    const size_t upto = std::min(reqs.size(), static_cast<size_t>(std::max(count, 0)));
    if (upto <= done) return;
    comm_.check(MPI_Waitall(static_cast<int>(upto - done), reqs.data() + done, MPI_STATUSES_IGNORE),
                what("MPI_Waitall of the sends", -1, peer).c_str());
    done = upto;
  }

  void recv(int node, int peer, int stream, int /*lane*/) override {
    TensorView t = backend_.tensor(node);
    void* buf = t.data;
    const bool staged = t.memory == MemoryKind::Device && !cuda_aware_;
    if (staged) buf = staging_.at({node, -1 - peer}).get();
    MPI_Status st;
    comm_.check(MPI_Recv(buf, static_cast<int>(t.bytes), MPI_BYTE, peer, kTag, comm_.data_comm(), &st),
                what("MPI_Recv", node, peer).c_str());
    int count = 0;
    MPI_Get_count(&st, MPI_BYTE, &count);
    HIOS_CHECK(static_cast<size_t>(count) == t.bytes,
               "%s: received %d bytes from rank %d for '%s', expected %zu (the ranks disagree on the schedule)",
               comm_.where().c_str(), count, peer, g_->nodes[node].name.c_str(), t.bytes);
    if (staged) backend_.copy_from_host(node, buf, stream);
  }

  void end_pass() override {
    for (auto& [peer, reqs] : pending_) {
      size_t& done = completed_[peer];
      if (done < reqs.size()) {
        comm_.check(MPI_Waitall(static_cast<int>(reqs.size() - done), reqs.data() + done, MPI_STATUSES_IGNORE),
                    "MPI_Waitall");
      }
      reqs.clear();
      done = 0;
    }
  }

 private:
  std::string what(const char* call, int node, int peer) const {
    if (node < 0) return strprintf("%s with rank %d", call, peer);
    return strprintf("%s of '%s' with rank %d", call, g_->nodes[node].name.c_str(), peer);
  }

  MpiComm& comm_;
  Backend& backend_;
  bool cuda_aware_;
  const Graph* g_ = nullptr;
  // (tensor, peer) for sends, (tensor, -1 - peer) for receives: one page-locked buffer each.
  std::map<std::pair<int, int>, HostBuffer> staging_;
  // Per destination: this pass's non-blocking sends in order, and how many of them are complete.
  std::map<int, std::vector<MPI_Request>> pending_;
  std::map<int, size_t> completed_;
};

MpiComm& mpi_comm_of(Comm& comm, const char* transport) {
  auto* m = dynamic_cast<MpiComm*>(&comm);
  HIOS_CHECK(m != nullptr, "--transport %s needs an MPI job (start hios with mpirun)", transport);
  return *m;
}

// 1 when the library was built CUDA-aware and the runtime confirms it, else 0; `why` says why not.
int cuda_support(std::string& why) {
#if defined(MPIX_CUDA_AWARE_SUPPORT) && MPIX_CUDA_AWARE_SUPPORT
  int ok = MPIX_Query_cuda_support();
  if (!ok) why = "MPIX_Query_cuda_support() returned 0 (the MPI library was not started with CUDA support)";
  return ok;
#elif defined(MPIX_CUDA_AWARE_SUPPORT)
  why = "this MPI library was built without CUDA support (MPIX_CUDA_AWARE_SUPPORT is 0)";
  return 0;
#else
  why = "this MPI library has no MPIX_Query_cuda_support()";
  return 0;
#endif
}

}  // namespace

void register_mpi_transports() {
  TransportEntry host;
  host.name = "mpi-host";
  host.description = "MPI point-to-point through host memory (page-locked staging for device tensors)";
  host.make = [](Comm& comm, Backend& backend) -> std::unique_ptr<Transport> {
    return std::make_unique<MpiTransport>(mpi_comm_of(comm, "mpi-host"), backend, false);
  };
  register_transport(std::move(host));

  TransportEntry aware;
  aware.name = "mpi-cuda-aware";
  aware.description = "MPI point-to-point on device pointers (needs a CUDA-aware MPI)";
  aware.make = [](Comm& comm, Backend& backend) -> std::unique_ptr<Transport> {
    MpiComm& m = mpi_comm_of(comm, "mpi-cuda-aware");
    std::string why;
    HIOS_CHECK(cuda_support(why) == 1, "%s: --transport mpi-cuda-aware is unavailable: %s; use --transport mpi-host%s",
               m.where().c_str(), why.c_str(), backend.name() == "cpu" ? "" : " or nccl");
    return std::make_unique<MpiTransport>(m, backend, true);
  };
  register_transport(std::move(aware));
}

}  // namespace hios::exec
