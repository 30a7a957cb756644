// Factories for backends and transports, by name. The CPU backend and the MPI transports are
// always registered (the latter when MPI is built); the CUDA backend and the NCCL transport
// register themselves only in CUDA builds, from executor/cuda/, through
// register_cuda_components(), so no CUDA type ever appears outside executor/cuda/.
//
// Plugging in (executor/cuda/CMakeLists.txt): add the sources to the hios_executor target,
// link what they need, and define HIOS_EXECUTOR_WITH_CUDA=1 on hios_executor (PRIVATE); then
// implement hios::exec::register_cuda_components() calling register_backend / register_transport.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "executor/backend.hpp"
#include "executor/comm.hpp"
#include "executor/transport.hpp"

namespace hios::exec {

struct BackendEntry {
  std::string name;
  std::string description;  // one line, for --help and errors
  std::string default_math = "fp32";           // what --math means when not given
  std::string default_layout = "nchw";         // what --layout means when not given
  // What --layout means when not given, for a graph whose arithmetic is mostly matrix products
  // and attention (a transformer) rather than convolutions; empty: default_layout for all.
  std::string default_layout_for_products;
  std::string default_transport = "mpi-host";  // what --transport means when not given, but see below
  // Where every rank is on one host and each rank's device has peer access to every other's:
  // the transport taken instead of default_transport (empty: none). cuda-ipc on CUDA, whose
  // copies over NVLink start sooner and run faster than NCCL's (docs/executor.md).
  std::string one_host_transport;
  std::function<bool(int from, int to)> peer_access;  // device `from` can address device `to`'s memory
  std::function<std::unique_ptr<Backend>(const BackendConfig&)> make;
  // Devices visible to this process (GPU backends); empty for backends that need no device.
  // The runner uses it to map ranks to devices and to fail clearly when there are too few.
  std::function<int()> device_count;
};

// What --layout means for g when not given: default_layout, or default_layout_for_products
// where matmul and attention nodes do more than half of g's FLOPs.
std::string default_layout(const BackendEntry& be, const Graph& g);

struct TransportEntry {
  std::string name;
  std::string description;
  // Throws hios::Error when the transport cannot work with this backend or library (e.g.
  // mpi-cuda-aware when MPIX_Query_cuda_support() is not 1), naming the reason.
  std::function<std::unique_ptr<Transport>(Comm&, Backend&)> make;
  // What Transport::capturable() of what `make` builds says, known before one exists (a
  // session decides on CUDA Graph capture before its first load).
  bool capturable = false;
};

// Registration replaces an entry of the same name (so tests may register fakes).
void register_backend(BackendEntry e);
void register_transport(TransportEntry e);

// Built-in entries are registered on first use of any of the functions below.
std::vector<std::string> backend_names();
std::vector<std::string> transport_names();
// The transport of a multi-rank session that names none, rank r being on hosts[r] with device
// devices[r]: be.one_host_transport where all hosts are one and every pair of distinct devices
// has peer access both ways, be.default_transport otherwise.
std::string default_transport(const BackendEntry& be, const std::vector<std::string>& hosts,
                              const std::vector<int>& devices);
const BackendEntry& find_backend(const std::string& name);      // throws listing the known ones
const TransportEntry& find_transport(const std::string& name);  // throws listing the known ones
std::unique_ptr<Backend> make_backend(const std::string& name, const BackendConfig& cfg);
std::unique_ptr<Transport> make_transport(const std::string& name, Comm& comm, Backend& backend);

// Defined in executor/cpu/ and executor/mpi/ (the latter only when MPI is built).
void register_cpu_backend();
void register_mpi_transports();
// Defined in executor/cuda/ when HIOS_EXECUTOR_WITH_CUDA is set.
void register_cuda_components();

}  // namespace hios::exec
