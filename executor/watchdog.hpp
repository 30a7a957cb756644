// Watchdog: calls `on_timeout` from its own thread when it is still alive `seconds` after it
// was made. A rank stuck in a receive, a barrier or inside NCCL cannot notice that a peer is
// gone, so every driver that can hang (the MPI runner, the in-process bench, the tuner) keeps
// one, and its on_timeout ends the job (MPI_Abort, or _Exit for in-process ranks).
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <string>
#include <mutex>
#include <thread>
#include <vector>

namespace hios::exec {

// A thread that calls tick() every `period` until tick returns false or the Ticker is
// destroyed or stopped (either waits for the thread). Every watchdog below runs on one.
class Ticker {
 public:
  Ticker() = default;
  ~Ticker() { stop(); }
  Ticker(const Ticker&) = delete;
  Ticker& operator=(const Ticker&) = delete;

  void start(std::chrono::steady_clock::duration period, std::function<bool()> tick) {
    thread_ = std::thread([this, period, tick = std::move(tick)] {
      std::unique_lock<std::mutex> lock(mu_);
      for (;;) {
        if (cv_.wait_for(lock, period, [this] { return done_; })) return;
        if (!tick()) return;
      }
    });
  }
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

class Watchdog {
 public:
  // seconds <= 0: no watchdog (nothing is started).
  Watchdog(double seconds, std::function<void()> on_timeout) {
    if (!(seconds > 0)) return;
    // One tick, at the deadline.
    ticker_.start(std::chrono::duration_cast<std::chrono::steady_clock::duration>(std::chrono::duration<double>(seconds)),
                  [on_timeout = std::move(on_timeout)] {
                    on_timeout();
                    return false;
                  });
  }
  void stop() { ticker_.stop(); }

 private:
  Ticker ticker_;
};

// Ends the job when a rank makes no progress for too long: a peer that was stopped (SIGSTOP)
// or hangs inside a library leaves the others blocked in a barrier or a receive, and only a
// clock can notice. Progress is whatever the driver calls beat() or pass_done() for (a phase
// begun, a pass finished). on_stall gets how long it waited and the limit it applied.
//   seconds > 0: that fixed limit; 0: off;
//   seconds < 0 (automatic): kStallBeforePasses until a pass time is known, then
//     max(kStallFloor, kStallPasses x the slowest pass seen), so a stopped peer of a job whose
//     passes take milliseconds ends it within seconds, and a slow job is never cut short.
constexpr double kStallBeforePasses = 300, kStallFloor = 10, kStallPasses = 50;

class StallWatchdog {
 public:
  StallWatchdog(double seconds, std::function<void(double, double)> on_stall) {
    if (seconds == 0 || !(seconds == seconds)) return;
    beat();
    ticker_.start(std::chrono::milliseconds(200), [this, seconds, on_stall = std::move(on_stall)] {
      const double idle = now_s() - last_.load();
      const double limit = limit_s(seconds);
      if (armed_.load() && idle > limit) {
        on_stall(idle, limit);
        return false;
      }
      return true;
    });
  }

  void beat() { last_ = now_s(); }
  // A pass ended: progress, and (while armed) a pass time the automatic limit scales with.
  void pass_done() {
    const double now = now_s();
    if (armed_.load()) slowest_ = std::max(slowest_.load(), now - last_.load());
    last_ = now;
  }
  double limit_s(double seconds) const {
    if (seconds > 0) return seconds;
    const double slowest = slowest_.load();
    return slowest > 0 ? std::max(kStallFloor, kStallPasses * slowest) : kStallBeforePasses;
  }
  // Armed only where every rank is busy with bounded work (passes). While one rank computes
  // a long reference alone, the others wait without progress of their own: not a stall.
  void arm(bool on) {
    beat();
    armed_ = on;
  }

 private:
  static double now_s() {
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
  }
  std::atomic<bool> armed_{false};
  std::atomic<double> last_{0};
  std::atomic<double> slowest_{0};  // longest armed interval ended by pass_done()
  Ticker ticker_;  // last: stopped before the members its thread reads go
};

}  // namespace hios::exec

namespace hios::exec {

class Comm;

// The thread that runs the job (main()'s) is noted at start; when a watchdog gives up, it prints
// that thread's call stack to stderr, so "timed out" comes with where the rank was stuck (in a
// cuDNN call, a stream synchronisation, a receive). Names need the executable's symbols exported
// (cli/CMakeLists.txt); glibc's backtrace, no debugger needed.
void note_main_thread();
// From another thread; waits at most a second for the noted thread to print. No-op if none noted.
void print_main_thread_stack();
// The same into a new file of its own, TIMEOUT_STACKS<rank>.txt (timeout_stack_pattern): its
// path, or "" when none was written (no noted thread, or the file already exists).
std::string write_main_thread_stack(int rank);
// "$TMPDIR/hios-timeout-<parent pid>-rank": the ranks of one job on one host share the parent.
std::string timeout_stack_pattern();
// A limit every rank has (--timeout) ran out: each rank writes its main thread's stack to its
// file, rank 0 prints the one line for the job (naming the files) and aborts it; another rank
// speaks only if rank 0 has not ended the job 3 s later.
void abort_on_shared_timeout(Comm& comm, const std::string& reason);
// What the main thread is doing at a finer grain than its stack tells (which candidate kernel a
// planning step is timing): printed with the stack. Truncated to 1 KiB; "" clears it.
void note_main_thread_activity(const std::string& what);

// Says which rank died. When a rank dies (killed, crashed), mpirun ends the job by signalling
// every other rank, and the survivors go without a word: the user sees only mpirun's own
// notice. Each rank therefore watches the processes of its peers on the same host (their pids
// are exchanged when the watch starts, a collective call) and, when one is gone, prints one line
// naming it and the phase, then aborts the job itself. A rank ended by SIGTERM also prints a
// line saying so. Peers on other hosts are not watched (a pid means nothing there).
// After this, a SIGTERM ends the rank without PeerWatch's line (a rank that aborts the job has
// said why; the SIGTERM that mpirun then sends back is no news). Async-signal-safe.
void silence_termination_line();

class PeerWatch {
 public:
  PeerWatch(Comm& comm, std::function<const char*()> phase);
  // Peers on this host whose process is stopped (SIGSTOP, a debugger), e.g.
  // "rank 1 (pid 4242 on this host) is stopped"; "" when none is known to be.
  std::string stopped_peers() const;

 private:
  struct Peer {
    int rank;
    long pid;
  };
  std::vector<Peer> peers_;
  Ticker ticker_;
};

}  // namespace hios::exec
