#include "executor/watchdog.hpp"

#include <execinfo.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <thread>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <mutex>
#include <sstream>
#include <string>
#include <vector>

#include "executor/comm.hpp"
#include "graph/error.hpp"

namespace hios::exec {

namespace {

// The SIGTERM line, composed before any signal can come: a handler may only write(2).
char g_term_line[512];
std::atomic<size_t> g_term_len{0};
struct sigaction g_old_term {};

extern "C" void say_terminated_and_reraise(int sig) {
  const size_t len = g_term_len.load();
  if (len > 0) {
    ssize_t ignored = ::write(STDERR_FILENO, g_term_line, len);
    (void)ignored;
  }
  ::sigaction(sig, &g_old_term, nullptr);
  ::raise(sig);
}

pthread_t g_main_thread{};
char g_activity[1024];
std::atomic<size_t> g_activity_len{0};
std::atomic<bool> g_main_noted{false};
std::atomic<bool> g_stack_printed{false};
std::atomic<int> g_stack_fd{STDERR_FILENO};  // where the handler writes: stderr or a stack file

extern "C" void print_own_stack(int) {
  const int fd = g_stack_fd.load();
  static const char head[] = "hios: the rank's main thread was here:\n";
  ssize_t ignored = ::write(fd, head, sizeof head - 1);
  (void)ignored;
  void* frames[64];
  const int n = ::backtrace(frames, 64);
  ::backtrace_symbols_fd(frames, n, fd);
  const size_t len = g_activity_len.load();
  if (len > 0) {
    static const char doing[] = "hios: doing: ";
    ignored = ::write(fd, doing, sizeof doing - 1);
    ignored = ::write(fd, g_activity, len);
    ignored = ::write(fd, "\n", 1);
  }
  g_stack_printed = true;
}



}  // namespace

void silence_termination_line() { g_term_len = 0; }

void note_main_thread() {
  g_main_thread = ::pthread_self();
  // backtrace() loads its unwinder on first use (a malloc): do that now, not in the handler.
  void* frame[1];
  (void)::backtrace(frame, 1);
  struct sigaction sa {};
  sa.sa_handler = print_own_stack;
  ::sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  ::sigaction(SIGURG, &sa, nullptr);
  g_main_noted = true;
}

void note_main_thread_activity(const std::string& what) {
  // Written only by the main thread, read by its own signal handler: no race to guard.
  g_activity_len = 0;
  const size_t n = std::min(what.size(), sizeof g_activity);
  std::memcpy(g_activity, what.data(), n);
  g_activity_len = n;
}

void print_main_thread_stack() {
  if (!g_main_noted.load() || ::pthread_equal(g_main_thread, ::pthread_self())) return;
  g_stack_printed = false;
  if (::pthread_kill(g_main_thread, SIGURG) != 0) return;
  for (int i = 0; i < 100 && !g_stack_printed.load(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
}

std::string timeout_stack_pattern() {
  const char* tmp = std::getenv("TMPDIR");
  const std::string dir = tmp && *tmp ? tmp : "/tmp";
  // The parent (mpirun, or its daemon on another host) is shared by the job's ranks on a host.
  return dir + "/hios-timeout-" + std::to_string(long(::getppid())) + "-rank";
}

std::string write_main_thread_stack(int rank) {
  if (!g_main_noted.load() || ::pthread_equal(g_main_thread, ::pthread_self())) return "";
  const std::string path = timeout_stack_pattern() + std::to_string(rank) + ".txt";
  // A new file only: an existing one (or a symlink planted there) is left alone.
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) return "";
  g_stack_fd = fd;
  print_main_thread_stack();
  const bool printed = g_stack_printed.load();
  g_stack_fd = STDERR_FILENO;
  ::close(fd);
  return printed ? path : "";
}

void abort_on_shared_timeout(Comm& comm, const std::string& reason) {
  const std::string stack = write_main_thread_stack(comm.rank());
  if (comm.rank() != 0) {
    silence_termination_line();  // rank 0's line says why mpirun ends this rank
    // Every rank's watchdog fires within moments of the others' (the same option, started
    // together): rank 0 speaks for the job and its abort ends this rank too. A rank 0 that is
    // gone or cannot abort leaves this one to say it.
    std::this_thread::sleep_for(std::chrono::seconds(5));  // rank 0 waits 2 s before it aborts
  } else if (comm.size() > 1) {
    // The others' watchdogs must fire, and silence their own SIGTERM line, before this abort
    // ends them: on a loaded 2-core machine one fired after rank 0 had aborted, and printed a
    // second line for the one error every rank shares.
    std::this_thread::sleep_for(std::chrono::seconds(2));
  }
  std::string line = strprintf("hios: error: %s: %s; aborting the job", comm.where().c_str(), reason.c_str());
  if (comm.size() > 1 && comm.rank() == 0) line += strprintf(" (every rank's limit; %d ranks)", comm.size());
  if (!stack.empty()) {
    line += comm.size() > 1 ? strprintf(" (call stacks: %s*.txt)", timeout_stack_pattern().c_str())
                            : " (call stack: " + stack + ")";
  }
  std::fprintf(stderr, "%s\n", line.c_str());
  std::fflush(stderr);
  comm.abort(2);
}

PeerWatch::PeerWatch(Comm& comm, std::function<const char*()> phase) {
  if (comm.size() <= 1) return;
  const std::string host = comm.hostname();
  const std::vector<std::string> all = comm.allgather(host + " " + std::to_string(long(::getpid())));
  std::vector<Peer>& peers = peers_;
  for (int r = 0; r < int(all.size()); ++r) {
    if (r == comm.rank()) continue;
    std::istringstream in(all[size_t(r)]);
    std::string h;
    long pid = 0;
    if ((in >> h >> pid) && h == host && pid > 0) peers.push_back({r, pid});
  }
  const std::string where = comm.where();
  const int n = std::snprintf(g_term_line, sizeof g_term_line,
                              "hios: %s: ended by SIGTERM (mpirun stops every rank when one fails or is killed; "
                              "look for that rank's line)\n",
                              where.c_str());
  g_term_len = n > 0 ? std::min(size_t(n), sizeof g_term_line - 1) : size_t(0);
  // Once per process: installed twice, the handler would keep itself as the "previous" one and
  // re-raise into itself forever.
  static std::once_flag installed;
  std::call_once(installed, [] {
    struct sigaction sa {};
    sa.sa_handler = say_terminated_and_reraise;
    sigemptyset(&sa.sa_mask);
    ::sigaction(SIGTERM, &sa, &g_old_term);
  });
  if (peers.empty()) return;
  ticker_.start(std::chrono::milliseconds(100), [peers, where, phase = std::move(phase), &comm] {
    for (const Peer& p : peers) {
      if (::kill(pid_t(p.pid), 0) == 0 || errno != ESRCH) continue;
      std::fflush(stdout);
      std::fprintf(stderr, "hios: error: %s: rank %d (pid %ld on this host) died during %s; aborting the job\n",
                   where.c_str(), p.rank, p.pid, phase());
      std::fflush(stderr);
      comm.abort(2);
    }
    return true;
  });
}

std::string PeerWatch::stopped_peers() const {
  std::string out;
  for (const Peer& p : peers_) {
    // /proc/<pid>/stat: "pid (comm) S ...", the state after the last ')'.
    std::ifstream in("/proc/" + std::to_string(p.pid) + "/stat");
    std::string stat((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    const size_t close = stat.rfind(')');
    if (close == std::string::npos || close + 2 >= stat.size()) continue;
    const char state = stat[close + 2];
    if (state != 'T' && state != 't') continue;
    out += (out.empty() ? "" : ", ") + strprintf("rank %d (pid %ld on this host) is stopped", p.rank, p.pid);
  }
  return out;
}

}  // namespace hios::exec
