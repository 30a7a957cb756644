#include "executor/comm.hpp"

#include <unistd.h>

#include <cstdlib>
#include <cstring>

#include "graph/error.hpp"

namespace hios::exec {

std::string Comm::where() const { return strprintf("rank %d on host %s", rank(), hostname().c_str()); }

namespace {

std::string local_hostname() {
  char buf[256] = {0};
  if (gethostname(buf, sizeof(buf) - 1) != 0) return "unknown";
  return buf;
}

class SelfComm final : public Comm {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  int local_rank() const override { return 0; }
  int local_size() const override { return 1; }
  std::string hostname() const override { return host_; }
  std::string library() const override { return "none (single process)"; }
  bool is_mpi() const override { return false; }
  void barrier() override {}
  std::vector<std::string> allgather(const std::string& mine) override { return {mine}; }
  void broadcast(void*, size_t, int root) override {
    HIOS_CHECK(root == 0, "broadcast from rank %d in a one-rank job", root);
  }
  [[noreturn]] void abort(int code) override { std::_Exit(code); }

 private:
  std::string host_ = local_hostname();
};

}  // namespace

std::unique_ptr<Comm> make_self_comm() { return std::make_unique<SelfComm>(); }

bool launched_by_mpi() {
  // Open MPI, PMIx-based launchers (Open MPI 5, Slurm), MPICH/Hydra and Intel MPI.
  for (const char* var : {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_RANK", "PMI_SIZE", "MPI_LOCALNRANKS"}) {
    if (std::getenv(var)) return true;
  }
  return false;
}

#ifndef HIOS_EXECUTOR_WITH_MPI
std::unique_ptr<Comm> make_mpi_comm() {
  throw_error("this hios was built without MPI, so it cannot run under mpirun (configure with -DHIOS_MPI=ON)");
}
#endif

std::unique_ptr<Comm> make_world_comm() { return launched_by_mpi() ? make_mpi_comm() : make_self_comm(); }

}  // namespace hios::exec
