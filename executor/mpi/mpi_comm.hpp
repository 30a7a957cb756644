// The MPI world as a Comm, and what the MPI transports need from it. Only executor/mpi/
// includes this header (and with it mpi.h).
#pragma once

#include <mpi.h>

#include <string>

#include "executor/comm.hpp"

namespace hios::exec {

class MpiComm final : public Comm {
 public:
  MpiComm();  // initialises MPI unless already initialised
  ~MpiComm() override;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  int local_rank() const override { return local_rank_; }
  int local_size() const override { return local_size_; }
  std::string hostname() const override { return host_; }
  std::string library() const override { return library_; }
  bool is_mpi() const override { return true; }

  void barrier() override;
  std::vector<std::string> allgather(const std::string& mine) override;
  void broadcast(void* data, size_t bytes, int root) override;
  [[noreturn]] void abort(int code) override;

  // A duplicate of MPI_COMM_WORLD reserved for tensor traffic, so that point-to-point
  // matching there never sees the bookkeeping collectives above.
  MPI_Comm data_comm() const { return data_; }
  int thread_level() const { return provided_; }

  // Throws hios::Error "<where>: <what> failed: <MPI error string>" unless rc is MPI_SUCCESS.
  void check(int rc, const char* what) const;

 private:
  bool owns_init_ = false;
  int provided_ = 0;
  int rank_ = 0, size_ = 1, local_rank_ = 0, local_size_ = 1;
  std::string host_, library_;
  MPI_Comm data_ = MPI_COMM_NULL;
};

}  // namespace hios::exec
