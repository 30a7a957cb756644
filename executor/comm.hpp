// Comm: the job as the executor sees it (rank, size, host, collectives for bookkeeping). The MPI
// implementation lives in executor/mpi/ so that no other file includes mpi.h; without mpirun
// (or without MPI at all) the runner uses a single-process Comm.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

namespace hios::exec {

class Comm {
 public:
  virtual ~Comm() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // Rank among the processes on this host (MPI_Comm_split_type SHARED) and their number: the
  // default GPU of a rank is its local rank.
  virtual int local_rank() const = 0;
  virtual int local_size() const = 0;
  virtual std::string hostname() const = 0;
  virtual std::string library() const = 0;  // "Open MPI v4.1.4, ..." or "none (single process)"
  virtual bool is_mpi() const = 0;

  virtual void barrier() = 0;
  // Every rank's string, index = rank (for report lines, errors and verification maxima).
  virtual std::vector<std::string> allgather(const std::string& mine) = 0;
  // Root's bytes to every rank (e.g. an NCCL unique id).
  virtual void broadcast(void* data, size_t bytes, int root) = 0;
  // Ends the whole job as fast as the library allows (MPI_Abort), from any thread.
  [[noreturn]] virtual void abort(int code) = 0;

  // "rank R on host H", the prefix every rank-specific error message starts with.
  std::string where() const;
};

// A one-rank Comm that needs no MPI.
std::unique_ptr<Comm> make_self_comm();

// True when this process was started by an MPI launcher (mpirun / mpiexec / srun set their
// environment variables); then make_mpi_comm() must be used even for one rank.
bool launched_by_mpi();

// Initialises MPI (thread level MULTIPLE when available, so that the timeout watchdog may call
// MPI_Abort) and returns the world Comm; finalises MPI when the Comm is destroyed. Throws
// hios::Error when hios was built without MPI.
std::unique_ptr<Comm> make_mpi_comm();

// make_mpi_comm() under an MPI launcher, make_self_comm() otherwise.
std::unique_ptr<Comm> make_world_comm();

}  // namespace hios::exec
