// exec::Transport over NCCL: ncclSend/ncclRecv on the program's per-peer comm streams, device
// buffer to device buffer, capturable into the backend's CUDA Graph.
//
// Communicators. One world communicator is created from an ncclUniqueId that rank 0 makes and
// Comm::broadcast (MPI_Bcast under mpirun) hands to everyone. Transfers do not run on it,
// though: NCCL orders every operation of one communicator in the order the host issued it,
// whatever the stream, and a rank issues a send to a peer as soon as its producer is launched
// but the receive from that peer only when a consumer needs it. Two ranks that each send first
// and receive later would then each wait, inside NCCL, for the other's receive: a deadlock
// once a tensor exceeds NCCL's buffering. So every direction (src -> dst) that carries
// tensors gets its own communicator, split from the world one without sharing its resources
// (a shared communicator would share the ordering, too). On each of them one side only sends
// and the other only receives, in the same order (program.hpp guarantees it), so the
// per-communicator order can never cross. A schedule with link lanes (meta.link_lanes) gives a
// direction one communicator per lane, so its lanes' transfers run at once.
#include <nccl.h>

#include <algorithm>
#include <cstdlib>
#include <map>
#include <set>
#include <exception>
#include <mutex>
#include <sstream>
#include <tuple>

#include "executor/cuda/check.hpp"
#include "executor/cuda/cuda_backend.hpp"
#include "executor/registry.hpp"
#include "executor/transport.hpp"

#define HIOS_NCCL_CHECK(call)                                                                          \
  do {                                                                                                 \
    ncclResult_t hios_nccl_res_ = (call);                                                              \
    if (hios_nccl_res_ != ncclSuccess) {                                                               \
      ::hios::cuda::fail_nccl(int(hios_nccl_res_), ncclGetErrorString(hios_nccl_res_), #call, __FILE__, \
                              __LINE__);                                                               \
    }                                                                                                  \
  } while (0)

namespace hios::cuda {

namespace {

class NcclTransport final : public exec::Transport {
 public:
  NcclTransport(exec::Comm& comm, CudaBackend& backend) : comm_(comm), backend_(backend) {
    set_error_location(comm.where());
    // NVLink multicast (NVLS) can take a shared host's GPUs out of service; this project never
    // uses it, whatever the environment says. Once per process: ranks may be threads, and
    // setenv is not thread-safe.
    static std::once_flag nvls_off;
    std::call_once(nvls_off, [] { setenv("NCCL_NVLS_ENABLE", "0", 1); });
  }

  ~NcclTransport() override {
    (void)cudaSetDevice(backend_.device());
    if (std::uncaught_exceptions() > 0) {
      // Unwinding from an error on this rank: its peers are elsewhere (in a receive, or the
      // next command), and ncclCommDestroy would wait for them; so would a synchronisation
      // behind a kernel that hung. Abort the communicators and let the error be reported,
      // which ends the job.
      for (auto& [pair, c] : dir_) (void)ncclCommAbort(c.comm);
      if (world_) (void)ncclCommAbort(world_);
      return;
    }
    (void)cudaDeviceSynchronize();
    for (auto& [pair, c] : dir_) (void)ncclCommDestroy(c.comm);
    if (world_) (void)ncclCommDestroy(world_);
  }

  std::string name() const override { return "nccl"; }
  std::string versions() const override {
    int v = 0;
    HIOS_NCCL_CHECK(ncclGetVersion(&v));
    return strprintf("NCCL %d.%d.%d", v / 10000, (v / 100) % 100, v % 100);
  }
  bool capturable() const override { return true; }

  // Collective. A rank session prepares many programs on one transport: the world
  // communicator is made once, and each prepare adds the directions its program needs that no
  // earlier program did, so communicators are never made twice.
  void prepare(const Graph& g, const exec::RankProgram& p) override {
    g_ = &g;
    const int rank = comm_.rank(), size = comm_.size();
    HIOS_CHECK(p.rank == rank && p.num_ranks == size,
               "nccl transport: program for rank %d of %d run by rank %d of %d", p.rank, p.num_ranks, rank, size);
    HIOS_CUDA_CHECK(cudaSetDevice(backend_.device()));

    if (world_ == nullptr) {
      ncclUniqueId id{};
      if (rank == 0) HIOS_NCCL_CHECK(ncclGetUniqueId(&id));
      comm_.broadcast(&id, sizeof id, 0);
      HIOS_NCCL_CHECK(ncclCommInitRank(&world_, size, id, rank));
    }

    // Every rank learns every lane of every direction that carries tensors (from each rank's
    // send streams), so all ranks make the same collective ncclCommSplit calls in the same order.
    std::string mine;
    for (const exec::StreamDesc& s : p.streams) {
      if (s.kind == exec::StreamKind::Send) mine += std::to_string(s.peer) + " " + std::to_string(s.lane) + " ";
    }
    const std::vector<std::string> all = comm_.allgather(mine);
    std::vector<Lane> dirs;
    for (int src = 0; src < int(all.size()); ++src) {
      std::istringstream in(all[size_t(src)]);
      int dst, lane;
      while (in >> dst >> lane) dirs.push_back({src, dst, lane});
    }
    std::sort(dirs.begin(), dirs.end());
    // Every rank knows the same `made_` list, so all skip and split alike.
    dirs.erase(std::remove_if(dirs.begin(), dirs.end(), [&](const auto& d) { return made_.count(d) != 0; }), dirs.end());
    for (size_t i = 0; i < dirs.size(); ++i) {
      const auto [src, dst, lane] = dirs[i];
      made_.insert(dirs[i]);
      const bool member = rank == src || rank == dst;
      ncclComm_t c = nullptr;
      HIOS_NCCL_CHECK(ncclCommSplit(world_, member ? int(i) : NCCL_SPLIT_NOCOLOR, rank, &c, nullptr));
      if (!member) continue;
      // Ranks of the split follow the key (the world rank): the lower world rank is 0.
      Dir d;
      d.comm = c;
      d.peer = (rank == src ? dst : src) < rank ? 0 : 1;
      dir_[dirs[i]] = d;
    }
    warm_up();
  }

  void send(int node, int peer, int stream, int lane) override {
    const exec::TensorView t = backend_.tensor(node);
    const Dir& d = direction({comm_.rank(), peer, lane}, node, "send");
    HIOS_NCCL_CHECK(ncclSend(t.data, t.bytes, ncclChar, d.peer, d.comm, backend_.stream_handle(stream)));
  }

  void recv(int node, int peer, int stream, int lane) override {
    const exec::TensorView t = backend_.tensor(node);
    const Dir& d = direction({peer, comm_.rank(), lane}, node, "receive");
    HIOS_NCCL_CHECK(ncclRecv(t.data, t.bytes, ncclChar, d.peer, d.comm, backend_.stream_handle(stream)));
  }

 private:
  using Lane = std::tuple<int, int, int>;  // (source rank, destination rank, lane)
  struct Dir {
    ncclComm_t comm = nullptr;
    int peer = 0;  // the other side's rank inside comm
  };

  const Dir& direction(const Lane& lane, int node, const char* what) const {
    auto it = dir_.find(lane);
    HIOS_CHECK(it != dir_.end(),
               "nccl transport: %s of '%s' between ranks %d -> %d on lane %d, which the program never planned", what,
               g_->nodes.at(size_t(node)).name.c_str(), std::get<0>(lane), std::get<1>(lane), std::get<2>(lane));
    return it->second;
  }

  // NCCL connects peers lazily, on their first transfer, and a connection cannot be made while
  // a CUDA Graph is being captured: move a few bytes over every direction first. Directions go
  // in the same global order on every rank, so the sends and receives pair up.
  void warm_up() {
    cudaStream_t st = backend_.stream_handle(0);
    void* buf = nullptr;
    HIOS_CUDA_CHECK(cudaMalloc(&buf, 256));
    for (auto& [lane, d] : dir_) {
      if (std::get<0>(lane) == comm_.rank()) {
        HIOS_NCCL_CHECK(ncclSend(buf, 256, ncclChar, d.peer, d.comm, st));
      } else {
        HIOS_NCCL_CHECK(ncclRecv(buf, 256, ncclChar, d.peer, d.comm, st));
      }
    }
    const cudaError_t err = cudaStreamSynchronize(st);
    (void)cudaFree(buf);
    HIOS_CUDA_CHECK(err);
  }

  exec::Comm& comm_;
  CudaBackend& backend_;
  const Graph* g_ = nullptr;
  ncclComm_t world_ = nullptr;
  std::map<Lane, Dir> dir_;
  std::set<Lane> made_;  // every lane of a direction split so far, member or not
};

}  // namespace

}  // namespace hios::cuda

namespace hios::exec {

std::unique_ptr<Transport> make_nccl_transport(Comm& comm, Backend& backend) {
  auto* cuda = dynamic_cast<cuda::CudaBackend*>(&backend);
  HIOS_CHECK(cuda != nullptr, "the nccl transport moves GPU memory and needs the cuda backend, not '%s'",
             backend.name().c_str());
  return std::make_unique<cuda::NcclTransport>(comm, *cuda);
}

}  // namespace hios::exec
