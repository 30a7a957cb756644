// exec::Comm for ranks that are threads of one process (in-process multi-GPU runs). Internal to
// inprocess/; CUDA-free.
#pragma once

#include <barrier>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "executor/comm.hpp"

namespace hios::cuda {

class ThreadComm final : public exec::Comm {
 public:
  // What the threads of one job share.
  struct Shared {
    explicit Shared(int n) : size(n), sync(n), strings(size_t(n)) {}
    int size;
    std::barrier<> sync;
    std::vector<std::string> strings;
    std::vector<char> bytes;
  };

  ThreadComm(Shared& s, int rank) : s_(s), rank_(rank) {}
  int rank() const override { return rank_; }
  int size() const override { return s_.size; }
  int local_rank() const override { return rank_; }
  int local_size() const override { return s_.size; }
  std::string hostname() const override { return "this process"; }
  std::string library() const override { return "none (threads of one process)"; }
  bool is_mpi() const override { return false; }
  void barrier() override { s_.sync.arrive_and_wait(); }
  std::vector<std::string> allgather(const std::string& mine) override {
    s_.strings[size_t(rank_)] = mine;
    s_.sync.arrive_and_wait();
    std::vector<std::string> all = s_.strings;
    s_.sync.arrive_and_wait();  // nobody overwrites the table before everyone has read it
    return all;
  }
  void broadcast(void* data, size_t bytes, int root) override {
    if (rank_ == root) s_.bytes.assign(static_cast<char*>(data), static_cast<char*>(data) + bytes);
    s_.sync.arrive_and_wait();
    if (rank_ != root) std::memcpy(data, s_.bytes.data(), bytes);
    s_.sync.arrive_and_wait();
  }
  [[noreturn]] void abort(int code) override { std::_Exit(code); }

 private:
  Shared& s_;
  int rank_;
};

}  // namespace hios::cuda
