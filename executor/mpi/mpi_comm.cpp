#include "executor/mpi/mpi_comm.hpp"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>

#include "executor/watchdog.hpp"
#include "graph/error.hpp"

namespace hios::exec {

static std::string first_line(const char* s) {
  std::string out(s);
  // "Open MPI v4.1.4, package: ..., ident: ..." -> "Open MPI v4.1.4": the rest is build detail.
  size_t nl = out.find_first_of("\r\n,");
  if (nl != std::string::npos) out.resize(nl);
  while (!out.empty() && out.back() == ' ') out.pop_back();
  return out;
}

MpiComm::MpiComm() {
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (!initialized) {
    // MULTIPLE so the timeout watchdog thread may call MPI_Abort while the main thread sits
    // in a blocking receive.
    int rc = MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided_);
    HIOS_CHECK(rc == MPI_SUCCESS, "MPI_Init_thread failed with code %d", rc);
    owns_init_ = true;
  } else {
    MPI_Query_thread(&provided_);
  }
  // Errors come back as codes and become one-line hios::Errors naming rank and host; the CLI
  // then aborts the whole job.
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
  MPI_Comm_size(MPI_COMM_WORLD, &size_);
  char name[MPI_MAX_PROCESSOR_NAME] = {0};
  int len = 0;
  if (MPI_Get_processor_name(name, &len) == MPI_SUCCESS && len > 0) {
    host_.assign(name, static_cast<size_t>(len));
  } else {
    char buf[256] = {0};
    host_ = gethostname(buf, sizeof(buf) - 1) == 0 ? buf : "unknown";
  }
  char version[MPI_MAX_LIBRARY_VERSION_STRING] = {0};
  if (MPI_Get_library_version(version, &len) == MPI_SUCCESS) library_ = first_line(version);
  MPI_Comm local;
  check(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank_, MPI_INFO_NULL, &local),
        "MPI_Comm_split_type");
  MPI_Comm_rank(local, &local_rank_);
  MPI_Comm_size(local, &local_size_);
  MPI_Comm_free(&local);
  check(MPI_Comm_dup(MPI_COMM_WORLD, &data_), "MPI_Comm_dup");
  MPI_Comm_set_errhandler(data_, MPI_ERRORS_RETURN);
}

MpiComm::~MpiComm() {
  if (data_ != MPI_COMM_NULL) MPI_Comm_free(&data_);
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (owns_init_ && !finalized) MPI_Finalize();
}

void MpiComm::check(int rc, const char* what) const {
  if (rc == MPI_SUCCESS) return;
  char msg[MPI_MAX_ERROR_STRING] = {0};
  int len = 0;
  MPI_Error_string(rc, msg, &len);
  throw_error("%s: %s failed: %s", where().c_str(), what, msg);
}

void MpiComm::barrier() { check(MPI_Barrier(MPI_COMM_WORLD), "MPI_Barrier"); }

std::vector<std::string> MpiComm::allgather(const std::string& mine) {
  int len = static_cast<int>(mine.size());
  std::vector<int> lens(static_cast<size_t>(size_)), offs(static_cast<size_t>(size_));
  check(MPI_Allgather(&len, 1, MPI_INT, lens.data(), 1, MPI_INT, MPI_COMM_WORLD), "MPI_Allgather");
  int total = 0;
  for (int r = 0; r < size_; ++r) {
    offs[r] = total;
    total += lens[r];
  }
  std::string all(static_cast<size_t>(total), '\0');
  check(MPI_Allgatherv(mine.data(), len, MPI_CHAR, all.data(), lens.data(), offs.data(), MPI_CHAR, MPI_COMM_WORLD),
        "MPI_Allgatherv");
  std::vector<std::string> out;
  for (int r = 0; r < size_; ++r) out.push_back(all.substr(static_cast<size_t>(offs[r]), static_cast<size_t>(lens[r])));
  return out;
}

void MpiComm::broadcast(void* data, size_t bytes, int root) {
  check(MPI_Bcast(data, static_cast<int>(bytes), MPI_BYTE, root, MPI_COMM_WORLD), "MPI_Bcast");
}

void MpiComm::abort(int code) {
  silence_termination_line();  // this rank said why already; mpirun's SIGTERM that follows is ours
  std::fflush(stdout);
  std::fflush(stderr);
  MPI_Abort(MPI_COMM_WORLD, code);
  std::_Exit(code);  // MPI_Abort does not return; this is for libraries that do
}

std::unique_ptr<Comm> make_mpi_comm() { return std::make_unique<MpiComm>(); }

}  // namespace hios::exec
