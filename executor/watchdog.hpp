// Watchdog: calls `on_timeout` from its own thread when it is still alive `seconds` after it
// was made. A rank stuck in a receive, a barrier or inside NCCL cannot notice that a peer is
// gone, so every driver that can hang (the MPI runner, the in-process bench, the tuner) keeps
// one, and its on_timeout ends the job (MPI_Abort, or _Exit for in-process ranks).
#pragma once

#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <thread>

namespace hios::exec {

class Watchdog {
 public:
  // seconds <= 0: no watchdog (nothing is started).
  Watchdog(double seconds, std::function<void()> on_timeout) {
    if (!(seconds > 0)) return;
    thread_ = std::thread([this, seconds, on_timeout = std::move(on_timeout)] {
      std::unique_lock<std::mutex> lock(mu_);
      const auto deadline = std::chrono::steady_clock::now() +
                            std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                                std::chrono::duration<double>(seconds));
      if (cv_.wait_until(lock, deadline, [this] { return done_; })) return;
      on_timeout();
    });
  }
  ~Watchdog() { stop(); }
  Watchdog(const Watchdog&) = delete;
  Watchdog& operator=(const Watchdog&) = delete;

  void stop() {
    if (!thread_.joinable()) return;
    {
      std::lock_guard<std::mutex> lock(mu_);
      done_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }

 private:
  std::thread thread_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;
};

}  // namespace hios::exec
