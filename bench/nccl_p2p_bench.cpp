// hios-nccl-p2p-bench: what k tensors cost to move from rank 0 to rank 1 with ncclSend/ncclRecv,
// issued three ways, each captured into a CUDA Graph as the executor's passes are:
//   serial   k sends after one another on one stream and communicator (one link lane);
//   grouped  the k sends inside one ncclGroupStart/ncclGroupEnd (one kernel per side);
//   lanes    send i on communicator and stream i mod k (k link lanes).
// The question it answers: does a second message at the same point cost a whole NCCL message
// latency, and is grouping or concurrency cheaper? (docs/executor.md, "Link lanes").
//
//   mpirun -np 2 hios-nccl-p2p-bench [--bytes 65536,1048576,7340032] [--counts 1,2,4,8] [--iters 200]
//
// Prints one line per (bytes, k, way): median microseconds per graph launch (rank 0's stream,
// both ranks synchronised by an MPI barrier before each launch) and per tensor.
#include <cuda_runtime.h>
#include <mpi.h>
#include <nccl.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <string>
#include <vector>

namespace {

void check_cuda(cudaError_t e, const char* what) {
  if (e != cudaSuccess) {
    std::fprintf(stderr, "hios-nccl-p2p-bench: %s: %s\n", what, cudaGetErrorString(e));
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
}

void check_nccl(ncclResult_t r, const char* what) {
  if (r != ncclSuccess) {
    std::fprintf(stderr, "hios-nccl-p2p-bench: %s: %s\n", what, ncclGetErrorString(r));
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
}

std::vector<long> parse_list(const std::string& s) {
  std::vector<long> out;
  std::stringstream in(s);
  std::string item;
  while (std::getline(in, item, ',')) out.push_back(std::stol(item));
  return out;
}

struct Setup {
  int rank = 0;
  std::vector<ncclComm_t> comms;      // one per lane
  std::vector<cudaStream_t> streams;  // one per lane; stream 0 is the origin
};

// One graph: k transfers of `bytes` each from rank 0 to rank 1, issued `way`.
cudaGraphExec_t capture(Setup& s, const std::string& way, int k, size_t bytes, const std::vector<void*>& bufs) {
  cudaStream_t origin = s.streams[0];
  std::vector<cudaEvent_t> join(static_cast<size_t>(k));
  check_cuda(cudaStreamBeginCapture(origin, cudaStreamCaptureModeThreadLocal), "begin capture");
  auto p2p = [&](int i, ncclComm_t comm, cudaStream_t st) {
    if (s.rank == 0) {
      check_nccl(ncclSend(bufs[size_t(i)], bytes, ncclChar, 1, comm, st), "ncclSend");
    } else {
      check_nccl(ncclRecv(bufs[size_t(i)], bytes, ncclChar, 0, comm, st), "ncclRecv");
    }
  };
  if (way == "serial") {
    for (int i = 0; i < k; ++i) p2p(i, s.comms[0], origin);
  } else if (way == "grouped") {
    check_nccl(ncclGroupStart(), "ncclGroupStart");
    for (int i = 0; i < k; ++i) p2p(i, s.comms[0], origin);
    check_nccl(ncclGroupEnd(), "ncclGroupEnd");
  } else {  // lanes: stream i forks from the origin, sends on communicator i, joins back
    cudaEvent_t start;
    check_cuda(cudaEventCreateWithFlags(&start, cudaEventDisableTiming), "event");
    check_cuda(cudaEventRecord(start, origin), "record");
    for (int i = 1; i < k; ++i) check_cuda(cudaStreamWaitEvent(s.streams[size_t(i)], start, 0), "wait");
    for (int i = 0; i < k; ++i) p2p(i, s.comms[size_t(i)], s.streams[size_t(i)]);
    for (int i = 1; i < k; ++i) {
      check_cuda(cudaEventCreateWithFlags(&join[size_t(i)], cudaEventDisableTiming), "event");
      check_cuda(cudaEventRecord(join[size_t(i)], s.streams[size_t(i)]), "record");
      check_cuda(cudaStreamWaitEvent(origin, join[size_t(i)], 0), "wait");
    }
  }
  cudaGraph_t graph;
  check_cuda(cudaStreamEndCapture(origin, &graph), "end capture");
  cudaGraphExec_t exec;
  check_cuda(cudaGraphInstantiate(&exec, graph, 0), "instantiate");
  check_cuda(cudaGraphDestroy(graph), "graph destroy");
  return exec;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  Setup s;
  int size = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &s.rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  if (size != 2) {
    if (s.rank == 0) std::fprintf(stderr, "hios-nccl-p2p-bench: run it with mpirun -np 2 (got %d ranks)\n", size);
    MPI_Finalize();
    return 2;
  }
  std::vector<long> sizes{65536, 1048576, 7340032}, counts{1, 2, 4, 8};
  int iters = 200;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    if (a == "--bytes") sizes = parse_list(argv[i + 1]);
    else if (a == "--counts") counts = parse_list(argv[i + 1]);
    else if (a == "--iters") iters = std::atoi(argv[i + 1]);
    else {
      if (s.rank == 0) std::fprintf(stderr, "hios-nccl-p2p-bench: unknown option '%s'\n", a.c_str());
      MPI_Finalize();
      return 2;
    }
  }
  setenv("NCCL_NVLS_ENABLE", "0", 1);  // never NVLink multicast
  check_cuda(cudaSetDevice(s.rank), "cudaSetDevice");
  const int lanes = int(*std::max_element(counts.begin(), counts.end()));
  int greatest = 0, least = 0;
  check_cuda(cudaDeviceGetStreamPriorityRange(&least, &greatest), "priority range");
  for (int l = 0; l < lanes; ++l) {
    ncclUniqueId id{};
    if (s.rank == 0) check_nccl(ncclGetUniqueId(&id), "ncclGetUniqueId");
    MPI_Bcast(&id, sizeof id, MPI_BYTE, 0, MPI_COMM_WORLD);
    ncclComm_t c;
    check_nccl(ncclCommInitRank(&c, 2, id, s.rank), "ncclCommInitRank");
    s.comms.push_back(c);
    cudaStream_t st;
    check_cuda(cudaStreamCreateWithPriority(&st, cudaStreamNonBlocking, greatest), "stream");
    s.streams.push_back(st);
  }
  const size_t most = size_t(*std::max_element(sizes.begin(), sizes.end()));
  std::vector<void*> bufs(static_cast<size_t>(lanes));
  for (void*& b : bufs) check_cuda(cudaMalloc(&b, most), "cudaMalloc");
  // Connect every communicator outside a capture.
  for (int l = 0; l < lanes; ++l) {
    if (s.rank == 0) check_nccl(ncclSend(bufs[0], 256, ncclChar, 1, s.comms[size_t(l)], s.streams[0]), "warm-up send");
    else check_nccl(ncclRecv(bufs[0], 256, ncclChar, 0, s.comms[size_t(l)], s.streams[0]), "warm-up recv");
  }
  check_cuda(cudaStreamSynchronize(s.streams[0]), "warm-up");

  cudaEvent_t t0, t1;
  check_cuda(cudaEventCreate(&t0), "event");
  check_cuda(cudaEventCreate(&t1), "event");
  if (s.rank == 0) std::printf("%10s %3s %-8s %12s %12s\n", "bytes", "k", "way", "us/launch", "us/tensor");
  for (long bytes : sizes) {
    for (long k : counts) {
      for (const std::string way : {"serial", "grouped", "lanes"}) {
        cudaGraphExec_t exec = capture(s, way, int(k), size_t(bytes), bufs);
        std::vector<double> us;
        for (int it = 0; it < iters + 10; ++it) {
          MPI_Barrier(MPI_COMM_WORLD);
          check_cuda(cudaEventRecord(t0, s.streams[0]), "record");
          check_cuda(cudaGraphLaunch(exec, s.streams[0]), "launch");
          check_cuda(cudaEventRecord(t1, s.streams[0]), "record");
          check_cuda(cudaEventSynchronize(t1), "sync");
          float ms = 0;
          check_cuda(cudaEventElapsedTime(&ms, t0, t1), "elapsed");
          if (it >= 10) us.push_back(double(ms) * 1e3);
        }
        check_cuda(cudaGraphExecDestroy(exec), "exec destroy");
        // The receiver's time: its graph ends when the last tensor has arrived.
        double mine = median(us), theirs = 0;
        MPI_Reduce(&mine, &theirs, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
        if (s.rank == 0) {
          std::printf("%10ld %3ld %-8s %12.2f %12.2f\n", bytes, k, way.c_str(), theirs, theirs / double(k));
          std::fflush(stdout);
        }
      }
    }
  }
  for (void* b : bufs) cudaFree(b);
  for (ncclComm_t c : s.comms) ncclCommDestroy(c);
  MPI_Finalize();
  return 0;
}
